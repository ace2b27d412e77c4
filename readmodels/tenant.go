package readmodels

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
)

// AuditEntry records who looked at what across tenants.
type AuditEntry struct {
	Subject   string
	Action    string
	Target    string
	RequestID string
}

// DB reads read models as the application role, always within the
// tenant of the context. Modules' readers (examples/orders/orderquery) read through
// it, so that no query can run without its tenant set.
type DB struct {
	pool *pgxpool.Pool
}

// NewDB returns a DB over pool, which must run as db.RoleApp.
func NewDB(pool *pgxpool.Pool) *DB { return &DB{pool: pool} }

// readPoolKey carries the pool a request's reads run on (ReadFrom).
type readPoolKey struct{}

// ReadFrom returns ctx whose reads (InTenant) run on pool, a streaming
// replica of the database (it must run as db.RoleApp, like DB's own).
// The query API binds a request to the replica on which it has waited for
// the request's consistency token, so that the read sees what the wait saw.
// Writes (RecordAudit) always go to DB's own pool, the primary.
func ReadFrom(ctx context.Context, pool *pgxpool.Pool) context.Context {
	return context.WithValue(ctx, readPoolKey{}, pool)
}

// InTenant sends the tenant's set_config and the queued reads in one
// pipelined round trip, on the pool ctx was bound to by ReadFrom, else on
// DB's own. A pipeline runs as one implicit transaction, so the setting
// stays local to it and never reaches the next user of the pooled
// connection; each queued query is one statement, hence one snapshot.
func (r *DB) InTenant(ctx context.Context, queue func(b *pgx.Batch)) error {
	pool := r.pool
	if p, ok := ctx.Value(readPoolKey{}).(*pgxpool.Pool); ok && p != nil {
		pool = p
	}
	return inTenant(ctx, pool, queue)
}

func inTenant(ctx context.Context, pool *pgxpool.Pool, queue func(b *pgx.Batch)) error {
	tenant, ok := domain.TenantFromContext(ctx)
	if !ok {
		return db.ErrNoTenant
	}
	b := &pgx.Batch{}
	b.Queue(db.SetTenantSQL, string(tenant))
	queue(b)
	return pool.SendBatch(ctx, b).Close()
}

// TenantOf returns the tenant of ctx ("" when there is none; InTenant
// fails closed then).
func TenantOf(ctx context.Context) string {
	t, _ := domain.TenantFromContext(ctx)
	return string(t)
}

// RecordAudit stores e under the tenant in ctx (the caller's own tenant),
// on the primary whatever pool ctx's reads are bound to.
func (r *DB) RecordAudit(ctx context.Context, e AuditEntry) error {
	if e.Subject == "" || e.Action == "" || e.Target == "" {
		return errors.New("record audit: subject, action and target are required")
	}
	err := inTenant(ctx, r.pool, func(b *pgx.Batch) {
		b.Queue(`INSERT INTO admin_audit (tenant_id, subject, action, target, request_id) VALUES ($1, $2, $3, $4, nullif($5, ''))`,
			TenantOf(ctx), e.Subject, e.Action, e.Target, e.RequestID)
	})
	if err != nil {
		return fmt.Errorf("record audit: %w", err)
	}
	return nil
}
