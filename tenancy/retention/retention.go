// Package retention is the retention job (docs/tenants.md, "Retention"):
// it deletes, per tenant, the idempotency records, resolved dead letters
// and admin_audit rows older than the tenant's windows
// (tenants.retention, else the installation's defaults).
//
// It runs in the projector role's process as strata_projector, one
// transaction per tenant, kind and batch with app.tenant_id set, so that
// row-level security confines every delete to that tenant whatever the
// statement says (migration 011 grants the projector DELETE under tenant
// policies on exactly these tables). Only one process runs it at a time:
// the leader holds a session advisory lock and runs every pass on that
// session, so it cannot go on deleting after losing the lease.
package retention

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/internal/failpoint"
	"github.com/strata-es/strata/internal/pgsession"
	"github.com/strata-es/strata/tenancy"
)

// lease is the job's leader lock: pg_try_advisory_lock(leaseClass,
// Key("retention")).
var lease = pgsession.Lease{Class: 0x53545254, Namespace: "strata-retention"} // "STRT"

const leaseName = "retention"

// Defaults of Config.
const (
	DefaultInterval = time.Hour
	DefaultBatch    = 1000
)

// Config configures a Job.
type Config struct {
	// Pool is the projector role's pool.
	Pool *pgxpool.Pool
	// Directory, when set, is where the tenants and their windows are read
	// (the control plane's projector pool) and Placement the placement
	// whose tenants this job keeps: a placement's database holds no
	// directory of its own. Unset, the directory is Pool's and every tenant
	// in it is kept.
	Directory Querier
	Placement string
	// Defaults are the windows of a tenant that sets none of its own
	// (tenancy.DefaultWindows, overridden by STRATA_RETENTION_*).
	Defaults tenancy.Windows
	Interval time.Duration // between passes (DefaultInterval)
	Batch    int           // rows per delete transaction (DefaultBatch)
	NowFunc  func() time.Time
	Logger   *slog.Logger
	// DeletedFunc, if set, is told every batch deleted (metrics).
	DeletedFunc func(kind string, tenant domain.TenantID, n int64)
	// LeaseFunc, if set, is told the outcome of every try for the lease
	// (tests).
	LeaseFunc func(held bool)
}

// LeaseKey is the leader lock, for operators looking at pg_locks:
// classid = class, objid = key, objsubid = 2.
func LeaseKey() (class, key int32) { return lease.Class, lease.Key(leaseName) }

// Job is the retention job.
type Job struct {
	cfg Config
}

