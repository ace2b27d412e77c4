package relay

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/orderview"
	"github.com/strata-es/strata/internal/testdb"
)

func sampleRecord() event.Record {
	return event.Record{
		ID:            "0b4e7a0e-5d3c-4f6a-9a51-8c1f2b3d4e5f",
		Tenant:        "acme",
		Stream:        "order-o-1",
		Version:       3,
		Type:          "order.placed",
		SchemaVersion: 1,
		Data:          json.RawMessage(`{"order_id":"o-1","at":"2026-03-01T08:00:00Z"}`),
		Metadata: event.Metadata{CommandID: "cmd-1", CorrelationID: "corr-1", CausationID: "cause-1", Actor: "alice",
			TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", TraceState: "rojo=00f067aa0ba902b7"},
		RecordedAt: time.Date(2026, 3, 1, 8, 0, 0, 123456000, time.UTC),
		Position:   event.Position{Major: 7345, Minor: 12},
	}
}

func TestMessageRoundTrip(t *testing.T) {
	t.Parallel()
	rec := sampleRecord()
	msg := NewMessage(rec)
	// The message UUID names the tenant and the event (issue 29): stable for
	// the event, another for the same event ID in another tenant.
	if want := uuid.NewSHA1(uuid.MustParse("6176ed57-387b-5961-893a-30e7274c5adc"), []byte(rec.Tenant+"/"+rec.ID)).String(); msg.UUID != want {
		t.Errorf("message UUID %s, want the UUIDv5 of tenant and event ID %s", msg.UUID, want)
	}
	if msg.UUID == rec.ID || NewMessage(rec).UUID != msg.UUID {
		t.Errorf("message UUID %s: want one derived from, and unlike, the event ID %s, the same at every publication", msg.UUID, rec.ID)
	}
	other := rec
	other.Tenant = "acme-copy"
	if m := NewMessage(other); m.UUID == msg.UUID || m.Metadata.Get(MetaEventID) != rec.ID {
		t.Errorf("the same event ID in another tenant: message UUID %s (want unlike %s), event_id %s (want %s)", m.UUID, msg.UUID, m.Metadata.Get(MetaEventID), rec.ID)
	}
	want := map[string]string{
		"tenant": "acme", "event_id": rec.ID, "stream": "order-o-1", "version": "3", "type": "order.placed", "schema_version": "1",
		"position": rec.Position.Token(), "recorded_at": "2026-03-01T08:00:00.123456Z", "command_id": "cmd-1",
		"correlation_id": "corr-1", "causation_id": "cause-1", "actor": "alice",
		"traceparent": rec.Metadata.TraceParent, "tracestate": rec.Metadata.TraceState,
	}
	if !reflect.DeepEqual(map[string]string(msg.Metadata), want) {
		t.Errorf("metadata:\n got %v\nwant %v", msg.Metadata, want)
	}
	got, err := RecordFromMessage(msg)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, rec) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, rec)
	}

	// A message published before message IDs named the tenant (its UUID is
	// the bare event ID) still reads back.
	legacy := NewMessage(rec)
	legacy.UUID = rec.ID
	if got, err := RecordFromMessage(legacy); err != nil || !reflect.DeepEqual(got, rec) {
		t.Errorf("message with the event ID as UUID: %+v, %v; want the record", got, err)
	}

	// Empty optional metadata is left out.
	bare := rec
	bare.Metadata, bare.RecordedAt = event.Metadata{}, time.Time{}
	if m := NewMessage(bare); len(m.Metadata) != 7 {
		t.Errorf("bare event: %d metadata keys, want 7: %v", len(m.Metadata), m.Metadata)
	}

	for name, spoil := range map[string]func(m *message.Message){
		"no tenant":         func(m *message.Message) { delete(m.Metadata, MetaTenant) },
		"bad tenant":        func(m *message.Message) { m.Metadata.Set(MetaTenant, "ACME") },
		"uuid mismatch":     func(m *message.Message) { m.UUID = "6a1e9a55-0000-4000-8000-000000000000" },
		"version zero":      func(m *message.Message) { m.Metadata.Set(MetaVersion, "0") },
		"no type":           func(m *message.Message) { delete(m.Metadata, MetaType) },
		"bad position":      func(m *message.Message) { m.Metadata.Set(MetaPosition, "7345/12") },
		"bad schema":        func(m *message.Message) { m.Metadata.Set(MetaSchemaVersion, "v1") },
		"no stream":         func(m *message.Message) { delete(m.Metadata, MetaStream) },
		"bad recorded time": func(m *message.Message) { m.Metadata.Set(MetaRecordedAt, "yesterday") },
	} {
		m := NewMessage(rec)
		spoil(m)
		if _, err := RecordFromMessage(m); !errors.Is(err, ErrBadMessage) {
			t.Errorf("%s: error %v, want ErrBadMessage", name, err)
		}
	}
}

func TestSubject(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ typ, want string }{
		{"order.placed", "strata_events.acme.order.placed"},
		{"order..odd", "strata_events.acme.order._.odd"},
		{"a b*>", "strata_events.acme.a_b__"},
	} {
		if got := Subject(DefaultTopic, "acme", c.typ); got != c.want {
			t.Errorf("Subject(%q) = %q, want %q", c.typ, got, c.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	pub := SQLTxPublisher(nil)
	for _, c := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no publisher", Config{}, "exactly one of Publisher and TxPublisher"},
		{"bad topic", Config{Topic: "Strata.Events", TxPublisher: pub}, "topic"},
		{"batch", Config{BatchSize: 20_000, TxPublisher: pub}, "batch size"},
	} {
		c.cfg.setDefaults()
		err := c.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error about %s", c.name, err, c.want)
		}
	}
	ok := Config{TxPublisher: pub}
	ok.setDefaults()
	if err := ok.Validate(); err != nil {
		t.Error(err)
	}
	if CheckpointName(ok.Topic) != "relay_strata_events" {
		t.Errorf("checkpoint name %s", CheckpointName(ok.Topic))
	}
}

