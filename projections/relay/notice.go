package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
)

// Erasure notices. A data subject's erasure destroys the key that sealed
// the subject's fields, which shreds the broker's copies of the events
// where they lie (the relay publishes the stored, sealed JSON). A consumer
// that opened those fields and stored them holds its own copy: the erasure
// tells it, with a notice on the relay's topic, beside the tenant's events
// (NATS subject <topic>.<tenant>.strata.subject.erased). The notice names
// the destroyed key, which every sealed field carries, and the subject's
// pseudonym, never the subject.

// ErasedType is the notice's event type (never in a module's registry: a
// consumer that does not handle it skips it, as any type it does not know).
const ErasedType = "strata.subject.erased"

// Erased is the notice's payload.
type Erased struct {
	ErasureID string    `json:"erasure_id"`
	KeyID     string    `json:"key_id"`
	Pseudonym string    `json:"pseudonym"`
	At        time.Time `json:"at"` // when the erasure was asked for
}

// ErasedStream is the stream of an erasure's notice: one message, at
// version 1, whatever the number of times it is published.
func ErasedStream(erasureID string) string { return "strata-erasure-" + erasureID }

// ErasedMessage returns the notice of an erasure of tenant as a relay
// message (RecordFromMessage reads it like an event's). Its UUID derives
// from the erasure: published again after a crash, it is deduplicated
// like an event's.
func ErasedMessage(tenant string, e Erased) (*message.Message, error) {
	data, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	return NewMessage(event.Record{ID: e.ErasureID, Tenant: tenant, Stream: ErasedStream(e.ErasureID), Version: 1,
		Type: ErasedType, SchemaVersion: 1, Data: data, RecordedAt: e.At}), nil
}

// Notices publishes erasure notices where the relay publishes the events:
// to JetStream (Publisher; at least once, deduplicated by message ID), or
// into watermill-sql's table in the erasure step's transaction
// (TxPublisher; exactly once).
type Notices struct {
	Topic       string
	Publisher   message.Publisher
	TxPublisher func(tx pgx.Tx) (message.Publisher, error)
}

// Publish publishes the notice of e for tenant, with tx the erasure step's
// transaction (on an owner connection: the table's rows are the
// projector's to write), and returns where it went.
func (n Notices) Publish(ctx context.Context, tx pgx.Tx, tenant string, e Erased) (string, error) {
	msg, err := ErasedMessage(tenant, e)
	if err != nil {
		return "", err
	}
	msg.SetContext(ctx)
	if n.TxPublisher != nil {
		if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+db.RoleProjector); err != nil {
			return "", fmt.Errorf("publish the erasure notice: become %s: %w", db.RoleProjector, err)
		}
		pub, err := n.TxPublisher(tx)
		if err != nil {
			return "", err
		}
		if err := pub.Publish(n.Topic, msg); err != nil {
			return "", fmt.Errorf("publish the erasure notice: %w", err)
		}
		return "table watermill_" + n.Topic, nil
	}
	if err := n.Publisher.Publish(n.Topic, msg); err != nil {
		return "", fmt.Errorf("publish the erasure notice: %w", err)
	}
	return "subject " + Subject(n.Topic, tenant, ErasedType), nil
}
