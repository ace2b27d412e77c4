package tenancy

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain"
)

// Tier is a named set of default quotas (tenant_tiers, migration 011). A
// tenant's effective quota, key by key, is its own, else its tier's, else
// the serving process's default (Quotas.Over).
type Tier struct {
	Name        string    `json:"name"`
	Description string    `json:"description"`
	Quotas      Quotas    `json:"quotas"`
	Version     int64     `json:"version"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// The seeded tiers (migration 011). Tenants have no tier (NULL) unless
// one is set: an installation's existing tenants keep the process
// defaults under their own quotas.
const (
	TierFree       = "free"
	TierPro        = "pro"
	TierEnterprise = "enterprise"
)

var namePattern = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)

// ErrNoTier: no such tier.
var ErrNoTier = fmt.Errorf("%w: no such tier", domain.ErrNotFound)

// Over returns q with every empty key taken from base: the tenant's own
// quotas over its tier's.
func (q Quotas) Over(base Quotas) Quotas {
	for _, k := range QuotaKeys {
		if f := q.field(k); *f == "" {
			*f = *base.field(k)
		}
	}
	return q
}

const tierColumns = `name, description, quotas, version, updated_at`

func scanTier(row pgx.Row) (Tier, error) {
	var t Tier
	var raw []byte
	if err := row.Scan(&t.Name, &t.Description, &raw, &t.Version, &t.UpdatedAt); err != nil {
		return t, err
	}
	t.Quotas = decodeQuotas(raw)
	return t, nil
}

// Tiers lists every tier, by name.
func (s *Store) Tiers(ctx context.Context, a Actor) ([]Tier, error) {
	if err := s.audit(ctx, a, "list_tiers", "", nil); err != nil {
		return nil, err
	}
	var out []Tier
	err := s.ownerTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+tierColumns+` FROM tenant_tiers ORDER BY name`)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Tier, error) { return scanTier(r) })
		return err
	})
	if out == nil {
		out = []Tier{}
	}
	return out, err
}

// SetTierQuotas creates the tier or replaces its quotas (and, when not
// empty, its description). Every serving process reloads the directory
// when the push reaches it, so the tier's tenants get the new defaults
// without a restart.
func (s *Store) SetTierQuotas(ctx context.Context, a Actor, name string, q Quotas, description string) (Tier, error) {
	if !namePattern.MatchString(name) {
		return Tier{}, fmt.Errorf("%w: the tier name must match [a-z][a-z0-9_-]{0,62}", domain.ErrInvalid)
	}
	if len(description) > 200 {
		return Tier{}, fmt.Errorf("%w: the description is longer than 200 bytes", domain.ErrInvalid)
	}
	if err := q.Validate(); err != nil {
		return Tier{}, err
	}
	if err := s.audit(ctx, a, "set_tier_quotas", "", map[string]any{"tier": name, "quotas": q, "description": description}); err != nil {
		return Tier{}, err
	}
	raw, _ := json.Marshal(q)
	var t Tier
	err := s.ownerTx(ctx, func(tx pgx.Tx) error {
		var err error
		t, err = scanTier(tx.QueryRow(ctx, `INSERT INTO tenant_tiers (name, quotas, description) VALUES ($1, $2, $3)
			ON CONFLICT (name) DO UPDATE SET quotas = EXCLUDED.quotas,
				description = CASE WHEN $3 = '' THEN tenant_tiers.description ELSE EXCLUDED.description END
			RETURNING `+tierColumns, name, raw, description))
		return err
	})
	return t, err
}

// SetTier puts the tenant in a tier ("" takes it out: the process
// defaults under its own quotas).
func (s *Store) SetTier(ctx context.Context, a Actor, id domain.TenantID, tier string) (Tenant, error) {
	if tier != "" && !namePattern.MatchString(tier) {
		return Tenant{}, fmt.Errorf("%w: the tier name must match [a-z][a-z0-9_-]{0,62}", domain.ErrInvalid)
	}
	if err := s.audit(ctx, a, "set_tier", id, map[string]any{"tier": tier}); err != nil {
		return Tenant{}, err
	}
	return s.setColumn(ctx, id, "tier", tier, func(cur Tenant) bool { return cur.Tier == tier }, func(tx pgx.Tx) error {
		if tier == "" {
			return nil
		}
		var ok bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tenant_tiers WHERE name = $1)`, tier).Scan(&ok); err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w %q: `strata tenants tiers` lists them", ErrNoTier, tier)
		}
		return nil
	})
}

