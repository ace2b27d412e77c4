package projections

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/internal/failpoint"
)

// readSize is how many events the next read asks for.
func (r *Runner) readSize() int {
	if r.catchingUp {
		return r.cfg.CatchUpBatch
	}
	return r.cfg.BatchSize
}

// step reads one batch after the checkpoint and applies it in one
// transaction. It returns how many events it applied (0: none visible).
func (r *Runner) step(ctx context.Context, conn *pgx.Conn) (int, error) {
	// The read runs before the transaction begins (on a pooled connection,
	// in a statement that takes no transaction id), so the batch's own
	// transaction never holds the log's horizon back while reading.
	began := time.Now()
	var recs []event.Record
	var decoded *sharedBatch
	var err error
	if !r.cfg.Partition.IsZero() {
		return r.stepPartition(ctx, conn, r.log.(eventstore.PartitionLog)) // NewRunner checked
	}
	if tl, ok := r.log.(eventstore.TenantLog); ok && r.cfg.Tenant != "" && r.cfg.Shared == nil {
		return r.stepTenant(ctx, conn, tl)
	}
	if sh := r.cfg.Shared; sh != nil {
		decoded, err = sh.read(ctx, r, r.checkpoint, r.readSize(), r.catchingUp, r.wakeTakenAt)
		if decoded != nil {
			recs = decoded.recs
		}
	} else {
		recs, err = r.log.ReadAll(ctx, r.checkpoint, r.readSize())
	}
	if err != nil {
		r.catchingUp = false
		return 0, fmt.Errorf("read log after %s: %w", r.checkpoint, err)
	}
	r.catchingUp = len(recs) == r.readSize()
	if !r.until.IsZero() {
		k := len(recs)
		for k > 0 && r.until.Less(recs[k-1].Position) {
			k--
		}
		recs = recs[:k] // decoded's slices stay aligned: a prefix
	}
	if len(recs) == 0 {
		return 0, nil
	}
	ctx, span := startBatchSpan(ctx, r.key, recs)
	n, err := r.applyRead(ctx, conn, recs, decoded, began)
	endBatchSpan(span, err)
	if err != nil {
		// Retried at the live batch size: a catch-up batch that ran out
		// of FinishTimeout on a slow database must not be tried whole
		// again and again.
		r.catchingUp = false
	}
	return n, err
}

// applyRead applies a batch read by step: contiguity, decoding, parking,
// the transaction, and the bookkeeping after it commits.
func (r *Runner) applyRead(ctx context.Context, conn *pgx.Conn, recs []event.Record, decoded *sharedBatch, began time.Time) (int, error) {
	last, err := checkContiguous(ctx, r.locator, r.streams, recs)
	if err != nil {
		return 0, fmt.Errorf("projection %s: %w", r.proj.Name(), err)
	}
	items, err := r.prepare(recs, decoded)
	if err != nil {
		return 0, err
	}
	plan, err := r.planParks(ctx, conn, items)
	if err != nil {
		return 0, err
	}
	if err := r.ledger.Load(ctx, conn, recs); err != nil {
		return 0, err
	}
	next := recs[len(recs)-1].Position
	bp, setBased := r.proj.(BatchProjection)
	setBased = setBased && !r.cfg.PerEvent
	var res applied
	for round := 0; ; round++ {
		res, err = r.apply(ctx, conn, recs, items, next, bp, setBased, plan)
		var sbe *setBasedError
		if errors.As(err, &sbe) && !conn.IsClosed() && !db.IsUnavailable(err) && ctx.Err() == nil {
			// Find the event: the same batch again, event by event.
			if res, err = r.apply(ctx, conn, recs, items, next, bp, false, plan); err == nil {
				r.logger.Warn("a batch failed as a whole but applied event by event: the projection's two paths disagree",
					"error", sbe.Error())
			}
		}
		var ee *EventError
		if plan != nil && errors.As(err, &ee) && IsPoison(ee.Err) && !conn.IsClosed() && ctx.Err() == nil && round <= len(items) &&
			plan.park(ee.Event, ee.Err, r.cfg.Failures) {
			continue // the same batch again, with the event's stream parked
		}
		break
	}
	if err != nil {
		return 0, err
	}
	r.committed(ctx, recs, last, res, plan, len(items), began)
	return len(recs), nil
}

