package process

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
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
	for _, d := range interleave(deadlines, func(d dueDeadline) string { return d.tenant }) {
		if err := r.fire(ctx, conn, d); err != nil {
			if errors.Is(err, errYield) {
				return next, false, err
			}
			return next, false, fmt.Errorf("process %s: fire %s of %s/%s: %w", r.name, d.name, d.tenant, d.instance, err)
		}
		busy = true
	}
	r.dispatchFair(dctx, steps, epoch)
	return next, busy, nil
}

// Fairness between tenants (issue 29, finding 9). The dispatcher's slots
// (Concurrency) are shared by every tenant, and one instance may issue
// hundreds of steps at once. Given to the steps in the order the look
// read them (tenant by tenant), every slot went to the first tenant's
// backlog, and another tenant's step waited for all of it: an order of
// 600 lines delayed another tenant's reservation from 0.3 s to 17 s.
//
// dispatchFair fills the free slots round-robin over the tenants with due
// steps, one step per turn, each turn going to the tenant that holds the
// fewest slots (ties: the tenant served least recently, then by name). So
// a tenant with nothing in flight goes before any tenant that has steps in
// flight, and a due step waits for at most one free slot per other tenant
// with due steps, never behind one tenant's backlog. When only one tenant
// has work it may use every slot.
func (r *Runner) dispatchFair(dctx context.Context, steps []dueStep, epoch uint64) {
	if len(steps) == 0 {
		return
	}
	queues := map[string][]dueStep{}
	var tenants []string
	for _, s := range steps {
		t := s.id.tenant
		if _, ok := queues[t]; !ok {
			tenants = append(tenants, t)
		}
		queues[t] = append(queues[t], s)
	}
	held := r.heldByTenant()
	for len(tenants) > 0 {
		best := 0
		for i, t := range tenants[1:] {
			if r.before(t, tenants[best], held) {
				best = i + 1
			}
		}
		t := tenants[best]
		s := queues[t][0]
		queues[t] = queues[t][1:]
		if len(queues[t]) == 0 {
			tenants = append(tenants[:best], tenants[best+1:]...)
		}
		switch r.claim(s.id, epoch) {
		case claimFull:
			return
		case claimed:
			held[t]++
			r.served++
			r.lastServed[t] = r.served
			r.dispatch(dctx, s)
		}
	}
}

// before reports whether tenant a's turn comes before b's.
func (r *Runner) before(a, b string, held map[string]int) bool {
	if held[a] != held[b] {
		return held[a] < held[b]
	}
	if r.lastServed[a] != r.lastServed[b] {
		return r.lastServed[a] < r.lastServed[b]
	}
	return a < b
}

// heldByTenant counts the slots each tenant's executions hold.
func (r *Runner) heldByTenant() map[string]int {
	r.inflightMu.Lock()
	defer r.inflightMu.Unlock()
	out := map[string]int{}
	for id := range r.inflight {
		out[id.tenant]++
	}
	return out
}

// interleave reorders xs, grouped by tenant in the order read, so that the
// tenants take turns, one element each: a tenant with many deadlines due
// at once does not fire all of them before another tenant's first.
func interleave[T any](xs []T, tenant func(T) string) []T {
	groups := map[string][]T{}
	var order []string
	for _, x := range xs {
		t := tenant(x)
		if _, ok := groups[t]; !ok {
			order = append(order, t)
		}
		groups[t] = append(groups[t], x)
	}
	if len(order) < 2 {
		return xs
	}
	out := make([]T, 0, len(xs))
	for len(out) < len(xs) {
		for _, t := range order {
			if g := groups[t]; len(g) > 0 {
				out = append(out, g[0])
				groups[t] = g[1:]
			}
		}
	}
	return out
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

// claimResult is what claim did with a step.
type claimResult int

const (
	claimed   claimResult = iota
	claimSkip             // in flight already, or finished since the look began
	claimFull             // every slot is taken
)

// claim marks a step read in the look of epoch in flight, unless it is
// already, or finished since the look began, or the dispatcher is at its
// concurrency.
func (r *Runner) claim(id stepID, epoch uint64) claimResult {
	r.inflightMu.Lock()
	defer r.inflightMu.Unlock()
	if e, ok := r.finished[id]; ok && e >= epoch {
		return claimSkip
	}
	if r.inflight[id] {
		return claimSkip
	}
	if len(r.inflight) >= r.cfg.Concurrency {
		return claimFull
	}
	r.inflight[id] = true
	return claimed
}

func (r *Runner) release(id stepID) {
	r.inflightMu.Lock()
	delete(r.inflight, id)
	r.finished[id] = r.epoch
	r.inflightMu.Unlock()
}
