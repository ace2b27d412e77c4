package tenancy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/internal/pgsession"
)

// A Fence holds a tenant still before its data is taken away, by an
// erasure (erase.go) or an archive (package tenancy/archive): once the
// tenant's status has left active (and the log refuses its events), the
// barrier waits until every serving process has seen that status, and the
// quiescence until the work already going on the tenant has ended.
type Fence struct {
	cfg FenceConfig
}

// FenceConfig configures a Fence.
type FenceConfig struct {
	// Pool is the owner connection (a login that may become strata_owner
	// and strata_eraser); Store is the directory on it.
	Pool  *pgxpool.Pool
	Store *Store
	// Lease is the serving processes' membership lease (default
	// DefaultLease).
	Lease time.Duration
	// BarrierTimeout and QuiesceTimeout bound the two waits (default 1m).
	BarrierTimeout time.Duration
	QuiesceTimeout time.Duration
	// PollInterval is how often the barrier resends and the quiescence
	// looks again (default 50ms).
	PollInterval time.Duration
	// RunnerLiveFunc: as EraserConfig's.
	RunnerLiveFunc func(ctx context.Context, name string) (bool, error)
	// ExportStaleAfter: as EraserConfig's (default 30s).
	ExportStaleAfter time.Duration
}

// NewFence returns a Fence with cfg's defaults filled in.
func NewFence(cfg FenceConfig) *Fence {
	if cfg.ExportStaleAfter <= 0 {
		cfg.ExportStaleAfter = 30 * time.Second
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.BarrierTimeout <= 0 {
		cfg.BarrierTimeout = time.Minute
	}
	if cfg.QuiesceTimeout <= 0 {
		cfg.QuiesceTimeout = time.Minute
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 50 * time.Millisecond
	}
	return &Fence{cfg: cfg}
}

// Barrier resends the barrier notification until every live member has
// acknowledged the directory's version (the change that took the tenant
// out of service), or the timeout (ErrBarrierTimeout).
func (f *Fence) Barrier(ctx context.Context, tenant domain.TenantID, version int64, progress func(string)) (BarrierState, error) {
	return f.cfg.Store.AwaitBarrier(ctx, BarrierConfig{Pool: f.cfg.Pool, Lease: f.cfg.Lease, Timeout: f.cfg.BarrierTimeout, Poll: f.cfg.PollInterval,
		OnWait: func(b BarrierState) {
			progress(fmt.Sprintf("waiting for %d of %d serving processes to acknowledge", len(b.Waiting), b.MembersLive))
		}}, tenant, version)
}

// Quiesce waits until no other work on the tenant is going (busy: a
// running export, an import, an open move), then until the appends in
// progress when it looks have ended (one of them may hold events of the
// tenant from before it left active: status names the state, for the
// messages; every later append of the tenant is
// refused by the log), then until every live runner, of whatever kind, has
// passed the tenant's last event. Transactions elsewhere (another
// database of the cluster, readers) are not waited for.
//
// The relay publishes a batch before it moves its checkpoint past it (or,
// on watermill-sql, in the transaction that moves it): a relay checkpoint
// past the tenant's last event means every event of the tenant is on the
// broker, so the broker's store, erased after this step, is erased after
// the last publication of the tenant. Hence the relay must be among the
// runners waited for whenever it is live (RunnerLiveFunc knows every lease
// family).
func (f *Fence) Quiesce(ctx context.Context, tenant domain.TenantID, status string, progress func(string)) (QuiesceState, error) {
	start := time.Now()
	deadline := start.Add(f.cfg.QuiesceTimeout)
	q := QuiesceState{RunnersWaitedOn: []string{}}
	for {
		busy, err := f.busy(ctx, tenant)
		if err != nil {
			return q, err
		}
		q.Busy = busy
		if len(busy) == 0 {
			break
		}
		if time.Now().After(deadline) {
			q.WaitedMS = time.Since(start).Milliseconds()
			return q, fmt.Errorf("%w: still going on the tenant: %s", ErrQuiesceTimeout, strings.Join(busy, ", "))
		}
		progress("waiting for " + strings.Join(busy, ", "))
		if !pgsession.Sleep(ctx, f.cfg.PollInterval) {
			return q, ctx.Err()
		}
	}
	// The transactions that have written into the log and are still open
	// hold a RowExclusiveLock on it until they end (pg_locks, readable by
	// every role): those open now, and only those, are waited for.
	var writers []string
	if err := f.cfg.Pool.QueryRow(ctx, `SELECT coalesce(array_agg(DISTINCT virtualtransaction), '{}') FROM pg_locks
		WHERE relation = 'strata.events'::regclass AND mode = 'RowExclusiveLock' AND granted AND pid <> pg_backend_pid()`).Scan(&writers); err != nil {
		return q, fmt.Errorf("find appends in progress: %w", err)
	}
	for {
		var open int
		if err := f.cfg.Pool.QueryRow(ctx, `SELECT count(DISTINCT virtualtransaction) FROM pg_locks
			WHERE relation = 'strata.events'::regclass AND virtualtransaction = ANY ($1)`, writers).Scan(&open); err != nil {
			return q, fmt.Errorf("wait for appends in progress: %w", err)
		}
		q.OpenXacts = open
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			q.WaitedMS = time.Since(start).Milliseconds()
			return q, fmt.Errorf("%w: %d transactions that were in progress when the tenant became erasing are still open", ErrQuiesceTimeout, open)
		}
		progress(fmt.Sprintf("waiting for %d transactions that were open when the tenant became %s", open, status))
		if !pgsession.Sleep(ctx, f.cfg.PollInterval) {
			return q, ctx.Err()
		}
	}
	var txID, pos string
	err := eraserTx(ctx, f.cfg.Pool, tenant, func(tx pgx.Tx) error {
		// The texts under other names: ORDER BY tx_id, position would
		// otherwise name the output columns and sort text ("9" after "25").
		return tx.QueryRow(ctx, `SELECT tx_id::text AS tx_text, position::text AS pos_text FROM events ORDER BY tx_id DESC, position DESC LIMIT 1`).Scan(&txID, &pos)
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		q.WaitedMS = time.Since(start).Milliseconds()
		return q, nil // no event: nothing to wait for
	case err != nil:
		return q, fmt.Errorf("find the tenant's last event: %w", err)
	}
	q.LastEvent = txID + "/" + pos
	for {
		type cp struct {
			name, status string
			passed       bool
		}
		var cps []cp
		err := f.cfg.Store.ownerTx(ctx, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `SELECT projection, status, (pos_major, pos_minor) >= ($1::numeric, $2::numeric)
				FROM projection_checkpoints ORDER BY projection`, txID, pos)
			if err != nil {
				return err
			}
			cps, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (cp, error) {
				var c cp
				return c, r.Scan(&c.name, &c.status, &c.passed)
			})
			return err
		})
		if err != nil {
			return q, fmt.Errorf("read projection_checkpoints: %w", err)
		}
		q.RunnersWaitedOn, q.Lagging = []string{}, nil
		for _, c := range cps {
			live := c.status == "running" || c.status == "error"
			if f.cfg.RunnerLiveFunc != nil {
				if live, err = f.cfg.RunnerLiveFunc(ctx, c.name); err != nil {
					return q, err
				}
			}
			if !live {
				continue
			}
			q.RunnersWaitedOn = append(q.RunnersWaitedOn, c.name)
			if !c.passed {
				q.Lagging = append(q.Lagging, c.name)
			}
		}
		q.WaitedMS = time.Since(start).Milliseconds()
		if len(q.Lagging) == 0 {
			return q, nil
		}
		if time.Now().After(deadline) {
			return q, fmt.Errorf("%w (waited %s; lagging: %s)", ErrQuiesceTimeout, f.cfg.QuiesceTimeout, strings.Join(q.Lagging, ", "))
		}
		progress("waiting for " + strings.Join(q.Lagging, ", "))
		if !pgsession.Sleep(ctx, f.cfg.PollInterval) {
			return q, ctx.Err()
		}
	}
}

