package portability

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
	"github.com/strata-es/strata/domain/event"
)

// Table is a read-model table of a module and what in it is the source
// database's: columns holding a log position (a row identity of the
// events table), which an import into another database cannot reproduce.
// The archive carries the event's ordinal in their place.
type Table struct {
	Name            string
	PositionColumns []string
}

// PositionColumnser is what a projection implements when a table it writes
// stores log positions (for example the fulfilment projection's
// order_fulfilment.last_position): the columns, by name, in any of its
// tables.
type PositionColumnser interface {
	PositionColumns() []string
}

// Config configures a Service.
type Config struct {
	// App is a pool running as strata_app: the tenant's events and
	// idempotency records are read and written with it, under row-level
	// security for the tenant, as commands read and write them.
	App *pgxpool.Pool
	// Projector is a pool running as strata_projector: the read models and
	// dead letters are read with it, under the tenant's setting, as
	// projections write them. Events are never read with it (the projector
	// reads every tenant's events).
	Projector *pgxpool.Pool
	// Owner is the owner connection (DATABASE_URL): the directory, the
	// audit and the export jobs, as strata_owner.
	Owner *pgxpool.Pool
	// Tables are the read-model tables of every module, taken from the
	// modules' registered projections (cmd/strata passes them).
	Tables []Table
	// Projections are the names of every projection: an export waits until
	// each has applied the tenant's last event before reading the read
	// models, an import waits for them to catch up.
	Projections []string
	// Registry holds every module's event codecs: an import decodes every
	// event of an archive with it (strictly) and checks it against its
	// module's rules before writing anything. Required by Import only.
	Registry *event.Registry
	// Provision provisions a tenant an import brings that the directory
	// does not have (the platform path, audited); nil refuses such an
	// import.
	Provision func(ctx context.Context, tenant domain.TenantID) error
	// Actor is recorded in tenant_audit ("cli:<user>", "api:<sub>@<t>").
	Actor string
	// CatchUp bounds the wait for projections (default 2 minutes).
	CatchUp time.Duration
	// Progress, if set, receives progress reports.
	Progress func(Progress)

	// filterTenant, set by tests only, is the tenant the queries ask for
	// in their WHERE clauses, instead of the tenant of the transaction's
	// setting: it proves that row-level security, not the query, confines
	// what an export reads.
	filterTenant domain.TenantID
}

// Progress is a report of long work.
type Progress struct {
	Phase string `json:"phase"` // "events", "idempotency", "readmodels", "dead_letters", "catch-up", "verify" ("done" for a job)
	File  string `json:"file,omitempty"`
	Rows  int64  `json:"rows"`
	Total int64  `json:"total,omitempty"` // 0 when unknown
}

// Service exports and imports tenants.
type Service struct {
	cfg Config
}

// Errors.
var (
	// ErrNotEmpty: an import into a tenant that already has data.
	ErrNotEmpty = fmt.Errorf("%w: the tenant is not empty", domain.ErrRejected)
	// ErrNotCaughtUp: the projections did not reach the tenant's last
	// event in time.
	ErrNotCaughtUp = errors.New("the projections did not catch up")
)

// New returns a Service.
func New(cfg Config) (*Service, error) {
	var errs []error
	if cfg.App == nil {
		errs = append(errs, errors.New("portability: App pool (strata_app) is required"))
	}
	if cfg.Projector == nil {
		errs = append(errs, errors.New("portability: Projector pool (strata_projector) is required"))
	}
	if cfg.Owner == nil {
		errs = append(errs, errors.New("portability: the owner connection (DATABASE_URL) is required"))
	}
	if cfg.Actor == "" {
		errs = append(errs, errors.New("portability: an Actor for the audit is required"))
	}
	if cfg.CatchUp <= 0 {
		cfg.CatchUp = 2 * time.Minute
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &Service{cfg: cfg}, nil
}

func (s *Service) progress(p Progress) {
	if s.cfg.Progress != nil {
		s.cfg.Progress(p)
	}
}

// WithActor returns a Service that records actor in the audit.
func (s *Service) WithActor(actor string, progress func(Progress)) *Service {
	c := s.cfg
	c.Actor, c.Progress = actor, progress
	return &Service{cfg: c}
}

// tenantTx runs fn in a read-only (or read-write) transaction on pool with
// the tenant's setting, after checking that the session is the role the
// caller means (a pool of the wrong role is a wiring error, refused: the
// projector must never read events).
func tenantTx(ctx context.Context, pool *pgxpool.Pool, role string, tenant domain.TenantID, readOnly bool, fn func(pgx.Tx) error) error {
	opts := pgx.TxOptions{}
	if readOnly {
		opts = pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}
	}
	return pgx.BeginTxFunc(ctx, pool, opts, func(tx pgx.Tx) error {
		var current string
		if err := tx.QueryRow(ctx, `SELECT current_user`).Scan(&current); err != nil {
			return err
		}
		if current != role {
			return fmt.Errorf("portability: the %s pool runs as %s: refusing to read the tenant's data as another role", role, current)
		}
		if err := db.SetTenant(ctx, tx, string(tenant)); err != nil {
			return err
		}
		// Timestamps in read-model rows render in UTC, whatever the
		// server's default, so that two databases write the same bytes.
		if _, err := tx.Exec(ctx, `SET LOCAL TimeZone TO 'UTC'`); err != nil {
			return err
		}
		return fn(tx)
	})
}

