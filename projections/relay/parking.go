package relay

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/projections"
)

// The relay's dead letters.
//
// The relay parks into the runners' dead-letter store (dead_letters,
// parked_streams) under its checkpoint name, relay_<topic>, like a
// broker-fed consumer parks under its own (projections.ParkEvent): the
// letter commits with the checkpoint's advance past the event, in the
// batch's transaction, and the counters of the relay's checkpoint row say
// whether any stream is parked at all. `strata replay dlq` lists, retries
// (Republisher) and discards them.
//
// Nothing else may change which of the relay's streams are parked while a
// batch decides what to publish and what to park: the batch's transaction
// starts with the probe of the relay's pause lock (projections.
// QueuePauseProbe) and holds it, shared, until it commits. A tool retrying
// or discarding the relay's letters (projections.AcquireExclusive on the
// relay's name) waits for the batch in flight and makes the next ones wait
// (errPaused) until it is done. Without it, a batch that found a stream
// parked could park an event behind a head the tool has just published and
// unparked, and that event would never be published.

// errPaused: a dead-letter tool holds the relay's pause lock; the batch
// waits, it has not failed.
var errPaused = errors.New("relay paused by a dead-letter operation")

// streamKey is a stream of a tenant.
type streamKey struct{ tenant, stream string }

func keyOf(rec event.Record) streamKey { return streamKey{rec.Tenant, rec.Stream} }

// begin starts the transaction of a batch of recs on conn: it probes the
// pause lock (errPaused when a tool holds it) and returns which of the
// batch's streams are parked for the relay (looked up only when the
// relay's row counts parked streams at all).
func (r *Relay) begin(ctx context.Context, conn *pgx.Conn, recs []event.Record) (pgx.Tx, map[streamKey]bool, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("relay %s: begin: %w", r.name, err)
	}
	fail := func(err error) (pgx.Tx, map[streamKey]bool, error) {
		rollback(ctx, tx)
		return nil, nil, err
	}
	b := &pgx.Batch{}
	var paused bool
	projections.QueuePauseProbe(b, r.name, &paused)
	var streams int64
	var generation string
	b.Queue(`SELECT parked_streams, generation::text FROM projection_checkpoints WHERE projection = $1`, r.name).
		QueryRow(func(row pgx.Row) error { return row.Scan(&streams, &generation) })
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fail(fmt.Errorf("relay %s: parked streams: %w", r.name, err))
	}
	if paused {
		return fail(errPaused)
	}
	parked := map[streamKey]bool{}
	if streams == 0 {
		return tx, parked, nil
	}
	byTenant := map[string][]string{}
	var tenants []string
	seen := map[streamKey]bool{}
	for _, rec := range recs {
		k := keyOf(rec)
		if seen[k] {
			continue
		}
		seen[k] = true
		if _, ok := byTenant[k.tenant]; !ok {
			tenants = append(tenants, k.tenant)
		}
		byTenant[k.tenant] = append(byTenant[k.tenant], k.stream)
	}
	b = &pgx.Batch{}
	for _, t := range tenants {
		b.Queue(db.SetTenantSQL, t)
		b.Queue(`SELECT stream_id FROM parked_streams WHERE tenant_id = $1 AND projection = $2 AND generation = $3::uuid AND stream_id = ANY($4::text[])`,
			t, r.name, generation, byTenant[t]).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var s string
				if err := rows.Scan(&s); err != nil {
					return err
				}
				parked[streamKey{t, s}] = true
			}
			return rows.Err()
		})
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fail(fmt.Errorf("relay %s: look up parked streams: %w", r.name, err))
	}
	return tx, parked, nil
}

// park stores the batch's parked events in the dead-letter store, in log
// order, in tx: a stream's failing event becomes its head, the events
// behind it wait (projections.ParkEvent tells the two apart).
func (r *Relay) park(ctx context.Context, tx pgx.Tx, b *batch) error {
	for i, rec := range b.recs {
		if b.uses[i] != projections.LedgerParked {
			continue
		}
		if err := db.SetTenant(ctx, tx, rec.Tenant); err != nil {
			return fmt.Errorf("relay %s: park %s/%s v%d: %w", r.name, rec.Tenant, rec.Stream, rec.Version, err)
		}
		if _, err := projections.ParkEvent(ctx, tx, r.name, rec, b.reasons[i], b.attempts[i]); err != nil {
			return fmt.Errorf("relay %s: %w", r.name, err)
		}
	}
	return nil
}
