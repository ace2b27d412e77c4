package tenancy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/internal/failpoint"
)

// Errors of the Store, besides the database's.
var (
	// ErrNotFound: no such tenant in the directory.
	ErrNotFound = fmt.Errorf("%w: no such tenant", domain.ErrNotFound)
	// ErrNoOwner: the Store has no owner connection.
	ErrNoOwner = errors.New("the tenant directory is written on the owner connection (DATABASE_URL), which this process does not have")
)

// StoreConfig configures a Store.
type StoreConfig struct {
	// Pool is the owner connection (DATABASE_URL): a login that may become
	// strata_owner. Every transaction switches to strata_owner with SET
	// LOCAL ROLE, whatever role the pool's sessions run as otherwise.
	Pool *pgxpool.Pool
	// DefaultQuotasFunc, if set, gives the quotas the quotas step writes
	// when a provision request brings none: the tenant's values of the
	// environment's *_OVERRIDES, so that they move into the directory.
	DefaultQuotasFunc func(domain.TenantID) Quotas
	// AfterStepFunc, if set, runs after each provisioning step committed
	// (tests inject a failure between steps with it). Its error ends the
	// provision call there.
	AfterStepFunc func(ctx context.Context, tenant domain.TenantID, step string) error
	// NowFunc is the clock of the provisioning record (default time.Now).
	NowFunc func() time.Time
}

// Store is the platform path: the only writer of the directory. Every call
// is recorded in tenant_audit first.
type Store struct {
	cfg StoreConfig
}

// NewStore returns a Store on cfg.Pool.
func NewStore(cfg StoreConfig) (*Store, error) {
	if cfg.Pool == nil {
		return nil, ErrNoOwner
	}
	if cfg.NowFunc == nil {
		cfg.NowFunc = time.Now
	}
	return &Store{cfg: cfg}, nil
}

// Actor is who makes a platform call.
type Actor struct {
	// Subject: "api:<sub>@<tenant>" over HTTP, "cli:<user>" from the CLI.
	Subject   string
	RequestID string
}

// ownerTx runs fn in a transaction as strata_owner.
func (s *Store) ownerTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return db.OwnerTx(ctx, s.cfg.Pool, fn)
}

