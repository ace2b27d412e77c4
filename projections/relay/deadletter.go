package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain/event"
)

// DeadLetter is an event a consumer could not apply, or that followed such
// an event on a parked stream.
type DeadLetter struct {
	// Consumer is the consumer (projection) that could not apply it.
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

// TableSink is a DeadLetterSink on the relay_dead_letters table (migration
// 003_relay): a stream is parked for a consumer while it has dead letters
// there. It stands in for the shared dead-letter store until the consumer
// side is connected to it.
type TableSink struct{}

var _ DeadLetterSink = TableSink{}

// Park implements DeadLetterSink.
func (TableSink) Park(ctx context.Context, tx pgx.Tx, l DeadLetter) error {
	md, err := json.Marshal(l.Metadata)
	if err != nil {
		return fmt.Errorf("park: %w", err)
	}
	reason := l.Reason
	if len(reason) > 8000 {
		reason = strings.ToValidUTF8(reason[:8000], "")
	}
	var recordedAt *time.Time
	if !l.Event.RecordedAt.IsZero() {
		recordedAt = &l.Event.RecordedAt
	}
	_, err = tx.Exec(ctx, `INSERT INTO relay_dead_letters
    (tenant_id, consumer, stream_id, version, event_id, event_type, schema_version, position, recorded_at, payload, metadata, reason, attempts)
VALUES ($1, $2, $3, $4, $5::uuid, $6, $7, $8, $9, $10, $11, $12, $13)
ON CONFLICT (tenant_id, consumer, event_id) DO NOTHING`,
		l.Event.Tenant, l.Consumer, l.Event.Stream, l.Event.Version, l.Event.ID, l.Event.Type, l.Event.SchemaVersion,
		l.Event.Position.Token(), recordedAt, []byte(l.Event.Data), md, reason, l.Attempts)
	if err != nil {
		return fmt.Errorf("park %s/%s v%d for %s: %w", l.Event.Tenant, l.Event.Stream, l.Event.Version, l.Consumer, err)
	}
	return nil
}

// Parked implements DeadLetterSink.
func (TableSink) Parked(ctx context.Context, tx pgx.Tx, consumer, tenant, stream string) (bool, error) {
	var parked bool
	err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM relay_dead_letters WHERE tenant_id = $1 AND consumer = $2 AND stream_id = $3)`,
		tenant, consumer, stream).Scan(&parked)
	if err != nil {
		return false, fmt.Errorf("parked %s/%s for %s: %w", tenant, stream, consumer, err)
	}
	return parked, nil
}
