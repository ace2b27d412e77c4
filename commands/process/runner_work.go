package process

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/internal/db"
	"github.com/strata-es/strata/projections"
)

// dueStep is a pending step whose attempt is due.
type dueStep struct {
	id       stepID
	kind     StepKind
	name     string
	payload  []byte
	key      string
	attempts int
}

// dueDeadline is a pending deadline whose time has come.
type dueDeadline struct {
	tenant, instance, name string
	due                    time.Time
}

// scanChunk is how many tenants one pipelined look at the outbox and the
// deadlines covers (each under its own setting, as RLS requires).
const scanChunk = 200

// work1 looks at the outbox and the deadlines of every tenant that may
// have work (but a frozen one: a tenant moving away, or gone, whose state
// the target placement works from the switch on), fires the due deadlines (one transaction each, on the lease's
// session) and hands the due steps to the dispatcher. It returns the
// earliest time something not yet due falls due (zero: nothing pending),
// and busy when it should look again at once (it fired deadlines, whose
// decisions may have issued steps).
func (r *Runner) work1(ctx, dctx context.Context, conn *pgx.Conn) (next time.Time, busy bool, err error) {
	now := r.cfg.Now()
	tenants := r.sortedTenants()
	epoch := r.newEpoch()
	var steps []dueStep
	var deadlines []dueDeadline
	later := func(t *time.Time) {
		if t != nil && (next.IsZero() || t.Before(next)) {
			next = *t
		}
	}
	// Every round probes the pause lock (in the first pipeline): a runner
	// busy with its outbox must still yield to a tool promptly.
	paused := false
	for lo := 0; lo == 0 || lo < len(tenants); lo += scanChunk {
		b := &pgx.Batch{}
		if lo == 0 {
			projections.QueuePauseProbe(b, r.name, &paused)
		}
		for _, t := range tenants[lo:min(lo+scanChunk, len(tenants))] {
			b.Queue(db.SetTenantSQL, t)
			b.Queue(`SELECT instance, step, kind, name, payload, idem_key, attempts FROM process_steps
WHERE tenant_id = $1 AND process = $2 AND status = 'pending' AND next_attempt_at <= $3
  AND NOT EXISTS (SELECT FROM tenant_write_freezes WHERE tenant = $1) ORDER BY next_attempt_at LIMIT $4`,
				t, r.name, now, 2*r.cfg.Concurrency).Query(func(rows pgx.Rows) error {
				for rows.Next() {
					s := dueStep{id: stepID{tenant: t}}
					var kind string
					if err := rows.Scan(&s.id.instance, &s.id.step, &kind, &s.name, &s.payload, &s.key, &s.attempts); err != nil {
						return err
					}
					s.kind = StepKind(kind)
					steps = append(steps, s)
				}
				return rows.Err()
			})
			b.Queue(`SELECT instance, name, due_at FROM process_deadlines
WHERE tenant_id = $1 AND process = $2 AND status = 'pending' AND due_at <= $3
  AND NOT EXISTS (SELECT FROM tenant_write_freezes WHERE tenant = $1) ORDER BY due_at LIMIT $4`,
				t, r.name, now, r.cfg.BatchSize).Query(func(rows pgx.Rows) error {
				for rows.Next() {
					d := dueDeadline{tenant: t}
					if err := rows.Scan(&d.instance, &d.name, &d.due); err != nil {
						return err
					}
					deadlines = append(deadlines, d)
				}
				return rows.Err()
			})
			b.Queue(`SELECT (SELECT min(next_attempt_at) FROM process_steps WHERE tenant_id = $1 AND process = $2 AND status = 'pending' AND next_attempt_at > $3),
       (SELECT min(due_at) FROM process_deadlines WHERE tenant_id = $1 AND process = $2 AND status = 'pending' AND due_at > $3),
       EXISTS (SELECT FROM process_steps WHERE tenant_id = $1 AND process = $2 AND status = 'pending')
       OR EXISTS (SELECT FROM process_deadlines WHERE tenant_id = $1 AND process = $2 AND status = 'pending')`,
				t, r.name, now).QueryRow(func(row pgx.Row) error {
				var step, deadline *time.Time
				var pending bool
				if err := row.Scan(&step, &deadline, &pending); err != nil {
					return err
				}
				later(step)
				later(deadline)
				if !pending {
					// Only this runner adds work while it holds the lease
					// (a tool that re-queues steps takes the lease first,
					// and a new leadership looks at every tenant again).
					delete(r.work, t)
				}
				return nil
			})
		}
		if err := conn.SendBatch(ctx, b).Close(); err != nil {
			return time.Time{}, false, fmt.Errorf("process %s: read outbox and deadlines: %w", r.name, err)
		}
		if paused {
			return time.Time{}, false, errYield
		}
	}
	for _, d := range deadlines {
		if err := r.fire(ctx, conn, d); err != nil {
			if errors.Is(err, errYield) {
				return next, false, err
			}
			return next, false, fmt.Errorf("process %s: fire %s of %s/%s: %w", r.name, d.name, d.tenant, d.instance, err)
		}
		busy = true
	}
	for _, s := range steps {
		if !r.claim(s.id, epoch) {
			continue
		}
		r.dispatch(dctx, s)
	}
	return next, busy, nil
}

// newEpoch starts a look at the outbox: steps whose execution finishes
// from now on were read as they were before it, so the look must not
// dispatch them again (their outcome, or their next attempt's time, is
// recorded by then). It also forgets executions finished before the
// previous look.
func (r *Runner) newEpoch() uint64 {
	r.inflightMu.Lock()
	defer r.inflightMu.Unlock()
	r.epoch++
	for id, e := range r.finished {
		if e+1 < r.epoch {
			delete(r.finished, id)
		}
	}
	return r.epoch
}

// claim marks a step read in the look of epoch in flight, unless it is
// already, or finished since the look began, or the dispatcher is at its
// concurrency.
func (r *Runner) claim(id stepID, epoch uint64) bool {
	r.inflightMu.Lock()
	defer r.inflightMu.Unlock()
	if e, ok := r.finished[id]; ok && e >= epoch {
		return false
	}
	if r.inflight[id] || len(r.inflight) >= r.cfg.Concurrency {
		return false
	}
	r.inflight[id] = true
	return true
}

func (r *Runner) release(id stepID) {
	r.inflightMu.Lock()
	delete(r.inflight, id)
	r.finished[id] = r.epoch
	r.inflightMu.Unlock()
}
