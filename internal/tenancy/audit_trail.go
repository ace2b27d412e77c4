package tenancy

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain"
)

// AuditEntry is one row of tenant_audit: a platform call, who made it and
// on which tenant.
type AuditEntry struct {
	ID        int64           `json:"id"`
	At        time.Time       `json:"at"`
	Subject   string          `json:"subject"`
	Action    string          `json:"action"`
	Tenant    string          `json:"tenant,omitempty"`
	Detail    json.RawMessage `json:"detail"`
	RequestID string          `json:"request_id,omitempty"`
}

// AuditTrail returns the newest tenant_audit rows, newest first: at most
// limit (1 to 1000), of one tenant when tenant is set, with IDs below
// before when before > 0. The read is itself recorded (action
// "audit_read"), as every platform call is.
func (s *Store) AuditTrail(ctx context.Context, a Actor, tenant domain.TenantID, limit int, before int64) ([]AuditEntry, error) {
	if limit < 1 || limit > 1000 {
		return nil, fmt.Errorf("%w: limit must be from 1 to 1000", domain.ErrInvalid)
	}
	if err := s.audit(ctx, a, "audit_read", tenant, nil); err != nil {
		return nil, err
	}
	out := []AuditEntry{}
	err := s.ownerTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id, at, subject, action, coalesce(tenant, ''), detail, coalesce(request_id, '') FROM tenant_audit
WHERE ($1 = '' OR tenant = $1) AND ($2::bigint = 0 OR id < $2::bigint) ORDER BY id DESC LIMIT $3`, string(tenant), before, limit)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (AuditEntry, error) {
			var e AuditEntry
			err := r.Scan(&e.ID, &e.At, &e.Subject, &e.Action, &e.Tenant, &e.Detail, &e.RequestID)
			e.At = e.At.UTC()
			return e, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read tenant_audit: %w", err)
	}
	return out, nil
}