// New returns a Job.
func New(cfg Config) (*Job, error) {
	if cfg.Pool == nil {
		return nil, errors.New("retention: no pool")
	}
	if cfg.Defaults == nil {
		cfg.Defaults = tenancy.DefaultWindows()
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Batch <= 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.NowFunc == nil {
		cfg.NowFunc = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Job{cfg: cfg}, nil
}

// kind is what one window deletes. The statements delete at most $2 rows
// of the transaction's tenant (RLS) older than $1; the tenant condition in
// them is belt and braces.
type kind struct {
	key  string
	sql  string
	desc string
}

var kinds = []kind{
	{tenancy.RetainIdempotency, `DELETE FROM idempotency_keys WHERE (tenant_id, key) IN (
		SELECT tenant_id, key FROM idempotency_keys
		WHERE tenant_id = current_setting('app.tenant_id', true) AND created_at < $1 LIMIT $2)`, "idempotency records"},
	{tenancy.RetainDeadLetters, `DELETE FROM dead_letters WHERE (tenant_id, id) IN (
		SELECT tenant_id, id FROM dead_letters
		WHERE tenant_id = current_setting('app.tenant_id', true) AND status IN ('retried', 'discarded', 'superseded')
		  AND resolved_at < $1 LIMIT $2)`, "resolved dead letters"},
	{tenancy.RetainAudit, `DELETE FROM admin_audit WHERE (tenant_id, id) IN (
		SELECT tenant_id, id FROM admin_audit
		WHERE tenant_id = current_setting('app.tenant_id', true) AND at < $1 LIMIT $2)`, "admin audit rows"},
}

// Kinds are the retention keys in the order a pass handles them.
func Kinds() []string {
	out := make([]string, len(kinds))
	for i, k := range kinds {
		out[i] = k.key
	}
	return out
}

// Report is what one pass deleted: tenant -> kind -> rows.
type Report struct {
	Deleted map[domain.TenantID]map[string]int64
	Tenants int
}

// Total returns the rows deleted of kind, over every tenant.
func (r Report) Total(kind string) int64 {
	var n int64
	for _, m := range r.Deleted {
		n += m[kind]
	}
	return n
}

// Querier is a pool, a connection or a transaction.
type Querier interface {
	db.Beginner
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Pass runs one pass on q (a session of the projector role): every tenant
// of the directory that is not being erased (the erasure workflow owns
// those), every kind, in batches until a batch comes back short.
func (j *Job) Pass(ctx context.Context, q Querier) (Report, error) {
	rep := Report{Deleted: map[domain.TenantID]map[string]int64{}}
	dir, where, args := Querier(q), "", []any(nil)
	if j.cfg.Directory != nil {
		dir = j.cfg.Directory
	}
	if j.cfg.Placement != "" {
		where, args = " AND placement = $1", []any{j.cfg.Placement}
	}
	rows, err := dir.Query(ctx, `SELECT id, retention FROM tenants WHERE status NOT IN ('erasing', 'erased')`+where+` ORDER BY id`, args...)
	if err != nil {
		return rep, fmt.Errorf("read the tenants' retention: %w", err)
	}
	type tenantWindows struct {
		id  domain.TenantID
		own tenancy.Windows
	}
	var ts []tenantWindows
	for rows.Next() {
		var id domain.TenantID
		var raw []byte
		if err := rows.Scan(&id, &raw); err != nil {
			rows.Close()
			return rep, err
		}
		m := map[string]any{}
		_ = json.Unmarshal(raw, &m)
		ts = append(ts, tenantWindows{id, tenancy.RetentionOf(m)})
	}
	if err := rows.Err(); err != nil {
		return rep, fmt.Errorf("read the tenants' retention: %w", err)
	}
	now := j.cfg.NowFunc()
	for _, t := range ts {
		rep.Tenants++
		for _, k := range kinds {
			w, ok := t.own[k.key]
			if !ok {
				w = j.cfg.Defaults[k.key]
			}
			if w.Keep || w.D <= 0 {
				continue
			}
			n, err := j.deleteKind(ctx, q, t.id, k, now.Add(-w.D))
			if n > 0 {
				if rep.Deleted[t.id] == nil {
					rep.Deleted[t.id] = map[string]int64{}
				}
				rep.Deleted[t.id][k.key] += n
			}
			if err != nil {
				return rep, fmt.Errorf("retention of %s for tenant %s: %w", k.desc, t.id, err)
			}
		}
	}
	return rep, nil
}

func (j *Job) deleteKind(ctx context.Context, q Querier, tenant domain.TenantID, k kind, cutoff time.Time) (int64, error) {
	var total int64
	tctx := domain.NewContext(ctx, tenant)
	for {
		var n int64
		err := db.WithTenantTx(tctx, q, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, k.sql, cutoff, j.cfg.Batch)
			n = tag.RowsAffected()
			return err
		})
		if err != nil {
			return total, err
		}
		total += n
		if n > 0 && j.cfg.DeletedFunc != nil {
			j.cfg.DeletedFunc(k.key, tenant, n)
		}
		failpoint.Hit("retention.after-batch")
		if n < int64(j.cfg.Batch) || ctx.Err() != nil {
			return total, ctx.Err()
		}
	}
}

// Run runs passes every Interval while this process holds the lease, and
// keeps trying for the lease otherwise, until ctx ends (nil then).
func (j *Job) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		c, err := j.cfg.Pool.Acquire(ctx)
		if err != nil {
			pgsession.Sleep(ctx, j.cfg.Interval)
			continue
		}
		conn := c.Hijack()
		if err := j.lead(ctx, conn); err != nil && ctx.Err() == nil {
			j.cfg.Logger.Warn("retention: pass failed; retrying after the interval", "error", err.Error())
		}
		lease.Release(conn, leaseName)
		pgsession.Close(conn)
		pgsession.Sleep(ctx, j.cfg.Interval)
	}
	return nil
}

// lead takes the lease on conn and, while it holds it, runs a pass every
// interval. It returns when it did not get the lease, on an error, or
// when ctx ends.
func (j *Job) lead(ctx context.Context, conn *pgx.Conn) error {
	ok, err := lease.Try(ctx, conn, leaseName)
	if err == nil && j.cfg.LeaseFunc != nil {
		j.cfg.LeaseFunc(ok)
	}
	if err != nil || !ok {
		return err
	}
	for {
		start := time.Now()
		rep, err := j.Pass(ctx, conn)
		if err != nil {
			return err
		}
		j.cfg.Logger.Info("retention pass", "tenants", rep.Tenants, "idempotency_records", rep.Total(tenancy.RetainIdempotency),
			"resolved_dead_letters", rep.Total(tenancy.RetainDeadLetters), "audit", rep.Total(tenancy.RetainAudit), "took", time.Since(start).String())
		if !pgsession.Sleep(ctx, j.cfg.Interval) {
			return nil
		}
	}
}
