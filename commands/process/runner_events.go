package process

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/internal/failpoint"
	"github.com/strata-es/strata/projections"
)

// decideBatch reads the log after the checkpoint and decides its events
// for the process's instances, in log order, in one transaction on the
// lease's session: per event the tenant's setting, the instance locked,
// the decision and its effects (state, steps, deadlines, history), and at
// the end the checkpoint (ARCHITECTURE decision 10). An event for a done
// instance is recorded as ignored; one for a parked instance, or whose
// decision fails, waits in the dead-letter store.
//
// Poison never stops the process (decisions 5 and 17): an event that does
// not decode, or that Correlate cannot place (it panics, or names an
// invalid instance or no stream), parks its own stream for its tenant,
// with the instances that follow that stream, and every later event of
// the stream, or of an instance whose stream is parked, waits behind it;
// every other stream and tenant goes on. It returns how many log events
// the batch covered.
func (r *Runner) decideBatch(ctx context.Context, conn *pgx.Conn) (int, error) {
	recs, err := r.log.ReadAll(ctx, r.checkpoint, r.cfg.BatchSize)
	if err != nil {
		return 0, fmt.Errorf("process %s: read log: %w", r.name, err)
	}
	if len(recs) == 0 {
		return 0, nil
	}
	// Decode and correlate before the transaction. What fails is kept as
	// poison, to be parked in order with the rest.
	var items []item
	uses := make([]projections.LedgerUse, len(recs)) // for the completeness ledger; skipped unless decided or parked
	for i, rec := range recs {
		if !r.handles[rec.Type] {
			continue
		}
		payload, err := r.cfg.Registry.DecodeRecord(rec)
		if errors.Is(err, event.ErrUnknownType) {
			// The registry's fault, not the event's (NewRunner checks
			// every type the process consumes): parking would drop every
			// event of the type. Stop, never skipping, until it is fixed.
			return 0, fmt.Errorf("process %s: event %s of %s/%s v%d: %w", r.name, rec.ID, rec.Tenant, rec.Stream, rec.Version, err)
		}
		if err != nil {
			items = append(items, item{idx: i, ev: Event{Record: rec}, poison: err})
			continue
		}
		ev := Event{Record: rec, Payload: payload}
		instance, stream, ok, err := r.rt.correlate(ev)
		switch {
		case err != nil:
			items = append(items, item{idx: i, ev: ev, poison: fmt.Errorf("correlate: %w", err)})
		case ok:
			items = append(items, item{idx: i, ev: ev, instance: instance, stream: stream})
		}
	}
	last := recs[len(recs)-1].Position
	if err := r.ledger.Load(ctx, conn, recs); err != nil {
		return 0, err
	}

	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := probePause(ctx, tx, r.name); err != nil {
		return 0, err
	}
	// Parking takes the checkpoint row's lock (projections.ParkEvent).
	// An outcome's or a firing's transaction locks one instance and then,
	// when it parks, that row; so the batch parks only after it has locked
	// and decided every instance it touches, and the two never wait for
	// each other in a cycle. The instances are kept locked and cached for
	// the batch, so a later event of an instance parked earlier in the
	// batch parks behind it.
	var parks []parking
	locked := map[instKey]*instanceRow{}
	tenant := ""
	setTenant := func(t string) error {
		if t == tenant {
			return nil
		}
		if _, err := tx.Exec(ctx, db.SetTenantSQL, t); err != nil {
			return err
		}
		tenant = t
		return nil
	}
	lock := func(t, id, stream string) (*instanceRow, error) {
		k := instKey{t, id}
		if inst := locked[k]; inst != nil {
			return inst, nil
		}
		row, err := lockInstance(ctx, tx, r.name, t, id)
		if err != nil {
			return nil, err
		}
		if !row.exists {
			row.stream = stream
		}
		locked[k] = &row
		return &row, nil
	}
	arrived, err := projections.ReadArrivals(ctx, tx, len(items) > 0)
	if err != nil {
		return 0, fmt.Errorf("process %s: %w", r.name, err)
	}
	// The streams parked before the batch, and those it parks.
	parked, err := r.parkedStreams(ctx, tx, items)
	if err != nil {
		return 0, err
	}
	tenant = "" // the lookup set tenants of its own
	added := map[string]bool{}
	for _, it := range items {
		rec := it.ev.Record
		if arrived.Copied(rec) {
			continue // decided in the placement it came from (skipped in the ledger)
		}
		if err := setTenant(rec.Tenant); err != nil {
			return 0, err
		}
		own := streamKey{rec.Tenant, rec.Stream}
		if it.poison != nil {
			uses[it.idx] = projections.LedgerParked
			p := parking{tenant: rec.Tenant, rec: rec}
			if !parked[own] {
				r.logger.Warn("process cannot decode or correlate an event; its stream is parked for its tenant", "tenant", rec.Tenant,
					"stream", rec.Stream, "version", rec.Version, "event", rec.ID, "type", rec.Type, "error", it.poison.Error())
				p.cause, p.attempts = it.poison.Error(), 1
				parked[own] = true
				// The instances that follow the stream wait with it: their
				// outcomes and deadlines must not overtake its events.
				if err := r.holdFollowers(ctx, tx, lock, rec, it.poison); err != nil {
					return 0, err
				}
			}
			parks = append(parks, p)
			continue
		}
		inst, err := lock(rec.Tenant, it.instance, it.stream)
		if err != nil {
			return 0, err
		}
		ev := it.ev
		in := Input{Kind: InputEvent, Instance: it.instance, Tenant: tenantID(rec.Tenant), At: rec.RecordedAt, Event: &ev}
		uses[it.idx] = projections.LedgerParked
		switch {
		case inst.parked:
			parks = append(parks, parking{tenant: rec.Tenant, inst: inst, rec: rec, sum: summarize(in)})
		case inst.done:
			uses[it.idx] = projections.LedgerApplied // recorded as ignored
			err = r.w.record(ctx, tx, inst, histIgnored, summarize(in), "the instance is done")
		case parked[streamKey{rec.Tenant, inst.stream}]:
			// The instance's stream waits behind poison: so does the
			// instance, from this event on.
			parks = append(parks, parking{tenant: rec.Tenant, inst: inst, hold: true, rec: rec, sum: summarize(in)})
			inst.parked = true
		case parked[own]:
			// The event's own stream (not the instance's) is parked: the
			// event waits there, in its stream's order.
			parks = append(parks, parking{tenant: rec.Tenant, rec: rec})
		default:
			uses[it.idx] = projections.LedgerApplied
			_, err = r.w.apply(ctx, tx, inst, in)
			var poison *poisonError
			if errors.As(err, &poison) {
				r.logger.Warn("process decision failed; the instance is parked", "tenant", rec.Tenant, "instance", it.instance,
					"event", rec.ID, "error", poison.Error())
				uses[it.idx] = projections.LedgerParked
				parks = append(parks, parking{tenant: rec.Tenant, inst: inst, rec: rec, cause: poison.Error(), attempts: 1, sum: summarize(in)})
				inst.parked, err = true, nil
				parked[streamKey{rec.Tenant, inst.stream}] = true
			}
		}
		if err != nil {
			return 0, err
		}
		// Any decision may have issued steps or set deadlines.
		added[rec.Tenant] = true
	}
	for _, p := range parks {
		if err := setTenant(p.tenant); err != nil {
			return 0, err
		}
		if p.inst == nil {
			if _, err := projections.ParkEvent(ctx, tx, r.name, p.rec, clip(p.cause, 2000), p.attempts); err != nil {
				return 0, err
			}
			continue
		}
		// park sees the instance as not parked yet for the head (or the
		// first event that holds it), parked for those behind it.
		if p.attempts > 0 || p.hold {
			p.inst.parked = false
		}
		if err := r.w.park(ctx, tx, p.inst, p.rec, p.cause, p.attempts, p.sum); err != nil {
			return 0, err
		}
	}
	lb := &pgx.Batch{}
	counted := r.ledger.Queue(lb, recs, func(i int) projections.LedgerUse { return uses[i] })
	if err := tx.SendBatch(ctx, lb).Close(); err != nil {
		return 0, fmt.Errorf("process %s: completeness ledger: %w", r.name, err)
	}
	ct, err := tx.Exec(ctx, `UPDATE projection_checkpoints
SET pos_major = $2::text::numeric, pos_minor = $3::text::numeric, status = 'running', last_error = NULL, error_at = NULL, updated_at = now()
WHERE projection = $1 AND pos_major = $4::text::numeric AND pos_minor = $5::text::numeric`,
		r.name, u64(last.Major), u64(last.Minor), u64(r.checkpoint.Major), u64(r.checkpoint.Minor))
	if err != nil {
		return 0, fmt.Errorf("process %s: advance checkpoint: %w", r.name, err)
	}
	if ct.RowsAffected() != 1 {
		return 0, errCheckpointMoved
	}
	failpoint.Hit(FailpointBeforeCommit)
	if err := r.hook("batch"); err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("process %s: commit batch: %w", r.name, err)
	}
	r.checkpoint = last
	r.ledger.Commit(counted)
	r.mu.Lock()
	r.status.Checkpoint = last
	r.mu.Unlock()
	for t := range added {
		r.work[t] = true
	}
	return len(recs), nil
}

// probePause probes the process's pause lock in tx (held in shared mode
// until tx ends when no tool holds it, so a tool's AcquireExclusive waits
// for tx) and returns errYield when a tool holds it.
func probePause(ctx context.Context, tx pgx.Tx, key string) error {
	b := &pgx.Batch{}
	var paused bool
	projections.QueuePauseProbe(b, key, &paused)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("probe pause of %s: %w", key, err)
	}
	if paused {
		return errYield
	}
	return nil
}

func u64(v uint64) string { return strconv.FormatUint(v, 10) }