// audit records a call before it runs: a call that fails afterwards is
// still on record.
func (s *Store) audit(ctx context.Context, a Actor, action string, tenant domain.TenantID, detail map[string]any) error {
	if a.Subject == "" {
		return fmt.Errorf("%w: a platform call needs a subject for the audit", domain.ErrInvalid)
	}
	if detail == nil {
		detail = map[string]any{}
	}
	raw, err := json.Marshal(detail)
	if err != nil {
		return err
	}
	var t, rid *string
	if tenant != "" {
		t = new(string(tenant))
	}
	if a.RequestID != "" {
		rid = &a.RequestID
	}
	err = s.ownerTx(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO tenant_audit (subject, action, tenant, detail, request_id) VALUES ($1, $2, $3, $4, $5)`,
			a.Subject, action, t, raw, rid)
		if err != nil {
			return fmt.Errorf("record the platform call in tenant_audit: %w", err)
		}
		return nil
	})
	if err == nil {
		MarkAudited(ctx) // the HTTP edge records what no Store call did (audit_trail.go)
	}
	return err
}

const tenantColumns = `id, name, status, coalesce(status_reason, ''), quotas, retention, placement, provisioning, version, created_at, updated_at, coalesce(tier, ''), coalesce(cohort, '')`

func scanTenant(row pgx.Row) (Tenant, error) {
	var t Tenant
	var quotas, retention, prov []byte
	err := row.Scan(&t.ID, &t.Name, &t.Status, &t.StatusReason, &quotas, &retention, &t.Placement, &prov, &t.Version, &t.CreatedAt, &t.UpdatedAt, &t.Tier, &t.Cohort)
	if err != nil {
		return t, err
	}
	t.Quotas = decodeQuotas(quotas)
	t.Retention = map[string]any{}
	_ = json.Unmarshal(retention, &t.Retention)
	t.Provisioning = map[string]time.Time{}
	_ = json.Unmarshal(prov, &t.Provisioning)
	return t, nil
}

func getTenant(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, id domain.TenantID, lock bool) (Tenant, error) {
	sql := `SELECT ` + tenantColumns + ` FROM tenants WHERE id = $1`
	if lock {
		sql += ` FOR UPDATE`
	}
	t, err := scanTenant(q.QueryRow(ctx, sql, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return t, fmt.Errorf("%w %q", ErrNotFound, id)
	}
	return t, err
}

// List returns every tenant, by ID.
func (s *Store) List(ctx context.Context, a Actor) ([]Tenant, error) {
	if err := s.audit(ctx, a, "list", "", nil); err != nil {
		return nil, err
	}
	var out []Tenant
	err := s.ownerTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+tenantColumns+` FROM tenants ORDER BY id`)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Tenant, error) { return scanTenant(r) })
		return err
	})
	if out == nil {
		out = []Tenant{}
	}
	return out, err
}

// Get returns one tenant (ErrNotFound).
func (s *Store) Get(ctx context.Context, a Actor, id domain.TenantID) (Tenant, error) {
	if err := s.audit(ctx, a, "show", id, nil); err != nil {
		return Tenant{}, err
	}
	var t Tenant
	err := s.ownerTx(ctx, func(tx pgx.Tx) (err error) {
		t, err = getTenant(ctx, tx, id, false)
		return err
	})
	return t, err
}

// Suspend stops serving the tenant: every serving process refuses its
// commands, queries and admin requests with 403 tenant_suspended once the
// push reaches it (docs/tenants.md has the measured bound). Its data, its
// projections, relay and dead letters are untouched. Suspending a
// suspended tenant changes nothing; a tenant that is not active cannot be
// suspended (domain.ErrRejected).
func (s *Store) Suspend(ctx context.Context, a Actor, id domain.TenantID, reason string) (Tenant, error) {
	return s.transition(ctx, a, "suspend", id, reason, StatusActive, StatusSuspended)
}

// Resume serves a suspended tenant again. Resuming an active tenant
// changes nothing.
func (s *Store) Resume(ctx context.Context, a Actor, id domain.TenantID, reason string) (Tenant, error) {
	return s.transition(ctx, a, "resume", id, reason, StatusSuspended, StatusActive)
}

func (s *Store) transition(ctx context.Context, a Actor, action string, id domain.TenantID, reason string, from, to Status) (Tenant, error) {
	if len(reason) > 500 {
		return Tenant{}, fmt.Errorf("%w: the reason is longer than 500 bytes", domain.ErrInvalid)
	}
	if err := s.audit(ctx, a, action, id, map[string]any{"reason": reason}); err != nil {
		return Tenant{}, err
	}
	var t Tenant
	err := s.ownerTx(ctx, func(tx pgx.Tx) error {
		cur, err := getTenant(ctx, tx, id, true)
		if err != nil {
			return err
		}
		switch cur.Status {
		case to:
			t = cur
			return nil
		case from:
		default:
			return fmt.Errorf("%w: tenant %s is %s; only an %s tenant can be %sed", domain.ErrRejected, id, cur.Status, from, action)
		}
		if to == StatusActive {
			if err := refuseUnfinishedImport(ctx, tx, id); err != nil {
				return err
			}
		}
		t, err = scanTenant(tx.QueryRow(ctx, `UPDATE tenants SET status = $2, status_reason = nullif($3, '') WHERE id = $1 RETURNING `+tenantColumns,
			id, to, reason))
		return err
	})
	return t, err
}

// SetQuotas replaces the tenant's quotas. Serving processes apply them to
// the tenant's next request once the push reaches them, without a restart.
func (s *Store) SetQuotas(ctx context.Context, a Actor, id domain.TenantID, q Quotas) (Tenant, error) {
	if err := q.Validate(); err != nil {
		return Tenant{}, err
	}
	if err := s.audit(ctx, a, "set_quotas", id, map[string]any{"quotas": q}); err != nil {
		return Tenant{}, err
	}
	raw, _ := json.Marshal(q)
	var t Tenant
	err := s.ownerTx(ctx, func(tx pgx.Tx) error {
		cur, err := getTenant(ctx, tx, id, true)
		if err != nil {
			return err
		}
		if cur.Quotas == q {
			t = cur
			return nil
		}
		t, err = scanTenant(tx.QueryRow(ctx, `UPDATE tenants SET quotas = $2 WHERE id = $1 RETURNING `+tenantColumns, id, raw))
		return err
	})
	return t, err
}

// hit is the failpoint after each provisioning step (kill -9 tests).
func hit(step string) { failpoint.Hit("tenancy.provision.after-" + step) }
