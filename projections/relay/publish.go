package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/projections"
)

// batch is what becomes of each event of a batch read from the log:
// published (its message), parked (why, after how many attempts) or
// skipped (a copy that arrived by a tenant move).
type batch struct {
	recs     []event.Record
	uses     []projections.LedgerUse
	msgs     []*message.Message // the message of each event to publish, nil otherwise
	reasons  []string           // a parked head's failure ("" behind a head)
	attempts []int              // a parked head's failed attempts
	// parked holds the streams parked before the batch and those it parks:
	// every later event of them is parked behind.
	parked map[streamKey]bool
	heads  []int             // events the batch parks as their stream's head
	headAt map[streamKey]int // the index of each of those heads by stream
}

// publishFunc publishes msgs, all or nothing as far as the caller knows.
type publishFunc func(msgs []*message.Message) error

// plan decides, before anything is published, what becomes of each event:
// copies are skipped, events of parked streams parked behind their head,
// and every other event is checked against the size limits (the
// configured one and the publisher's, e.g. NATS's max_payload) and either
// parked as its stream's head or queued for publishing. It returns an
// error only for a failure that is not the event's (the batch is then
// retried).
func (r *Relay) plan(ctx context.Context, recs []event.Record, arrived projections.Arrivals, parked map[streamKey]bool) (*batch, error) {
	n := len(recs)
	b := &batch{recs: recs, uses: make([]projections.LedgerUse, n), msgs: make([]*message.Message, n),
		reasons: make([]string, n), attempts: make([]int, n), parked: parked, headAt: map[streamKey]int{}}
	pub := any(r.cfg.Publisher)
	for i, rec := range recs {
		if arrived.Copied(rec) {
			continue // skipped in the ledger
		}
		if b.parked[keyOf(rec)] {
			b.parkBehind(i)
			continue
		}
		m := NewMessage(rec)
		m.SetContext(ctx)
		if err := checkMessage(pub, r.cfg.Topic, m, r.cfg.MaxMessageBytes); err != nil {
			if err := r.eventFailed(b, i, err); err != nil {
				return nil, err
			}
			continue
		}
		b.msgs[i], b.uses[i] = m, projections.LedgerApplied
	}
	return b, nil
}

func (b *batch) parkBehind(i int) {
	b.msgs[i], b.uses[i] = nil, projections.LedgerParked
}

func (b *batch) parkHead(i int, err error, attempts int) {
	b.msgs[i], b.uses[i], b.reasons[i], b.attempts[i] = nil, projections.LedgerParked, err.Error(), attempts
	b.parked[keyOf(b.recs[i])] = true
	b.headAt[keyOf(b.recs[i])] = i
	b.heads = append(b.heads, i)
}

// parkedBefore says whether recs[i]'s stream is parked at an earlier event:
// before the batch, or at a head the batch parked before i (plan parks an
// oversized event as its head before the events of its stream ahead of it
// are published).
func (b *batch) parkedBefore(i int) bool {
	k := keyOf(b.recs[i])
	if !b.parked[k] {
		return false
	}
	h, ok := b.headAt[k]
	return !ok || h < i
}

// pending returns the messages to publish, in log order.
func (b *batch) pending() []*message.Message {
	var out []*message.Message
	for _, m := range b.msgs {
		if m != nil {
			out = append(out, m)
		}
	}
	return out
}

// eventFailed applies the poison rule to recs[i], whose message failed
// with err: a permanent failure parks its stream now; a panic parks it
// after PanicAttempts (until then the batch is retried); any other failure
// is returned, and the batch is retried without parking anything.
func (r *Relay) eventFailed(b *batch, i int, err error) error {
	rec := b.recs[i]
	switch classify(err) {
	case failPermanent:
		b.parkHead(i, err, 1)
		return nil
	case failPanic:
		// The count is kept even once the event is parked: the parking
		// commits with the batch, and a later event of the batch may still
		// fail it (rolled back, parking included); the next round then
		// parks this one at once and counts the next. Forgotten here, it
		// started over, and K such streams in a batch took
		// PanicAttempts^K rounds. A committed batch clears every count.
		k := panicKey(rec)
		n := r.panics[k] + 1
		r.panics[k] = n
		if n >= r.cfg.PanicAttempts {
			b.parkHead(i, err, n)
			return nil
		}
		var pe *PanicError
		errors.As(err, &pe)
		r.logger.Warn("publishing an event panicked; retrying the batch before its stream is parked",
			"tenant", rec.Tenant, "stream", rec.Stream, "version", rec.Version, "event_id", rec.ID,
			"attempt", n, "of", r.cfg.PanicAttempts, "panic", fmt.Sprint(pe.Value), "stack", string(pe.Stack))
		return fmt.Errorf("event %s/%s v%d, attempt %d of %d: %w", rec.Tenant, rec.Stream, rec.Version, n, r.cfg.PanicAttempts, err)
	}
	return err
}