// committed does a runner's bookkeeping after its batch recs committed:
// the checkpoint, the ledger book, the stream cache, parked streams, the
// status and the batch's observers. last holds the streams' versions the
// contiguity check found, handled how many events the projection took.
func (r *Runner) committed(ctx context.Context, recs []event.Record, last map[streamKey]int64, res applied, plan *parkPlan, handled int, began time.Time) {
	next := recs[len(recs)-1].Position
	r.checkpoint = next
	r.ledger.Commit(res.ledger)
	for k, v := range last {
		r.streams.put(k, v)
	}
	r.parkedStreams, r.pauseSeen = res.parkedStreams, res.pause
	if plan != nil {
		r.noteParks(plan)
	}
	if r.logger.Enabled(ctx, slog.LevelDebug) {
		r.logger.DebugContext(ctx, "applied batch", "events", len(recs), "handled", handled, "parked", res.letters,
			"checkpoint", next.String(), "took", time.Since(began).String())
	}
	r.mu.Lock()
	r.status.Checkpoint = next
	r.mu.Unlock()
	if r.cfg.Progress != nil {
		r.cfg.Progress.advance(r.key, next)
	}
	if r.cfg.OnBatch != nil {
		r.cfg.OnBatch(BatchInfo{Events: len(recs), Checkpoint: next, Parked: res.letters})
	}
}

// noteParks logs the streams a committed batch parked and schedules their
// automatic retries; parked streams found with a schedule the runner did
// not know (parked before it took the lease) join the schedule too.
func (r *Runner) noteParks(plan *parkPlan) {
	for k, p := range plan.existing {
		if _, ok := r.retries[k]; !ok && !p.next.IsZero() {
			r.retries[k] = p.next
		}
	}
	for k, f := range plan.fresh {
		log := r.logger.With("tenant", k.tenant, "stream", k.stream, "version", f.rec.Version, "event", f.rec.ID,
			"type", f.rec.Type, "error", errorText(f.err))
		if f.next == nil {
			log.Error("event failed: its stream is parked in the dead-letter store; retry or discard it with `strata replay dlq`")
			continue
		}
		r.retries[k] = *f.next
		log.Warn("event failed: its stream is parked in the dead-letter store and retried in the background",
			"attempt", 1, "of", r.cfg.Failures.Attempts, "retry_in", time.Until(*f.next).Round(time.Millisecond).String())
	}
}

// parkPlan says which events of a batch go to the dead-letter store: all
// events of streams parked before the batch, and, for streams the batch
// parks, the failing event and every later one of its stream.
type parkPlan struct {
	existing map[streamKey]parkedHere
	fresh    map[streamKey]*freshPark
}

// freshPark is a stream parked by this batch at rec, which failed with err.
type freshPark struct {
	rec  event.Record
	err  error
	next *time.Time // first automatic retry (nil: none)
}

// parks reports whether ev goes to the dead-letter store, and whether it
// is the failing event of a stream the batch parks.
func (p *parkPlan) parks(ev event.Record) (parked, head bool) {
	k := streamKey{ev.Tenant, ev.Stream}
	if _, ok := p.existing[k]; ok {
		return true, false
	}
	if f, ok := p.fresh[k]; ok && f.rec.Version <= ev.Version {
		return true, f.rec.Version == ev.Version
	}
	return false, false
}

// park parks ev's stream from ev on; false if it is parked already.
func (p *parkPlan) park(ev event.Record, err error, policy FailurePolicy) bool {
	if parked, _ := p.parks(ev); parked {
		return false
	}
	f := &freshPark{rec: ev, err: err}
	if policy.Attempts > 1 {
		t := time.Now().Add(policy.Delay(1))
		f.next = &t
	}
	p.fresh[streamKey{ev.Tenant, ev.Stream}] = f
	return true
}

// planParks finds which of the batch's streams are parked (one round trip
// of lookups, only when the projection has parked streams at all) and parks
// the streams of events that could not be decoded. It returns nil without
// DeadLetters.
func (r *Runner) planParks(ctx context.Context, conn *pgx.Conn, items []item) (*parkPlan, error) {
	if !r.cfg.DeadLetters {
		return nil, nil
	}
	plan := &parkPlan{existing: map[streamKey]parkedHere{}, fresh: map[streamKey]*freshPark{}}
	if r.parkedStreams > 0 && len(items) > 0 {
		streams := map[string][]string{}
		seen := map[streamKey]bool{}
		var tenants []string
		for _, it := range items {
			k := streamKey{it.ev.Tenant, it.ev.Stream}
			if seen[k] {
				continue
			}
			seen[k] = true
			if _, ok := streams[k.tenant]; !ok {
				tenants = append(tenants, k.tenant)
			}
			streams[k.tenant] = append(streams[k.tenant], k.stream)
		}
		b := &pgx.Batch{}
		for _, t := range tenants {
			b.Queue(db.SetTenantSQL, t)
			b.Queue(lookupParkedSQL, t, r.letters, r.generation, streams[t]).Query(func(rows pgx.Rows) error {
				for rows.Next() {
					var stream string
					var p parkedHere
					var next *time.Time
					if err := rows.Scan(&stream, &p.head, &next); err != nil {
						return err
					}
					if next != nil {
						p.next = *next
					}
					plan.existing[streamKey{t, stream}] = p
				}
				return rows.Err()
			})
		}
		if err := conn.SendBatch(ctx, b).Close(); err != nil {
			return nil, fmt.Errorf("projection %s: look up parked streams: %w", r.proj.Name(), err)
		}
	}
	for _, it := range items {
		if it.err != nil {
			plan.park(it.ev.Record, it.err, r.cfg.Failures)
		}
	}
	return plan, nil
}