// busy lists the work on the tenant, other than appends and runners, that
// can still write or keep its data: export jobs running (a heartbeat
// within ExportStaleAfter: an abandoned job writes nothing more), an
// import (its session holds the advisory lock db.ImportLockClass keyed by
// the tenant's hashtext, for as long as it writes), a move copying or
// frozen (it copies the tenant to another placement).
func (f *Fence) busy(ctx context.Context, tenant domain.TenantID) ([]string, error) {
	var out []string
	err := f.cfg.Store.ownerTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
SELECT 'export ' || id::text FROM tenant_exports
WHERE tenant = $1 AND status = 'running' AND heartbeat_at > now() - $2 * interval '1 millisecond'
UNION ALL
SELECT 'move ' || id::text || ' (' || phase || ')' FROM tenant_moves
WHERE tenant = $1 AND phase IN ('copying', 'frozen')
UNION ALL
SELECT 'import (session ' || pid::text || ')' FROM pg_locks
WHERE locktype = 'advisory' AND granted AND objsubid = 2 AND classid::bigint = $3
  AND objid::bigint = hashtext($1)::bigint & 4294967295
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
ORDER BY 1`, tenant, f.cfg.ExportStaleAfter.Milliseconds(), int64(db.ImportLockClass))
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("find exports, imports and moves of the tenant: %w", err)
	}
	return out, nil
}