// ownerTx runs fn as strata_owner on the owner connection.
func (s *Service) ownerTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return db.OwnerTx(ctx, s.cfg.Owner, fn)
}

// audit records a platform call in tenant_audit before it runs.
func (s *Service) audit(ctx context.Context, action string, tenant domain.TenantID, detail map[string]any) error {
	if detail == nil {
		detail = map[string]any{} // an object, never JSON null (the OpenAPI document's PlatformAuditEntry)
	}
	raw, err := json.Marshal(detail)
	if err != nil {
		return err
	}
	return s.ownerTx(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO tenant_audit (subject, action, tenant, detail) VALUES ($1, $2, $3, $4)`, s.cfg.Actor, action, tenant, raw)
		if err != nil {
			return fmt.Errorf("record the platform call in tenant_audit: %w", err)
		}
		return nil
	})
}

// directoryEntry reads the tenant's status and placement; ok false when the
// directory has no such tenant.
func (s *Service) directoryEntry(ctx context.Context, tenant domain.TenantID) (status, placement string, ok bool, err error) {
	err = s.ownerTx(ctx, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `SELECT status, placement FROM tenants WHERE id = $1`, tenant).Scan(&status, &placement)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		ok = err == nil
		return err
	})
	return status, placement, ok, err
}

// position is a log position: the (tx_id, position) pair readers order by.
type position struct {
	tx  string // xid8 as text
	pos int64
}

func (p position) String() string {
	if p.tx == "" {
		return ""
	}
	return fmt.Sprintf("%s/%d", p.tx, p.pos)
}

// head returns the tenant's last event's position and its event count, as
// the application role sees them.
func (s *Service) head(ctx context.Context, tenant domain.TenantID) (position, int64, error) {
	var p position
	var n int64
	err := tenantTx(ctx, s.cfg.App, db.RoleApp, tenant, true, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM events WHERE tenant_id = $1`, s.filter(tenant)).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		// tx_text, not tx_id: ORDER BY must sort the xid8, not its text.
		return tx.QueryRow(ctx, `SELECT tx_id::text AS tx_text, position FROM events WHERE tenant_id = $1 ORDER BY tx_id DESC, position DESC LIMIT 1`,
			s.filter(tenant)).Scan(&p.tx, &p.pos)
	})
	return p, n, err
}

// filter is the tenant the queries name (the transaction's, except in the
// enforcement test).
func (s *Service) filter(tenant domain.TenantID) domain.TenantID {
	if s.cfg.filterTenant != "" {
		return s.cfg.filterTenant
	}
	return tenant
}

// waitCaughtUp waits until every projection's checkpoint is at or past p.
func (s *Service) waitCaughtUp(ctx context.Context, p position, timeout time.Duration) error {
	if p.tx == "" || len(s.cfg.Projections) == 0 {
		return nil
	}
	deadline := time.Now().Add(timeout)
	for {
		var behind []string
		rows, err := s.cfg.App.Query(ctx, `SELECT n FROM unnest($1::text[]) AS n
WHERE NOT EXISTS (SELECT 1 FROM projection_checkpoints c WHERE c.projection = n
                  AND (c.pos_major, c.pos_minor) >= ($2::text::numeric, $3::numeric)) ORDER BY n`, s.cfg.Projections, p.tx, p.pos)
		if err == nil {
			behind, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		if err != nil {
			return fmt.Errorf("read the projections' checkpoints: %w", err)
		}
		if len(behind) == 0 {
			return nil
		}
		s.progress(Progress{Phase: "catch-up", Rows: int64(len(s.cfg.Projections) - len(behind)), Total: int64(len(s.cfg.Projections))})
		if time.Now().After(deadline) {
			return fmt.Errorf("%w within %s: %v have not applied the tenant's last event (%s); is a projector running (strata serve with the projector role)?",
				ErrNotCaughtUp, timeout, behind, p)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