// setBasedError is a failure of the set-based path: the batch is retried
// event by event to find the event.
type setBasedError struct{ err error }

func (e *setBasedError) Error() string { return "set-based batch: " + e.err.Error() }

func (e *setBasedError) Unwrap() error { return e.err }

// Owners of queued statements other than an event index.
const (
	ownerRunner = -1 // BEGIN, the checkpoint, set_config, dead letters
	ownerGroup  = -2 // a set-based statement of a tenant's events
)

// commitCheckpointFirst is nil in every real build. Only the chaos_broken
// build tag (chaos_broken.go, for `make chaos-broken`) sets it, to commit
// the checkpoint move in a transaction of its own before the batch's
// writes: the defect the fault harness must be able to catch.
var commitCheckpointFirst func(ctx context.Context, conn *pgx.Conn, name string, from, next event.Position) error

// applied is what a committed batch reports.
type applied struct {
	parkedStreams int64       // the checkpoint row's count after the batch
	pause         bool        // a tool holds the projection's pause lock
	letters       int         // events sent to the dead-letter store
	ledger        LedgerBatch // the batch's counts, for the book once committed
}

// apply sends the batch in one pipelined round trip: BEGIN, the runner's
// statements (queueApply), and commits in a second round trip.
func (r *Runner) apply(ctx context.Context, conn *pgx.Conn, recs []event.Record, items []item, next event.Position, bp BatchProjection, setBased bool, plan *parkPlan) (applied, error) {
	from := r.checkpoint
	if commitCheckpointFirst != nil { // only in the deliberately broken chaos_broken build
		if err := commitCheckpointFirst(ctx, conn, r.key, from, next); err != nil {
			return applied{}, err
		}
		from = next
	}
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	owner := []int{ownerRunner} // queued statement -> its event's index in recs, or an owner constant
	var res applied
	if err := r.queueApply(b, &owner, &res, recs, items, from, next, bp, setBased, plan, false); err != nil {
		return res, err
	}
	err := sendTx(ctx, conn, b, func() { failpoint.Hit(FailpointBeforeCommit) }, func(k int, err error) error {
		if k >= 0 {
			switch o := owner[k]; {
			case o >= 0:
				return r.eventError(o, recs[o], err)
			case o == ownerGroup:
				return &setBasedError{err}
			}
		}
		return fmt.Errorf("projection %s: apply batch: %w", r.proj.Name(), err)
	})
	return res, err
}

