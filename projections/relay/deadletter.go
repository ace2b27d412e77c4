package relay

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/projections"
)

// DeadLetter is an event a consumer could not apply, or that followed such
// an event on a parked stream.
type DeadLetter struct {
	// Consumer is the consumer that could not apply it.
	Consumer string
	Event    event.Record
	// Reason is the last failure, or why the event was parked without
	// being tried (its stream was already parked).
	Reason string
	// Attempts is how often the consumer tried to apply it (0: parked
	// behind an earlier dead letter of its stream).
	Attempts int
	// Metadata is the message's metadata as received, including
	// watermill's poison keys (reason_poisoned, handler_poisoned, ...).
	Metadata map[string]string
}

// DeadLetterSink is the dead-letter store as the consumer side needs it
// (ARCHITECTURE decision 5: poison events park their stream, not the
// projection). Both methods run inside the consumer's transaction, under
// the event's tenant (set for row-level security), the same transaction
// that records the stream version as handled: a dead letter and the
// consumer's progress past it commit together.
type DeadLetterSink interface {
	// Park stores letter and parks its stream for its consumer: every later
	// event of the stream is parked behind it until the stream is retried
	// or discarded by the dead-letter tooling.
	Park(ctx context.Context, tx pgx.Tx, letter DeadLetter) error
	// Parked reports whether the consumer's stream is parked.
	Parked(ctx context.Context, tx pgx.Tx, consumer, tenant, stream string) (bool, error)
}

// StoreSink is the DeadLetterSink on the shared dead-letter store
// (dead_letters and parked_streams, migration 004), the runners' own: a
// consumer parks there under its name as if it were a projection, with
// the counters on the projection_checkpoints row of that name (created on
// its first dead letter), so that `strata replay dlq` and
// /v1/admin/dead-letters list, retry and discard its letters like a
// runner's (see ConsumerProjection). It parks with projections.ParkEvent:
// a letter on a parked stream waits behind the stream's head, any other
// becomes the head of its newly parked stream with the consumer's last
// error and attempts, and is not retried automatically (the consumer's
// Retry middleware has done that). The event is copied whole; of the
// message's metadata only the event's own is kept (watermill's poison
// reason becomes the letter's error, the handler its projection).
type StoreSink struct{}

var _ DeadLetterSink = StoreSink{}

// Park implements DeadLetterSink.
func (StoreSink) Park(ctx context.Context, tx pgx.Tx, l DeadLetter) error {
	_, err := projections.ParkEvent(ctx, tx, l.Consumer, l.Event, l.Reason, l.Attempts)
	return err
}

// Parked implements DeadLetterSink.
func (StoreSink) Parked(ctx context.Context, tx pgx.Tx, consumer, tenant, stream string) (bool, error) {
	_, parked, err := projections.ParkedHead(ctx, tx, consumer, tenant, stream)
	return parked, err
}

// ConsumerProjection returns p as the dead-letter tooling must see the
// consumer named consumer that applies it (replay.Config.Consumers): named
// after the consumer, whose name its dead letters, checkpoint row and
// pause lock carry, and recording in relay_applied, in the transaction of
// each letter it applies, that the consumer has handled that version (a
// no-op for letters the consumer parked itself, whose versions it recorded
// when parking them; it never moves a stream's version back). A retry
// (projections.RetryStream under the consumer's name) re-applies a parked
// stream's letters with it, in order, and unparks the stream, while the
// consumer, probing the same pause lock, nacks that consumer's messages.
func ConsumerProjection(consumer string, p projections.Projection) projections.Projection {
	return consumerProjection{Projection: p, name: consumer}
}

type consumerProjection struct {
	projections.Projection
	name string
}

func (c consumerProjection) Name() string { return c.name }

// advanceSQL records a version as handled, never moving a stream back.
const advanceSQL = `INSERT INTO relay_applied (tenant_id, consumer, stream_id, version, event_id, position)
VALUES ($1, $2, $3, $4, $5::uuid, $6)
ON CONFLICT (tenant_id, consumer, stream_id) DO UPDATE
SET version = excluded.version, event_id = excluded.event_id, position = excluded.position, updated_at = now()
WHERE relay_applied.version < excluded.version`

func (c consumerProjection) Apply(b *pgx.Batch, ev projections.Event) error {
	if err := projections.ApplyEvent(c.Projection, b, ev); err != nil {
		return err
	}
	b.Queue(advanceSQL, ev.Tenant, c.name, ev.Stream, ev.Version, ev.ID, ev.Position.Token())
	return nil
}
