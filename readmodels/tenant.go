package readmodels

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/internal/db"
)

// AuditEntry records who looked at what across tenants.
type AuditEntry struct {
	Subject   string
	Action    string
	Target    string
	RequestID string
}

// DB reads read models as the application role, always within the
// tenant of the context. Modules' readers (readmodels/orders) read through
// it, so that no query can run without its tenant set.
type DB struct {
	pool *pgxpool.Pool
}

// NewDB returns a DB over pool, which must run as db.RoleApp.
func NewDB(pool *pgxpool.Pool) *DB { return &DB{pool: pool} }

// InTenant sends the tenant's set_config and the queued reads in one
// pipelined round trip. A pipeline runs as one implicit transaction, so the
// setting stays local to it and never reaches the next user of the pooled
// connection; each queued query is one statement, hence one snapshot.
func (r *DB) InTenant(ctx context.Context, queue func(b *pgx.Batch)) error {
	tenant, ok := domain.TenantFromContext(ctx)
	if !ok {
		return db.ErrNoTenant
	}
	b := &pgx.Batch{}
	b.Queue(db.SetTenantSQL, string(tenant))
	queue(b)
	return r.pool.SendBatch(ctx, b).Close()
}

// TenantOf returns the tenant of ctx ("" when there is none; InTenant
// fails closed then).
func TenantOf(ctx context.Context) string {
	t, _ := domain.TenantFromContext(ctx)
	return string(t)
}

// RecordAudit stores e under the tenant in ctx (the caller's own tenant).
func (r *DB) RecordAudit(ctx context.Context, e AuditEntry) error {
	if e.Subject == "" || e.Action == "" || e.Target == "" {
		return errors.New("record audit: subject, action and target are required")
	}
	err := r.InTenant(ctx, func(b *pgx.Batch) {
		b.Queue(`INSERT INTO admin_audit (tenant_id, subject, action, target, request_id) VALUES ($1, $2, $3, $4, nullif($5, ''))`,
			TenantOf(ctx), e.Subject, e.Action, e.Target, e.RequestID)
	})
	if err != nil {
		return fmt.Errorf("record audit: %w", err)
	}
	return nil
}
