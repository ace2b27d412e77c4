package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
)

// What the broker holds of a tenant, for `strata subjects verify`: the
// messages the relay published (and erasure notices), as they are kept,
// read without consuming them.

// Held is one message the broker holds.
type Held struct {
	Type, Stream string
	Payload      []byte
}

// ReadNATS calls fn for each message JetStream keeps on the tenant's
// subjects of topic (<topic>.<tenant>.>), oldest first, through an
// ephemeral ordered consumer that acknowledges nothing. A topic without a
// stream holds nothing.
func ReadNATS(ctx context.Context, cfg NATSConfig, topic, tenant string, fn func(Held) error) error {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	nc, err := nats.Connect(cfg.URL, cfg.options()...)
	if err != nil {
		return fmt.Errorf("read the broker: connect: %w", err)
	}
	defer nc.Close()
	js, err := nc.JetStream(nats.Context(ctx))
	if err != nil {
		return fmt.Errorf("read the broker: %w", err)
	}
	filter := topic + "." + tenant + ".>"
	info, err := js.StreamInfo(topic, &nats.StreamInfoRequest{SubjectsFilter: filter})
	if errors.Is(err, nats.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the broker: stream %s: %w", topic, err)
	}
	var held uint64
	for _, n := range info.State.Subjects {
		held += n
	}
	if held == 0 {
		return nil
	}
	sub, err := js.SubscribeSync(filter, nats.BindStream(topic), nats.OrderedConsumer(), nats.DeliverAll())
	if err != nil {
		return fmt.Errorf("read the broker: subscribe to %s: %w", filter, err)
	}
	defer sub.Unsubscribe() //nolint:errcheck // the connection closes anyway
	m := &subjectMarshaler{}
	for {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		raw, err := sub.NextMsgWithContext(wctx)
		cancel()
		if err != nil {
			return fmt.Errorf("read the broker: %s: %w", filter, err)
		}
		msg, err := m.Unmarshal(raw)
		if err != nil {
			return fmt.Errorf("read the broker: %s: %w", raw.Subject, err)
		}
		if err := fn(Held{Type: msg.Metadata.Get(MetaType), Stream: msg.Metadata.Get(MetaStream), Payload: msg.Payload}); err != nil {
			return err
		}
		meta, err := raw.Metadata()
		if err != nil || meta.NumPending == 0 {
			return err
		}
	}
}

// ReadSQL calls fn for each message of the tenant in watermill-sql's table
// of topic, oldest first, in tx (a role that may read the table: the
// projector's).
func ReadSQL(ctx context.Context, tx pgx.Tx, topic, tenant string, fn func(Held) error) error {
	rows, err := tx.Query(ctx, `SELECT coalesce(metadata::jsonb->>$2, ''), coalesce(metadata::jsonb->>$3, ''), payload::text FROM `+
		pgx.Identifier{"watermill_" + topic}.Sanitize()+` WHERE metadata::jsonb->>$4 = $1 ORDER BY "offset"`, tenant, MetaType, MetaStream, MetaTenant)
	if err != nil {
		return fmt.Errorf("read the relay's table: %w", err)
	}
	var h Held
	var payload string
	_, err = pgx.ForEachRow(rows, []any{&h.Type, &h.Stream, &payload}, func() error {
		h.Payload = []byte(payload)
		return fn(h)
	})
	if err != nil {
		return fmt.Errorf("read the relay's table: %w", err)
	}
	return nil
}
