package relay

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/strata-es/strata/domain/event"
)

// TestErasureNoticeOnNATS: an erasure's notice goes to JetStream on the
// tenant's subject for its type, reads back as an event record naming
// the key and the pseudonym, and published again (a rerun after a crash
// between the broker's ack and the step's commit) is kept once.
func TestErasureNoticeOnNATS(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	url := natsURL(t)
	topic := newTopic(t, url)
	notices := Notices{Topic: topic, Publisher: natsPublisher(t, url)}
	n := Erased{ErasureID: "1b4e28ba-2fa1-11d2-883f-0016d3cca427", KeyID: "00112233445566778899aabbccddeeff", Pseudonym: "a1b2c3d4e5f60718",
		At: time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)}
	for range 2 {
		where, err := notices.Publish(ctx, nil, "acme", n)
		if err != nil {
			t.Fatal(err)
		}
		if want := "subject " + topic + ".acme.strata.subject.erased"; where != want {
			t.Fatalf("published on %q, want %q", where, want)
		}
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	info, err := js.StreamInfo(topic)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("%d messages on the stream, want the notice once", info.State.Msgs)
	}
	raw, err := js.GetLastMsg(topic, topic+".acme.strata.subject.erased")
	if err != nil {
		t.Fatal(err)
	}
	msg, err := (&subjectMarshaler{}).Unmarshal(&nats.Msg{Subject: raw.Subject, Header: raw.Header, Data: raw.Data})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := RecordFromMessage(msg)
	if err != nil {
		t.Fatal(err)
	}
	var got Erased
	if err := json.Unmarshal(rec.Data, &got); err != nil {
		t.Fatal(err)
	}
	if rec.Type != ErasedType || rec.Tenant != "acme" || rec.Stream != ErasedStream(n.ErasureID) || rec.Version != 1 || got != n {
		t.Fatalf("notice read back as %+v with %+v, want %+v", rec, got, n)
	}
}

// TestReadNATSOneTenant: ReadNATS hands over every message JetStream keeps
// on one tenant's subjects, oldest first, and none of another tenant's; a
// tenant without messages, and a topic without a stream, hold nothing.
func TestReadNATSOneTenant(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	url := natsURL(t)
	topic := newTopic(t, url)
	read := func(tenant string) []Held {
		t.Helper()
		var out []Held
		if err := ReadNATS(ctx, NATSConfig{URL: url, Logger: quietLogger()}, topic, tenant, func(h Held) error {
			out = append(out, h)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got := read("acme"); len(got) != 0 {
		t.Fatalf("no stream yet: read %+v", got)
	}
	pub := natsPublisher(t, url)
	for i, tenant := range []string{"acme", "globex", "acme"} {
		rec := event.Record{ID: eventID(i), Tenant: tenant, Stream: "order-" + strconv.Itoa(i), Version: 1, Type: "order.created", SchemaVersion: 1,
			Data: []byte(`{"n": ` + strconv.Itoa(i) + `}`)}
		if err := pub.Publish(topic, NewMessage(rec)); err != nil {
			t.Fatal(err)
		}
	}
	got := read("acme")
	if len(got) != 2 || got[0].Stream != "order-0" || got[1].Stream != "order-2" || got[1].Type != "order.created" || string(got[1].Payload) != `{"n": 2}` {
		t.Fatalf("acme's messages: %+v", got)
	}
	if got := read("initech"); len(got) != 0 {
		t.Fatalf("a tenant without messages: read %+v", got)
	}
}
