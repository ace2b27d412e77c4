package readmodels

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// AuditRecord is one row of admin_audit as GET /v1/admin/audit shows it.
type AuditRecord struct {
	ID        int64     `json:"id"`
	At        time.Time `json:"at"`
	Subject   string    `json:"subject"`
	Action    string    `json:"action"`
	Target    string    `json:"target"`
	RequestID string    `json:"request_id,omitempty"`
}

// AuditTrail returns the newest admin_audit rows of the tenant in ctx
// (row-level security keeps every other tenant's out), newest first, at
// most limit of them, with IDs below before when before > 0 (the next
// page).
func (r *DB) AuditTrail(ctx context.Context, limit int, before int64) ([]AuditRecord, error) {
	if limit < 1 || limit > 1000 {
		return nil, errors.New("audit trail: limit must be from 1 to 1000")
	}
	out := []AuditRecord{}
	err := r.InTenant(ctx, func(b *pgx.Batch) {
		b.Queue(`SELECT id, at, subject, action, target, coalesce(request_id, '') FROM admin_audit
WHERE tenant_id = $1 AND ($2::bigint = 0 OR id < $2::bigint) ORDER BY id DESC LIMIT $3`, TenantOf(ctx), before, limit).Query(func(rows pgx.Rows) error {
			var err error
			out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (AuditRecord, error) {
				var a AuditRecord
				err := row.Scan(&a.ID, &a.At, &a.Subject, &a.Action, &a.Target, &a.RequestID)
				a.At = a.At.UTC()
				return a, err
			})
			return err
		})
	})
	if err != nil {
		return nil, fmt.Errorf("read the audit trail: %w", err)
	}
	return out, nil
}