// SetCohort names the cohort the tenant's metrics are labelled with (its
// tenant_id is then a label too, up to STRATA_METRICS_COHORT_CAP tenants
// per process); "" takes it out of any cohort.
func (s *Store) SetCohort(ctx context.Context, a Actor, id domain.TenantID, cohort string) (Tenant, error) {
	if cohort != "" && !namePattern.MatchString(cohort) {
		return Tenant{}, fmt.Errorf("%w: the cohort name must match [a-z][a-z0-9_-]{0,62}", domain.ErrInvalid)
	}
	if err := s.audit(ctx, a, "set_cohort", id, map[string]any{"cohort": cohort}); err != nil {
		return Tenant{}, err
	}
	return s.setColumn(ctx, id, "cohort", cohort, func(cur Tenant) bool { return cur.Cohort == cohort }, nil)
}

// setColumn sets tenants.<column> (tier or cohort; "" is NULL) unless
// same says it already has the value; check, if set, runs first in the
// transaction.
func (s *Store) setColumn(ctx context.Context, id domain.TenantID, column, value string, same func(Tenant) bool, check func(pgx.Tx) error) (Tenant, error) {
	var t Tenant
	err := s.ownerTx(ctx, func(tx pgx.Tx) error {
		cur, err := getTenant(ctx, tx, id, true)
		if err != nil {
			return err
		}
		if same(cur) {
			t = cur
			return nil
		}
		if check != nil {
			if err := check(tx); err != nil {
				return err
			}
		}
		t, err = scanTenant(tx.QueryRow(ctx, `UPDATE tenants SET `+column+` = nullif($2, '') WHERE id = $1 RETURNING `+tenantColumns, id, value))
		return err
	})
	return t, err
}

// loadTiers reads every tier's quotas (the serving role may read
// tenant_tiers). A database from before migration 011 has no tiers.
func loadTiers(ctx context.Context, q querier) (map[string]Quotas, error) {
	rows, err := q.Query(ctx, `SELECT name, quotas FROM tenant_tiers`)
	if err != nil {
		return nil, fmt.Errorf("read the tenant tiers: %w", err)
	}
	defer rows.Close()
	out := map[string]Quotas{}
	for rows.Next() {
		var name string
		var raw []byte
		if err := rows.Scan(&name, &raw); err != nil {
			return nil, err
		}
		out[name] = decodeQuotas(raw)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the tenant tiers: %w", err)
	}
	return out, nil
}

// tierPayload reports whether a push names a tier ("tier:<name>:<version>"):
// the Directory then reloads everything, since any tenant may be in it.
func tierPayload(p string) bool {
	return len(p) > 5 && p[:5] == "tier:"
}

// withTiers fills e's effective limits from its own quotas over its tier's.
func withTiers(e Entry, tiers map[string]Quotas) Entry {
	eff := e.Quotas
	if e.Tier != "" {
		eff = eff.Over(tiers[e.Tier])
	}
	e.Limits = eff.Limits()
	return e
}

// Effective returns the tenant's effective quotas as this process applies
// them: its own, else its tier's (keys still empty fall to the process
// defaults).
func (d *Directory) Effective(id domain.TenantID) (Quotas, bool) {
	e, ok := d.Lookup(id)
	if !ok {
		return Quotas{}, false
	}
	if e.Tier == "" {
		return e.Quotas, true
	}
	return e.Quotas.Over((*d.tierQuotas())[e.Tier]), true
}

func (d *Directory) tierQuotas() *map[string]Quotas {
	if p := d.tiers.Load(); p != nil {
		return p
	}
	return &map[string]Quotas{}
}

// Record audits a platform call that reads no directory row (the heavy
// hitters): who, when, what, in tenant_audit like every other.
func (s *Store) Record(ctx context.Context, a Actor, action string, detail map[string]any) error {
	return s.audit(ctx, a, action, "", detail)
}