// TestMetadataAndTraceThroughTransports relays one event through each
// transport and checks that what arrives decodes into the stored record,
// field by field, and that the consumer's span continues the trace of the
// request that wrote the event.
func TestMetadataAndTraceThroughTransports(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, time.Minute)
	d := testdb.New(t, orderview.Migrations)
	admin := adminConn(ctx, t, d.AdminURL)
	shadow(ctx, t, admin, "order_list", "s_order_list")
	evs := generate(41, 1, 1)
	evs[0].Metadata.TraceState = "vendor=opaque"
	if err := seed(ctx, admin, 0, evs); err != nil {
		t.Fatal(err)
	}
	var err error
	var stored []event.Record
	waitFor(t, 20*time.Second, "the event visible in the log", func() bool {
		stored, err = postgres.New(nil, d.Projector).ReadAll(ctx, event.Position{}, 10)
		if err != nil {
			t.Fatal(err)
		}
		return len(stored) == 1
	})
	want := stored[0]
	parent, err := trace.TraceIDFromHex(strings.Split(want.Metadata.TraceParent, "-")[1])
	if err != nil {
		t.Fatal(err)
	}
	parentSpan, _ := trace.SpanIDFromHex(strings.Split(want.Metadata.TraceParent, "-")[2])

	for _, tr := range transports(t, d) {
		t.Run(tr.name, func(t *testing.T) {
			relayAll(ctx, t, d, tr, len(evs))

			// A plain subscriber receives the stored record.
			sub := tr.subscriber(t, "raw_"+tr.name)
			sctx, cancel := context.WithCancel(ctx)
			msgs, err := sub.Subscribe(sctx, tr.topic)
			if err != nil {
				t.Fatal(err)
			}
			select {
			case msg := <-msgs:
				got, err := RecordFromMessage(msg)
				if err != nil {
					t.Fatal(err)
				}
				if !got.RecordedAt.Equal(want.RecordedAt) {
					t.Errorf("recorded at %s, want %s", got.RecordedAt, want.RecordedAt)
				}
				got.RecordedAt = want.RecordedAt
				if !reflect.DeepEqual(got, want) {
					t.Errorf("received\n %+v\nwant\n %+v", got, want)
				}
				msg.Ack()
			case <-time.After(20 * time.Second):
				t.Fatal("nothing received")
			}
			cancel()
			_ = sub.Close()

			if tr.name == "nats" {
				nc, err := nats.Connect(natsURL(t))
				if err != nil {
					t.Fatal(err)
				}
				defer nc.Close()
				js, _ := nc.JetStream()
				raw, err := js.GetMsg(tr.topic, 1)
				if err != nil {
					t.Fatal(err)
				}
				if raw.Subject != tr.topic+".t-1.order.created" {
					t.Errorf("subject %s, want %s.t-1.order.created", raw.Subject, tr.topic)
				}
				if id := raw.Header.Get(nats.MsgIdHdr); id != MessageID("t-1", want.ID) || raw.Header.Get(MetaEventID) != want.ID {
					t.Errorf("Nats-Msg-Id %q, event_id %q: want MessageID(t-1, %s) and the event ID", id, raw.Header.Get(MetaEventID), want.ID)
				}
			}

			// A consumer's span is a child of the writing request's span.
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			consumer := "trace_" + tr.name
			c, err := NewConsumer(d.Projector, ConsumerConfig{Registry: order.Registry, Topic: tr.topic, TracerProvider: tp, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Add(consumer, orderview.NewOrderList(orderview.OrderListTables{Orders: "s_order_list"}), tr.subscriber(t, consumer)); err != nil {
				t.Fatal(err)
			}
			stop := runConsumer(ctx, t, c)
			waitFor(t, 20*time.Second, "the event applied", func() bool { return len(appliedVersions(ctx, t, admin, consumer)) == 1 })
			if err := stop(); err != nil {
				t.Error(err)
			}
			var found bool
			for _, s := range rec.Ended() {
				if s.Name() != "relay.consume order.created" {
					continue
				}
				found = true
				if s.SpanContext().TraceID() != parent || s.Parent().SpanID() != parentSpan || !s.Parent().IsRemote() {
					t.Errorf("span %s in trace %s under %s, want trace %s under %s", s.Name(), s.SpanContext().TraceID(), s.Parent().SpanID(), parent, parentSpan)
				}
				if s.Parent().TraceState().String() != "vendor=opaque" {
					t.Errorf("trace state %q", s.Parent().TraceState().String())
				}
				if s.SpanKind() != trace.SpanKindConsumer {
					t.Errorf("span kind %s", s.SpanKind())
				}
				attrs := map[string]string{}
				for _, a := range s.Attributes() {
					attrs[string(a.Key)] = a.Value.Emit()
				}
				if attrs["strata.tenant"] != "t-1" || attrs["messaging.message.id"] != MessageID("t-1", want.ID) || attrs["strata.event_id"] != want.ID || attrs["strata.attempts"] != strconv.Itoa(1) {
					t.Errorf("span attributes %v", attrs)
				}
			}
			if !found {
				t.Errorf("no consumer span among %d", len(rec.Ended()))
			}
			if _, err := admin.Exec(ctx, `TRUNCATE strata.s_order_list`); err != nil {
				t.Fatal(err)
			}
		})
	}
}
