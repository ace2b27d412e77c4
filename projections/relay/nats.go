package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/textproto"
	"regexp"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
)

// NATS JetStream layout.
//
// A topic is one JetStream stream of the same name (watermill-nats names
// the stream after the topic), capturing the subjects <topic>.>. Each event
// is published on <topic>.<tenant>.<event type>, e.g.
// strata_events.acme.order.placed, so that a consumer may filter on a
// tenant (strata_events.acme.>) or an event type
// (strata_events.*.order.paid). Whatever the filter, a consumer sees the
// matching messages in stream-sequence order, which is the relay's publish
// order, which is log order: one stream's events (one tenant, any type)
// therefore arrive in version order as long as the consumer has at most
// one message in flight (MaxAckPending 1, as NATSSubscriber sets).
//
// Every message carries Nats-Msg-Id = the message UUID, MessageID(tenant,
// event ID), so JetStream drops a re-publication of the same event within
// the stream's duplicate window (2 minutes by default) — the usual case
// after a relay crash between publishing and checkpointing — and never
// takes another tenant's event with the same event ID for one. Beyond the
// window, consumers deduplicate on (tenant, event ID) or on (tenant,
// stream, version), as Consumer does.

// NATSConfig configures the JetStream publisher and subscribers.
type NATSConfig struct {
	// URL of the NATS server, e.g. nats://127.0.0.1:4222.
	URL string
	// Name is the client connection's name shown by the server (default
	// "strata").
	Name string
	// AckWait is how long JetStream waits for a consumer's ack before
	// redelivering (default 30s). It must exceed a message's longest
	// handling, retries included.
	AckWait time.Duration
	// NakDelay is how long JetStream waits before redelivering a message a
	// consumer nacked (default 1s).
	NakDelay time.Duration
	// PublishTimeout bounds the wait for each JetStream acknowledgement
	// (default 10s).
	PublishTimeout time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

func (c *NATSConfig) setDefaults() {
	if c.Name == "" {
		c.Name = "strata"
	}
	if c.AckWait == 0 {
		c.AckWait = 30 * time.Second
	}
	if c.NakDelay == 0 {
		c.NakDelay = time.Second
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

func (c NATSConfig) validate() error {
	var errs []error
	if !strings.HasPrefix(c.URL, "nats://") && !strings.HasPrefix(c.URL, "tls://") {
		errs = append(errs, errors.New("NATS URL: want nats://host:port"))
	}
	if c.AckWait <= 0 || c.NakDelay <= 0 || c.PublishTimeout <= 0 {
		errs = append(errs, errors.New("NATS durations must be positive"))
	}
	return errors.Join(errs...)
}

func (c NATSConfig) options() []nats.Option {
	return []nats.Option{
		nats.Name(c.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(500 * time.Millisecond),
	}
}

// natsSubjects is the watermill-nats SubjectCalculator: the stream named
// topic captures <topic>.>, and a durable consumer (the queue group) reads
// all of it.
func natsSubjects(queueGroup, topic string) *wnats.SubjectDetail {
	return &wnats.SubjectDetail{Primary: topic + ".>", QueueGroup: queueGroup}
}

var subjectUnsafe = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// Subject returns the NATS subject an event is published on:
// <topic>.<tenant>.<event type>, the type's characters outside
// [A-Za-z0-9_.-] and empty tokens replaced by "_".
func Subject(topic, tenant, eventType string) string {
	t := subjectUnsafe.ReplaceAllString(eventType, "_")
	parts := strings.Split(t, ".")
	for i, p := range parts {
		if p == "" {
			parts[i] = "_"
		}
	}
	return topic + "." + tenant + "." + strings.Join(parts, ".")
}

// subjectMarshaler puts the event's metadata into NATS headers
// (watermill's NATSMarshaler) and publishes it on its Subject.
type subjectMarshaler struct{ wnats.NATSMarshaler }

func (m *subjectMarshaler) Marshal(topic string, msg *message.Message) (*nats.Msg, error) {
	nm, err := m.NATSMarshaler.Marshal(topic, msg)
	if err != nil {
		return nil, err
	}
	tenant, typ := msg.Metadata.Get(MetaTenant), msg.Metadata.Get(MetaType)
	if !tenantPattern.MatchString(tenant) || typ == "" {
		return nil, fmt.Errorf("%w: message %s has no tenant or type to route by", ErrBadMessage, msg.UUID)
	}
	nm.Subject = Subject(topic, tenant, typ)
	return nm, nil
}

// NATSPublisher is the relay's JetStream publisher (NewNATSPublisher).
type NATSPublisher struct {
	*wnats.Publisher
	conn      *nats.Conn
	marshaler wnats.Marshaler
}

var (
	_ message.Publisher = (*NATSPublisher)(nil)
	_ MessageChecker    = (*NATSPublisher)(nil)
)

// NewNATSPublisher returns a JetStream publisher for the relay: it creates
// the topic's stream when missing (AutoProvision), sets Nats-Msg-Id to the
// message UUID (TrackMsgId) and returns from Publish only once JetStream has
// acknowledged every message.
func NewNATSPublisher(cfg NATSConfig) (*NATSPublisher, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	conn, err := nats.Connect(cfg.URL, cfg.options()...)
	if err != nil {
		return nil, fmt.Errorf("nats publisher: connect: %w", err)
	}
	marshaler := &subjectMarshaler{}
	pub, err := wnats.NewPublisherWithNatsConn(conn, wnats.PublisherPublishConfig{
		Marshaler:         marshaler,
		SubjectCalculator: natsSubjects,
		JetStream: wnats.JetStreamConfig{
			AutoProvision:  true,
			TrackMsgId:     true,
			ConnectOptions: []nats.JSOpt{nats.MaxWait(cfg.PublishTimeout)},
		},
	}, watermillLogger(cfg.Logger))
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("nats publisher: %w", err)
	}
	return &NATSPublisher{Publisher: pub, conn: conn, marshaler: marshaler}, nil
}

// CheckMessage implements MessageChecker: msg as it would go on the wire
// to topic (payload, and the headers that carry its metadata, its UUID and
// Nats-Msg-Id) must fit in the server's max_payload, which the server
// announces in its INFO (1 MiB by default) and nats.go enforces on every
// publication (nats.ErrMaxPayload).
func (p *NATSPublisher) CheckMessage(topic string, msg *message.Message) error {
	nm, err := p.marshaler.Marshal(topic, msg)
	if err != nil {
		return err
	}
	size := int64(len(nm.Data)) + natsHeaderSize(nm.Header, msg.UUID)
	if max := p.conn.MaxPayload(); max > 0 && size > max {
		return &TooLargeError{Size: size, Max: max, Limit: "maximum payload of the NATS server (max_payload)"}
	}
	return nil
}

// natsHeaderSize is the size of h on the wire once JetStream's publish adds
// Nats-Msg-Id = msgID, as nats.go counts it (Msg.headerSize).
func natsHeaderSize(h nats.Header, msgID string) int64 {
	n := len("NATS/1.0\r\n") + len("\r\n")
	for k, vs := range h {
		if k == nats.MsgIdHdr {
			continue
		}
		for _, v := range vs {
			n += len(k) + len(textproto.TrimString(v)) + 4 // ": " and CRLF
		}
	}
	n += len(nats.MsgIdHdr) + len(msgID) + 4
	return int64(n)
}

// NewNATSSubscriber returns a JetStream subscriber for one consumer: a
// durable consumer named consumer (also its deliver group, so that several
// processes may subscribe and one takes over when another leaves), reading
// the whole topic from its first message, with explicit acks and at most
// one message in flight, which keeps every stream's events in order even
// across redeliveries.
//
// Two defaults of the underlying libraries would lose or replay messages,
// and are avoided here:
//   - nats.go acknowledges a message when the callback returns unless
//     nats.ManualAck is set; watermill's callback also returns without an
//     ack when the subscriber is closing, so the message would be lost.
//   - nats.go deletes a consumer it created itself when the subscription
//     ends (watermill unsubscribes on Close), durable or not: every restart
//     would start over from the first message, and one process leaving
//     would delete the consumer of all the others. The subscriber therefore
//     creates the durable consumer itself (or updates its ack wait) before
//     subscribing, and nats.go only attaches to it.
func NewNATSSubscriber(cfg NATSConfig, consumer string) (message.Subscriber, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if !consumerPattern.MatchString(consumer) {
		return nil, fmt.Errorf("nats subscriber: consumer %q: want [a-z][a-z0-9_]{0,62}", consumer)
	}
	nc, err := nats.Connect(cfg.URL, cfg.options()...)
	if err != nil {
		return nil, fmt.Errorf("nats subscriber: connect: %w", err)
	}
	js, err := nc.JetStream(nats.MaxWait(cfg.PublishTimeout))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats subscriber: %w", err)
	}
	inner, err := wnats.NewSubscriberWithNatsConn(nc, wnats.SubscriberSubscriptionConfig{
		QueueGroupPrefix:  consumer,
		SubscribersCount:  1,
		CloseTimeout:      cfg.AckWait,
		AckWaitTimeout:    cfg.AckWait,
		SubscribeTimeout:  30 * time.Second,
		Unmarshaler:       &wnats.NATSMarshaler{},
		SubjectCalculator: natsSubjects,
		NakDelay:          wnats.NewStaticDelay(cfg.NakDelay),
		JetStream: wnats.JetStreamConfig{
			DurablePrefix:    consumer,
			SubscribeOptions: []nats.SubOpt{nats.ManualAck()},
		},
	}, watermillLogger(cfg.Logger))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats subscriber: %w", err)
	}
	return &natsSubscriber{Subscriber: inner, js: js, consumer: consumer, cfg: cfg}, nil
}

type natsSubscriber struct {
	*wnats.Subscriber
	js       nats.JetStreamContext
	consumer string
	cfg      NATSConfig
}

func (s *natsSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if err := ensureStream(s.js, topic); err != nil {
		return nil, err
	}
	if err := ensureConsumer(s.js, topic, s.consumer, s.cfg.AckWait); err != nil {
		return nil, err
	}
	return s.Subscriber.Subscribe(ctx, topic)
}

// ensureStream creates the topic's stream as watermill-nats's AutoProvision
// would, when it is missing.
func ensureStream(js nats.JetStreamManager, topic string) error {
	_, err := js.StreamInfo(topic)
	if errors.Is(err, nats.ErrStreamNotFound) {
		_, err = js.AddStream(&nats.StreamConfig{Name: topic, Subjects: natsSubjects("", topic).All()})
		if errors.Is(err, nats.ErrStreamNameAlreadyInUse) {
			err = nil // created concurrently
		}
	}
	if err != nil {
		return fmt.Errorf("nats stream %s: %w", topic, err)
	}
	return nil
}

// ensureConsumer creates the durable push consumer of a relay consumer, or
// brings its ack wait and in-flight limit to the configured values.
func ensureConsumer(js nats.JetStreamManager, topic, consumer string, ackWait time.Duration) error {
	want := &nats.ConsumerConfig{
		Durable:        consumer,
		Description:    "strata relay consumer",
		DeliverSubject: "_strata.deliver." + topic + "." + consumer,
		DeliverGroup:   consumer,
		DeliverPolicy:  nats.DeliverAllPolicy,
		AckPolicy:      nats.AckExplicitPolicy,
		AckWait:        ackWait,
		MaxAckPending:  1,
		FilterSubject:  natsSubjects(consumer, topic).Primary,
		ReplayPolicy:   nats.ReplayInstantPolicy,
	}
	info, err := js.ConsumerInfo(topic, consumer)
	switch {
	case errors.Is(err, nats.ErrConsumerNotFound):
		if _, err = js.AddConsumer(topic, want); err != nil {
			// Created concurrently by another process with the same config?
			if _, ierr := js.ConsumerInfo(topic, consumer); ierr == nil {
				err = nil
			}
		}
	case err != nil:
	case info.Config.AckWait != ackWait || info.Config.MaxAckPending != 1:
		c := info.Config
		c.AckWait, c.MaxAckPending = ackWait, 1
		_, err = js.UpdateConsumer(topic, &c)
	}
	if err != nil {
		return fmt.Errorf("nats consumer %s of %s: %w", consumer, topic, err)
	}
	return nil
}

// watermillLogger adapts slog for watermill, whose Info lines (handlers
// starting, subscribers closing) are debug detail for strata.
func watermillLogger(l *slog.Logger) watermill.LoggerAdapter {
	return watermill.NewSlogLoggerWithLevelMapping(l, map[slog.Level]slog.Level{slog.LevelInfo: slog.LevelDebug})
}
