package tenancy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain"
)

// The retention windows' keys (tenants.retention; docs/tenants.md,
// "Retention"). Each names what the retention job deletes once older than
// the window.
const (
	// RetainIdempotency: idempotency records (idempotency_keys), by
	// created_at. A key retried after its record is gone is a new command.
	RetainIdempotency = "idempotency_records"
	// RetainDeadLetters: resolved dead letters (retried, discarded,
	// superseded), by resolved_at. Parked letters are never deleted.
	RetainDeadLetters = "resolved_dead_letters"
	// RetainAudit: the tenant's admin_audit rows, by at. The platform's
	// own record, tenant_audit, is not a tenant's and is kept.
	RetainAudit = "audit"
)

// RetentionKeys are the keys, as the CLI and the API take them.
var RetentionKeys = []string{RetainIdempotency, RetainDeadLetters, RetainAudit}

// Window is how long rows of one kind are kept. Keep (the zero Window is
// not it) means never deleted.
type Window struct {
	D    time.Duration
	Keep bool
}

// String renders w as ParseWindow reads it: "30d", "36h", "keep".
func (w Window) String() string {
	if w.Keep {
		return "keep"
	}
	if w.D%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(w.D/(24*time.Hour)), 10) + "d"
	}
	return w.D.String()
}

// MinWindow is the shortest window accepted: retention is housekeeping,
// not erasure.
const MinWindow = time.Hour

// ParseWindow reads a window: a number of days ("30d"), a Go duration
// ("36h"), or "keep" (never delete).
func ParseWindow(s string) (Window, error) {
	s = strings.TrimSpace(s)
	if s == "keep" {
		return Window{Keep: true}, nil
	}
	var d time.Duration
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days < 0 || days > 100*365 {
			return Window{}, fmt.Errorf("window %q: want days (30d), a duration (36h) or keep", s)
		}
		d = time.Duration(days) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return Window{}, fmt.Errorf("window %q: want days (30d), a duration (36h) or keep", s)
		}
	}
	if d < MinWindow {
		return Window{}, fmt.Errorf("window %q: shorter than %s (to delete a tenant's data, erase it)", s, MinWindow)
	}
	return Window{D: d}, nil
}

// Windows are a window per key.
type Windows map[string]Window

// DefaultWindows are the installation defaults when the environment sets
// none (STRATA_RETENTION_*): long, so that retention changes nothing a
// client could notice within any ordinary retry horizon.
func DefaultWindows() Windows {
	return Windows{
		RetainIdempotency: {D: 30 * 24 * time.Hour},
		RetainDeadLetters: {D: 90 * 24 * time.Hour},
		RetainAudit:       {D: 365 * 24 * time.Hour},
	}
}

// RetentionOf reads a tenant's retention object: the keys it sets, valid
// ones only (a value written by hand that does not parse keeps the
// default, never "delete everything").
func RetentionOf(raw map[string]any) Windows {
	out := Windows{}
	for k, v := range raw {
		s, ok := v.(string)
		if !ok || !slices.Contains(RetentionKeys, k) {
			continue
		}
		if w, err := ParseWindow(s); err == nil {
			out[k] = w
		}
	}
	return out
}

// ValidateRetention checks a retention object's keys and values.
func ValidateRetention(r map[string]string) error {
	var errs []error
	for k, v := range r {
		if !slices.Contains(RetentionKeys, k) {
			errs = append(errs, fmt.Errorf("unknown retention key %q: want one of %v", k, RetentionKeys))
			continue
		}
		if _, err := ParseWindow(v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", k, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: retention: %v", domain.ErrInvalid, err)
	}
	return nil
}

// SetRetention replaces the tenant's retention windows (a key left out
// takes the installation default again). The retention job reads them on
// its next pass.
func (s *Store) SetRetention(ctx context.Context, a Actor, id domain.TenantID, r map[string]string) (Tenant, error) {
	if r == nil {
		r = map[string]string{}
	}
	if err := ValidateRetention(r); err != nil {
		return Tenant{}, err
	}
	if err := s.audit(ctx, a, "set_retention", id, map[string]any{"retention": r}); err != nil {
		return Tenant{}, err
	}
	var t Tenant
	err := s.ownerTx(ctx, func(tx pgx.Tx) error {
		if _, err := getTenant(ctx, tx, id, true); err != nil {
			return err
		}
		var err error
		t, err = scanTenant(tx.QueryRow(ctx, `UPDATE tenants SET retention = $2 WHERE id = $1 RETURNING `+tenantColumns, id, r))
		return err
	})
	return t, err
}