// queueApply queues into b, inside a transaction begun before, the
// runner's statements for the batch: the checkpoint's move from from to
// next, then per tenant its set_config, the statements of its events
// (set-based, or event by event), the dead letters of the events plan parks
// and its ledger row. For each statement it appends to owner the index in
// recs of the event it belongs to, or an owner constant. res receives what
// the batch reports, partly when b is sent (its callbacks write into it):
// it must outlive the send. With laterLedger the ledger rows are counted
// into res but not queued: a group queues its members' rows together.
func (r *Runner) queueApply(b *pgx.Batch, owner *[]int, res *applied, recs []event.Record, items []item, from, next event.Position, bp BatchProjection, setBased bool, plan *parkPlan, laterLedger bool) error {
	// Which events are parked, decided before anything is queued: the
	// checkpoint's counters go first.
	parked := make([]bool, len(items))
	heads := 0
	if plan != nil {
		for i, it := range items {
			p, head := plan.parks(it.ev.Record)
			parked[i] = p
			if p {
				res.letters++
			}
			if head {
				heads++
			}
		}
	}
	b.Queue(advanceSQL, r.key, u64(next.Major), u64(next.Minor), u64(from.Major), u64(from.Minor), int64(heads), int64(res.letters),
		pauseClass, leaseKey(r.key)).
		QueryRow(func(row pgx.Row) error {
			err := row.Scan(&res.parkedStreams, &res.pause)
			if errors.Is(err, pgx.ErrNoRows) {
				return errCheckpointMoved
			}
			return err
		})
	own := func(o int) { *owner = append(*owner, o) }
	own(ownerRunner)
	// The ledger counts every event of the batch: applied, parked, or not
	// of the projection's types. A tenant's row is queued after its events'
	// statements, under the setting they run with; tenants none of whose
	// events the projection handles get theirs after all.
	uses := make([]LedgerUse, len(recs))
	for i, it := range items {
		if parked[i] {
			uses[it.idx] = LedgerParked
		} else {
			uses[it.idx] = LedgerApplied
		}
	}
	res.ledger = r.ledger.Count(recs, func(i int) LedgerUse { return uses[i] })
	counted := make(map[string]bool, len(res.ledger.Tenants()))
	queueLedger := func(t string) {
		if counted[t] || laterLedger {
			return
		}
		n := b.Len()
		r.ledger.QueueTenant(b, res.ledger, t)
		for range b.Len() - n {
			own(ownerRunner)
		}
		counted[t] = true
	}
	for lo := 0; lo < len(items); {
		hi := lo + 1
		for hi < len(items) && items[hi].ev.Tenant == items[lo].ev.Tenant {
			hi++
		}
		b.Queue(db.SetTenantSQL, items[lo].ev.Tenant)
		own(ownerRunner)
		if setBased {
			evs := make([]Event, 0, hi-lo)
			for i, it := range items[lo:hi] {
				if !parked[lo+i] {
					evs = append(evs, it.ev)
				}
			}
			if len(evs) > 0 {
				n := b.Len()
				if err := ApplyEvents(bp, b, evs); err != nil {
					return &setBasedError{err}
				}
				for range b.Len() - n {
					own(ownerGroup)
				}
			}
		} else {
			for i, it := range items[lo:hi] {
				if parked[lo+i] {
					continue
				}
				n := b.Len()
				if err := ApplyEvent(r.proj, b, it.ev); err != nil {
					return r.eventError(it.idx, it.ev.Record, err)
				}
				for range b.Len() - n {
					own(it.idx)
				}
			}
		}
		for i, it := range items[lo:hi] {
			if !parked[lo+i] {
				continue
			}
			_, head := plan.parks(it.ev.Record)
			k := streamKey{it.ev.Tenant, it.ev.Stream}
			var args []any
			var err error
			if head {
				f := plan.fresh[k]
				if args, err = letterArgs(r.letters, r.generation, it.ev.Record, errorText(f.err)); err != nil {
					return err
				}
				b.Queue(parkHeadSQL, append(args, f.next, int32(1))...)
			} else {
				headVersion := plan.existing[k].head
				if f, ok := plan.fresh[k]; ok {
					headVersion = f.rec.Version
				}
				if args, err = letterArgs(r.letters, r.generation, it.ev.Record, behindText(headVersion)); err != nil {
					return err
				}
				b.Queue(parkBehindSQL, args...)
			}
			own(ownerRunner)
		}
		queueLedger(items[lo].ev.Tenant)
		lo = hi
	}
	for _, t := range res.ledger.Tenants() {
		if !counted[t] && !laterLedger {
			b.Queue(db.SetTenantSQL, t)
			own(ownerRunner)
			queueLedger(t)
		}
	}
	return nil
}

// sendTx sends b, whose first query begins a transaction, in one round
// trip, reads every queued query's result (through its callback, if any)
// and commits, calling beforeCommit (when set) just before. On any failure
// it rolls back, even when ctx has ended, and returns queryErr(k, err):
// k is the failing query's index, or -1 when ending the batch or the
// commit failed.
func sendTx(ctx context.Context, conn *pgx.Conn, b *pgx.Batch, beforeCommit func(), queryErr func(k int, err error) error) error {
	GuardCallbacks(b)
	br := conn.SendBatch(ctx, b)
	tx := br.Tx()
	committed := false
	defer func() {
		if !committed {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = tx.Rollback(rctx)
		}
	}()
	for k, qq := range b.QueuedQueries {
		var err error
		if qq.Fn != nil {
			err = qq.Fn(br)
		} else {
			_, err = br.Exec()
		}
		if err != nil {
			br.Close()
			return queryErr(k, err)
		}
	}
	if err := br.Close(); err != nil {
		return queryErr(-1, err)
	}
	if beforeCommit != nil {
		beforeCommit()
	}
	if err := tx.Commit(ctx); err != nil {
		return queryErr(-1, fmt.Errorf("commit: %w", err))
	}
	committed = true
	return nil
}

func (r *Runner) eventError(i int, rec event.Record, err error) error {
	return &EventError{Projection: r.proj.Name(), Index: i, Event: rec, Err: err}
}
