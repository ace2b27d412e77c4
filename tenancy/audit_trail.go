package tenancy

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
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
	Detail    json.RawMessage `json:"detail"` // always a JSON object
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
		// detail is an object by contract (the OpenAPI document); a row
		// written before every writer made sure of it (export_start wrote
		// JSON null) reads as {}.
		rows, err := tx.Query(ctx, `SELECT id, at, subject, action, coalesce(tenant, ''),
CASE WHEN jsonb_typeof(detail) = 'object' THEN detail ELSE '{}'::jsonb END, coalesce(request_id, '') FROM tenant_audit
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

// RecordFor audits a platform call about tenant that no other Store call
// records (the export routes: start, download, delete).
func (s *Store) RecordFor(ctx context.Context, a Actor, action string, tenant domain.TenantID, detail map[string]any) error {
	return s.audit(ctx, a, action, tenant, detail)
}

// ActionRefused is the action of a platform call refused before it ran
// (no verified scope, a malformed path, body or query): its detail holds
// the route, method, status and error code, never a message.
const ActionRefused = "refused"

// auditMarkKey carries an *AuditMark in a request's context.
type auditMarkKey struct{}

// AuditMark tells the HTTP edge whether a platform call was recorded, so
// that it records the calls no Store method did (refused before they ran)
// and only those: the Store records a call first, before it runs, and the
// edge cannot otherwise tell a refusal that came before the record from
// one that came after it.
type AuditMark struct{ done atomic.Bool }

// Audited reports whether the call was recorded or exempted.
func (m *AuditMark) Audited() bool { return m.done.Load() }

// TrackAudit returns ctx carrying a fresh AuditMark.
func TrackAudit(ctx context.Context) (context.Context, *AuditMark) {
	m := &AuditMark{}
	return context.WithValue(ctx, auditMarkKey{}, m), m
}

// MarkAudited sets ctx's AuditMark, if any: the Store calls it when it
// recorded the call; a route calls it for an answer that is deliberately
// not recorded (an export's status poll: docs/tenants.md, "What is
// audited").
func MarkAudited(ctx context.Context) {
	if m, ok := ctx.Value(auditMarkKey{}).(*AuditMark); ok {
		m.done.Store(true)
	}
}

// ExpireAudit deletes the tenant_audit rows older than window, in
// transactions of at most batch rows, and returns how many it deleted.
// tenant_audit is the platform's record, not a tenant's data: the window
// is the installation's (STRATA_RETENTION_PLATFORM_AUDIT), not a
// tenant's. Rows naming a tenant that is being erased are left to the
// erasure, which anonymizes them and counts them for its receipt.
//
// The cut is found by ID, not by an index on at (there is none): rows are
// numbered as they are inserted and stamped at insert, so every row below
// the first ID inside the window is older than it, give or take the
// milliseconds between a row's ID and its commit.
func (s *Store) ExpireAudit(ctx context.Context, window time.Duration, batch int) (int64, error) {
	if window <= 0 || batch <= 0 {
		return 0, fmt.Errorf("%w: expire tenant_audit: the window and the batch must be positive", domain.ErrInvalid)
	}
	cutoff := s.cfg.NowFunc().Add(-window)
	var total int64
	for {
		var n int64
		err := s.ownerTx(ctx, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, `DELETE FROM tenant_audit WHERE id IN (
  SELECT a.id FROM tenant_audit a
  WHERE a.id < coalesce((SELECT min(id) FROM tenant_audit WHERE at >= $1), (SELECT max(id) + 1 FROM tenant_audit))
    AND a.at < $1
    AND (a.tenant IS NULL OR NOT EXISTS (SELECT 1 FROM tenants t WHERE t.id = a.tenant AND t.status = 'erasing'))
  ORDER BY a.id LIMIT $2)`, cutoff, batch)
			n = tag.RowsAffected()
			return err
		})
		if err != nil {
			return total, fmt.Errorf("expire tenant_audit: %w", err)
		}
		total += n
		if n < int64(batch) {
			return total, nil
		}
	}
}