// publish publishes the batch's messages with pub and returns how many of
// the batch's events it settled (published, parked, or skipped by plan),
// in log order: all of them, or fewer with the reason it stopped.
//
// It hands every message over at once first. When that fails for a reason
// that may be one message's (a permanent failure or a panic; not a broker
// that does not answer), it splits the messages in halves, in log order,
// and publishes each half the same way, down to the single message whose
// failure the poison rule judges: parked (its stream's later events are
// parked behind it) or, for a failure that is not yet the event's, the
// end of the round. The events before that one are settled and commit with
// the checkpoint: a round never ends with nothing to show when some of its
// events could be published, so one failing event costs its stream, not
// the relay (a slow broker once turned a panicking event's one-at-a-time
// search into a round longer than FinishTimeout, rolled back every time:
// the HOSTILE chaos scenario). budget bounds the round's publishing: once
// it is spent, what is settled commits and the rest waits for the next
// round. Messages published before a failure are published again by a
// later call (JetStream drops them by their Nats-Msg-Id within its
// duplicate window; watermill-sql rolled them back with their savepoint).
func (r *Relay) publish(b *batch, pub publishFunc, budget time.Time) (int, error) {
	var idx []int
	for i, m := range b.msgs {
		if m != nil {
			idx = append(idx, i)
		}
	}
	if stop, err := r.publishRange(b, pub, idx, budget, true); stop >= 0 {
		return stop, err
	}
	return len(b.recs), nil
}

// errBudgetSpent ends a round whose publishing took its budget: what it
// settled commits.
var errBudgetSpent = errors.New("the batch's time to publish is spent; committing what is published")

// publishRange publishes the messages of the events idx (in log order) and
// returns -1 once each is published or parked, or the first event it could
// not settle and why. first is the round's first call, which is made
// whatever the budget.
func (r *Relay) publishRange(b *batch, pub publishFunc, idx []int, budget time.Time, first bool) (int, error) {
	var live []int
	var msgs []*message.Message
	for _, i := range idx {
		if b.parkedBefore(i) {
			b.parkBehind(i) // its stream's head was parked by this round
			continue
		}
		live, msgs = append(live, i), append(msgs, b.msgs[i])
	}
	if len(live) == 0 {
		return -1, nil
	}
	if j := r.suspect(b, live); j >= 0 && len(live) > 1 {
		// An event that failed in an earlier round goes alone, the events
		// around it in one call each: its retries cost no new search.
		for _, part := range [][]int{live[:j], live[j : j+1], live[j+1:]} {
			if stop, err := r.publishRange(b, pub, part, budget, first); stop >= 0 {
				return stop, err
			}
			first = first && len(part) == 0
		}
		return -1, nil
	}
	if !first && time.Now().After(budget) {
		return live[0], errBudgetSpent
	}
	err := pub(msgs)
	switch {
	case err == nil:
		return -1, nil
	case len(live) == 1:
		if err := r.eventFailed(b, live[0], err); err != nil {
			return live[0], err
		}
		return -1, nil
	case classify(err) == failTransient:
		return live[0], err
	}
	h := len(live) / 2
	if stop, err := r.publishRange(b, pub, live[:h], budget, false); stop >= 0 {
		return stop, err
	}
	return r.publishRange(b, pub, live[h:], budget, false)
}

// suspect returns the position in live of the first event whose
// publishing panicked in an earlier round, or -1.
func (r *Relay) suspect(b *batch, live []int) int {
	if len(r.panics) == 0 {
		return -1
	}
	for j, i := range live {
		if r.panics[panicKey(b.recs[i])] > 0 {
			return j
		}
	}
	return -1
}

func panicKey(rec event.Record) string { return rec.Tenant + "/" + rec.ID }

// settle cuts the batch to its first n events, the ones a round settled.
func (b *batch) settle(n int) {
	if n == len(b.recs) {
		return
	}
	b.recs, b.uses, b.msgs, b.reasons, b.attempts = b.recs[:n], b.uses[:n], b.msgs[:n], b.reasons[:n], b.attempts[:n]
	heads := b.heads[:0]
	for _, i := range b.heads {
		if i < n {
			heads = append(heads, i)
		}
	}
	b.heads = heads
}

// publishTx publishes msgs with the TxPublisher into tx, inside a
// savepoint: a message the transport refuses rolls back only what this
// call wrote, and the batch's transaction goes on.
func (r *Relay) publishTx(ctx context.Context, tx pgx.Tx, msgs []*message.Message) error {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return fmt.Errorf("savepoint: %w", err)
	}
	pub, err := r.cfg.TxPublisher(sp)
	if err == nil {
		err = safePublish(pub, r.cfg.Topic, msgs)
	}
	if err != nil {
		rollback(ctx, sp)
		return err
	}
	if err := sp.Commit(ctx); err != nil {
		return fmt.Errorf("release savepoint: %w", err)
	}
	return nil
}

// logParks reports the streams a committed batch parked.
func (r *Relay) logParks(b *batch) {
	for _, i := range b.heads {
		rec := b.recs[i]
		r.logger.Error("event cannot be published: its stream is parked for its tenant in the dead-letter store, every other stream goes on; "+
			"retry or discard it with `strata replay dlq`",
			"tenant", rec.Tenant, "stream", rec.Stream, "version", rec.Version, "event_id", rec.ID, "type", rec.Type,
			"attempts", b.attempts[i], "error", b.reasons[i])
	}
}
