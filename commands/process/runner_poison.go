package process

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
)

// Poison in the log (ARCHITECTURE decisions 5 and 17). A process parks
// what it cannot decide in the projections' dead-letter store, under its
// own name, by stream: an instance whose decision fails parks its
// instance's stream; an event that does not decode, or that Correlate
// cannot place, parks its own stream (no instance is known). A stream
// parked for the process holds every later event of it, and of the
// instances that follow it, for that tenant only; RetryInstance and
// DiscardInstance resolve it like an instance's.

// item is an event of a batch that the process handles: decoded and
// correlated to instance (following stream), or poison.
type item struct {
	idx              int // in the batch as read
	ev               Event
	instance, stream string
	// poison: the event could not be decoded or correlated; it parks
	// its own stream.
	poison error
}

// parking is an event (or a synthetic input) the batch puts into the
// dead-letter store once it has locked and decided every instance.
type parking struct {
	tenant string
	// inst is nil for an event parked in its own stream without an
	// instance (poison, or behind it).
	inst *instanceRow
	// hold: the event is the first to wait for inst, whose stream is
	// parked although the instance is not yet.
	hold     bool
	rec      event.Record
	cause    string
	attempts int // 0: behind the stream's head
	sum      inputSummary
}

type instKey struct{ tenant, instance string }

type streamKey struct{ tenant, stream string }

// parkedStreamsSQL finds which of a tenant's streams are parked for the
// process in its checkpoint's current generation. $1 tenant, $2 process,
// $3 streams.
const parkedStreamsSQL = `SELECT p.stream_id FROM parked_streams p
JOIN projection_checkpoints c ON c.projection = p.projection AND c.generation = p.generation
WHERE p.tenant_id = $1 AND p.projection = $2 AND p.stream_id = ANY($3::text[])`

// parkedStreams looks up, in tx (one pipelined round trip, each tenant
// under its own setting), which streams the batch's items touch — their
// own, and their instance's — are parked for the process. It leaves the
// setting of some tenant behind.
func (r *Runner) parkedStreams(ctx context.Context, tx pgx.Tx, items []item) (map[streamKey]bool, error) {
	out := map[streamKey]bool{}
	if len(items) == 0 {
		return out, nil
	}
	streams := map[string][]string{}
	var tenants []string
	seen := map[streamKey]bool{}
	add := func(t, s string) {
		k := streamKey{t, s}
		if s == "" || seen[k] {
			return
		}
		seen[k] = true
		if _, ok := streams[t]; !ok {
			tenants = append(tenants, t)
		}
		streams[t] = append(streams[t], s)
	}
	for _, it := range items {
		add(it.ev.Tenant, it.ev.Stream)
		add(it.ev.Tenant, it.stream)
	}
	b := &pgx.Batch{}
	for _, t := range tenants {
		b.Queue(db.SetTenantSQL, t)
		b.Queue(parkedStreamsSQL, t, r.name, streams[t]).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var s string
				if err := rows.Scan(&s); err != nil {
					return err
				}
				out[streamKey{t, s}] = true
			}
			return rows.Err()
		})
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("process %s: look up parked streams: %w", r.name, err)
	}
	return out, nil
}

// holdFollowers parks the instances (not done, not parked) that follow
// the stream of rec, a poison event that parks it: none of their inputs is
// decided until the stream is retried or discarded, so that an outcome or
// a deadline never overtakes an event of their stream. Each is locked
// through lock (the batch's cache), in tx with rec's tenant set.
func (r *Runner) holdFollowers(ctx context.Context, tx pgx.Tx, lock func(tenant, id, stream string) (*instanceRow, error), rec event.Record, cause error) error {
	rows, err := tx.Query(ctx, `SELECT instance FROM process_instances
WHERE tenant_id = $1 AND process = $2 AND stream_id = $3 AND NOT done AND NOT parked ORDER BY instance`, rec.Tenant, r.name, rec.Stream)
	if err != nil {
		return fmt.Errorf("process %s: instances of %s/%s: %w", r.name, rec.Tenant, rec.Stream, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("process %s: instances of %s/%s: %w", r.name, rec.Tenant, rec.Stream, err)
	}
	sum := summarize(Input{Kind: InputEvent, Event: &Event{Record: rec}})
	sum.Letter = rec.ID
	for _, id := range ids {
		inst, err := lock(rec.Tenant, id, rec.Stream)
		if err != nil {
			return err
		}
		if inst.parked || inst.done || inst.stream != rec.Stream {
			continue
		}
		if err := r.w.hold(ctx, tx, inst, sum, "waits behind an event of its stream that the process cannot decide: "+cause.Error()); err != nil {
			return err
		}
	}
	return nil
}
