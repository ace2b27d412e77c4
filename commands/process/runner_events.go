package process

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/internal/db"
	"github.com/strata-es/strata/internal/failpoint"
	"github.com/strata-es/strata/projections"
)

// decideBatch reads the log after the checkpoint and decides its events
// for the process's instances, in log order, in one transaction on the
// lease's session: per event the tenant's setting, the instance locked,
// the decision and its effects (state, steps, deadlines, history), and at
// the end the checkpoint (ARCHITECTURE decision 10). An event for a done
// instance is recorded as ignored; one for a parked instance, or whose
// decision fails, waits in the dead-letter store. It returns how many log
// events the batch covered.
func (r *Runner) decideBatch(ctx context.Context, conn *pgx.Conn) (int, error) {
	recs, err := r.log.ReadAll(ctx, r.checkpoint, r.cfg.BatchSize)
	if err != nil {
		return 0, fmt.Errorf("process %s: read log: %w", r.name, err)
	}
	if len(recs) == 0 {
		return 0, nil
	}
	// Decode and correlate before the transaction: a payload that does
	// not decode (a codec missing after a deploy) stops the process
	// there, never skipped, as it would stop a projection.
	type item struct {
		idx              int // in recs
		ev               Event
		instance, stream string
	}
	var items []item
	uses := make([]projections.LedgerUse, len(recs)) // for the completeness ledger; skipped unless decided or parked
	for i, rec := range recs {
		if !r.handles[rec.Type] {
			continue
		}
		payload, err := r.cfg.Registry.DecodeRecord(rec)
		if err != nil {
			return 0, fmt.Errorf("process %s: event %s of %s/%s v%d: %w", r.name, rec.ID, rec.Tenant, rec.Stream, rec.Version, err)
		}
		ev := Event{Record: rec, Payload: payload}
		instance, stream, ok := r.rt.correlate(ev)
		if !ok {
			continue
		}
		if err := validInstance(instance); err != nil || stream == "" {
			return 0, fmt.Errorf("process %s: Correlate gave event %s instance %q stream %q: want an entity ID and a stream", r.name, rec.ID, instance, stream)
		}
		items = append(items, item{idx: i, ev: ev, instance: instance, stream: stream})
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
	type parking struct {
		inst     *instanceRow
		rec      event.Record
		cause    string
		attempts int
		sum      inputSummary
	}
	var parks []parking
	type instKey struct{ tenant, instance string }
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
	arrived, err := projections.ReadArrivals(ctx, tx, len(items) > 0)
	if err != nil {
		return 0, fmt.Errorf("process %s: %w", r.name, err)
	}
	added := map[string]bool{}
	for _, it := range items {
		rec := it.ev.Record
		if arrived.Copied(rec) {
			continue // decided in the placement it came from (skipped in the ledger)
		}
		if err := setTenant(rec.Tenant); err != nil {
			return 0, err
		}
		k := instKey{rec.Tenant, it.instance}
		inst := locked[k]
		if inst == nil {
			row, err := lockInstance(ctx, tx, r.name, rec.Tenant, it.instance)
			if err != nil {
				return 0, err
			}
			if !row.exists {
				row.stream = it.stream
			}
			inst = &row
			locked[k] = inst
		}
		ev := it.ev
		in := Input{Kind: InputEvent, Instance: it.instance, Tenant: tenantID(rec.Tenant), At: rec.RecordedAt, Event: &ev}
		uses[it.idx] = projections.LedgerApplied // decided, or recorded as ignored by a done instance
		var err error
		switch {
		case inst.parked:
			uses[it.idx] = projections.LedgerParked
			parks = append(parks, parking{inst: inst, rec: rec, sum: summarize(in)})
		case inst.done:
			err = r.w.record(ctx, tx, inst, histIgnored, summarize(in), "the instance is done")
		default:
			_, err = r.w.apply(ctx, tx, inst, in)
			var poison *poisonError
			if errors.As(err, &poison) {
				r.logger.Warn("process decision failed; the instance is parked", "tenant", rec.Tenant, "instance", it.instance,
					"event", rec.ID, "error", poison.Error())
				uses[it.idx] = projections.LedgerParked
				parks = append(parks, parking{inst: inst, rec: rec, cause: poison.Error(), attempts: 1, sum: summarize(in)})
				inst.parked, err = true, nil
			}
		}
		if err != nil {
			return 0, err
		}
		// Any decision may have issued steps or set deadlines.
		added[rec.Tenant] = true
	}
	for _, p := range parks {
		if err := setTenant(p.inst.tenant); err != nil {
			return 0, err
		}
		// park sees the instance as not parked yet for the head, parked
		// for those behind it.
		if p.attempts > 0 {
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
