package tenancy

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/httpapi"
)

// Status is a tenant's lifecycle state.
type Status string

// The lifecycle states. Only active tenants are served. Erasing and erased
// are the erasure workflow's (a later migration); nothing here sets them,
// but every serving path already refuses them.
const (
	StatusProvisioning Status = "provisioning" // the row exists; ProvisionSteps have not all run
	StatusActive       Status = "active"
	StatusSuspended    Status = "suspended" // reversible: data kept, nothing served
	StatusErasing      Status = "erasing"
	StatusErased       Status = "erased"
	// The archive's (package tenancy/archive, migration 019): out of
	// service while written out, its data only in the archive store, being
	// imported back.
	StatusArchiving   Status = "archiving"
	StatusArchived    Status = "archived"
	StatusRehydrating Status = "rehydrating"
)

// DefaultPlacement is the shared database every tenant lives in until
// placements exist (ARCHITECTURE decision 14).
const DefaultPlacement = "pool"

// Tenant is a row of the directory, as the platform path sees it.
type Tenant struct {
	ID           domain.TenantID      `json:"id"`
	Name         string               `json:"name"`
	Status       Status               `json:"status"`
	StatusReason string               `json:"status_reason,omitempty"`
	Quotas       Quotas               `json:"quotas"`
	Retention    map[string]any       `json:"retention"`
	Placement    string               `json:"placement"`
	Provisioning map[string]time.Time `json:"provisioning"` // step -> when it was done
	Version      int64                `json:"version"`
	CreatedAt    time.Time            `json:"created_at"`
	UpdatedAt    time.Time            `json:"updated_at"`
	Tier         string               `json:"tier,omitempty"`   // "": no tier (tiers.go)
	Cohort       string               `json:"cohort,omitempty"` // "": in no cohort
}

// StepsDone lists the provisioning steps done, in ProvisionSteps order.
func (t Tenant) StepsDone() []string {
	var out []string
	for _, s := range ProvisionSteps {
		if _, ok := t.Provisioning[s.Name]; ok {
			out = append(out, s.Name)
		}
	}
	return out
}

// StepsPending lists the provisioning steps still to run.
func (t Tenant) StepsPending() []string {
	var out []string
	for _, s := range ProvisionSteps {
		if _, ok := t.Provisioning[s.Name]; !ok {
			out = append(out, s.Name)
		}
	}
	return out
}

// Quotas are a tenant's own serving limits. An empty field keeps the
// serving process's default (STRATA_RATE_COMMANDS and friends, then their
// *_OVERRIDES). Rates are in httpapi.ParseRate's syntax ("500/s,burst=1000",
// "unlimited"), in-flight limits in httpapi.ParseSlots' ("128",
// "unlimited"). Stored as the tenants.quotas object under these keys.
type Quotas struct {
	RateCommands     string `json:"rate_commands,omitempty"`
	RateQueries      string `json:"rate_queries,omitempty"`
	InFlightCommands string `json:"in_flight_commands,omitempty"`
	InFlightQueries  string `json:"in_flight_queries,omitempty"`
	InFlightWaits    string `json:"in_flight_waits,omitempty"`
}

// QuotaKeys are the keys of Quotas, as SetQuota and the CLI take them.
var QuotaKeys = []string{"rate_commands", "rate_queries", "in_flight_commands", "in_flight_queries", "in_flight_waits"}

func (q *Quotas) field(key string) *string {
	switch key {
	case "rate_commands":
		return &q.RateCommands
	case "rate_queries":
		return &q.RateQueries
	case "in_flight_commands":
		return &q.InFlightCommands
	case "in_flight_queries":
		return &q.InFlightQueries
	case "in_flight_waits":
		return &q.InFlightWaits
	}
	return nil
}

// Set sets key to value ("" removes it: the default applies again).
func (q *Quotas) Set(key, value string) error {
	f := q.field(key)
	if f == nil {
		return fmt.Errorf("%w: unknown quota %q: want one of %v", domain.ErrInvalid, key, QuotaKeys)
	}
	*f = value
	return q.Validate()
}

// Validate reports every value that does not parse.
func (q Quotas) Validate() error {
	var errs []error
	for _, k := range QuotaKeys[:2] {
		if v := *q.field(k); v != "" {
			if _, err := httpapi.ParseRate(v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", k, err))
			}
		}
	}
	for _, k := range QuotaKeys[2:] {
		if v := *q.field(k); v != "" {
			if _, err := httpapi.ParseSlots(v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", k, err))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: quotas: %v", domain.ErrInvalid, err)
	}
	return nil
}

// Limits are Quotas parsed, as the limiters take them.
type Limits struct {
	Rates httpapi.TenantRates
	Slots httpapi.TenantSlots
}

// Limits parses q. A value that does not parse (written around Validate,
// by hand) is left out: the default applies, never no limit.
func (q Quotas) Limits() Limits {
	var l Limits
	if r, err := httpapi.ParseRate(q.RateCommands); q.RateCommands != "" && err == nil {
		l.Rates.Commands = &r
	}
	if r, err := httpapi.ParseRate(q.RateQueries); q.RateQueries != "" && err == nil {
		l.Rates.Queries = &r
	}
	for _, s := range []struct {
		v   string
		dst *int
	}{{q.InFlightCommands, &l.Slots.Commands}, {q.InFlightQueries, &l.Slots.Queries}, {q.InFlightWaits, &l.Slots.Waits}} {
		if n, err := httpapi.ParseSlots(s.v); s.v != "" && err == nil {
			*s.dst = n
		}
	}
	return l
}

// QuotasFromOverrides returns tenant's values of STRATA_RATE_OVERRIDES and
// STRATA_TENANT_IN_FLIGHT_OVERRIDES (as parsed by httpapi) as Quotas: what
// provisioning writes into the directory for a tenant that had overrides
// in the environment, so that they move there.
func QuotasFromOverrides(tenant domain.TenantID, rates map[domain.TenantID]httpapi.TenantRates, slots map[domain.TenantID]httpapi.TenantSlots) Quotas {
	var q Quotas
	if r, ok := rates[tenant]; ok {
		if r.Commands != nil {
			q.RateCommands = r.Commands.String()
		}
		if r.Queries != nil {
			q.RateQueries = r.Queries.String()
		}
	}
	if s, ok := slots[tenant]; ok {
		for _, x := range []struct {
			n   int
			dst *string
		}{{s.Commands, &q.InFlightCommands}, {s.Queries, &q.InFlightQueries}, {s.Waits, &q.InFlightWaits}} {
			switch {
			case x.n == httpapi.UnlimitedSlots:
				*x.dst = "unlimited"
			case x.n > 0:
				*x.dst = fmt.Sprint(x.n)
			}
		}
	}
	return q
}

func decodeQuotas(raw []byte) Quotas {
	var q Quotas
	_ = json.Unmarshal(raw, &q) // a malformed object keeps the defaults
	return q
}
