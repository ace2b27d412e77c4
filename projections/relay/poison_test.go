package relay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/orderview"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/replay"
)

// noteEvent is an event of stream s of tenant at version v whose payload
// weighs about size bytes (the relay never decodes payloads).
func noteEvent(tenant, stream string, v int64, size int) genEvent {
	return genEvent{Tenant: tenant, Stream: stream, Version: v, Type: "order.noted", SchemaVersion: 1,
		Data: []byte(fmt.Sprintf(`{"note":%q}`, strings.Repeat("x", max(size-11, 1))))}
}

// jsMessage is one message JetStream holds: tenant/stream and version.
type jsMessage struct {
	key     string
	version string
	eventID string
}

// jsMessages returns every message of topic's JetStream stream in stream
// order.
func jsMessages(t testing.TB, url, topic string) []jsMessage {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	si, err := js.StreamInfo(topic)
	if err != nil {
		return nil
	}
	var out []jsMessage
	for seq := si.State.FirstSeq; seq > 0 && seq <= si.State.LastSeq; seq++ {
		m, err := js.GetMsg(topic, seq)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, jsMessage{key: m.Header.Get(MetaTenant) + "/" + m.Header.Get(MetaStream), version: m.Header.Get(MetaVersion), eventID: m.Header.Get(MetaEventID)})
	}
	return out
}

func renderMessages(ms []jsMessage) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = m.key + " v" + m.version
	}
	return strings.Join(parts, ", ")
}

// startRelay runs a relay until the test ends.
func startRelay(ctx context.Context, t *testing.T, d *testdb.DB, cfg Config) *Relay {
	t.Helper()
	r, err := New(postgres.New(nil, d.Projector), d.Projector, cfg)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(rctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

// relayLetters lists the relay's dead letters (every state) through the
// operator's library.
func relayLetters(ctx context.Context, t *testing.T, d *testdb.DB, name string) []projections.DeadLetter {
	t.Helper()
	svc, err := replay.New(replay.Config{Registry: order.Registry, Projections: orderview.All(), Pool: d.Projector, App: d.App,
		Log: postgres.New(d.App, d.Projector), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	all, err := svc.DeadLetters(ctx, replay.ListOptions{Statuses: []projections.LetterStatus{projections.LetterParked, projections.LetterRetried, projections.LetterDiscarded}})
	if err != nil {
		t.Fatal(err)
	}
	var out []projections.DeadLetter
	for _, l := range all {
		if l.Projection == name {
			out = append(out, l)
		}
	}
	return out
}

// TestRelayParksOversizedEvent is issue 29's finding 4: tenant A's 2 MiB
// event (above the NATS server's max_payload, 1 MiB by default) sits
// between tenant B's events in the log. The relay must not retry it
// forever, for everyone: it parks A's stream in the dead-letter store
// (under the relay's name, listed with every other dead letter) with A's
// later event of that stream behind it, publishes every other event — B's,
// and A's other stream — in log order, and its checkpoint passes the batch
// without an error. An event of A's parked stream that arrives later is
// parked behind it too, while B's next event is published.
//
// It runs twice: with the relay's NATSPublisher, which tells the relay
// before publishing that the message exceeds the server's max_payload, and
// with a publisher that does not, so that the relay learns it only from
// the failed publication of the batch (nats.ErrMaxPayload) and must find
// the message by publishing one at a time.
func TestRelayParksOversizedEvent(t *testing.T) {
	t.Parallel()
	for _, checked := range []bool{true, false} {
		name := "checked before publishing"
		if !checked {
			name = "found by publishing"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testRelayParksOversizedEvent(t, checked)
		})
	}
}

// plainPublisher hides a publisher's MessageChecker.
type plainPublisher struct{ message.Publisher }

func testRelayParksOversizedEvent(t *testing.T, checked bool) {
	ctx := testCtx(t, 2*time.Minute)
	url := natsURL(t)
	topic := newTopic(t, url)
	d := testdb.New(t, orderview.Migrations)
	admin := adminConn(ctx, t, d.AdminURL)

	const big = 2 << 20
	evs := []genEvent{
		noteEvent("t-b", "order-b", 1, 200),
		noteEvent("t-a", "order-a1", 1, 200),
		noteEvent("t-b", "order-b", 2, 200),
		noteEvent("t-a", "order-a1", 2, big),
		noteEvent("t-b", "order-b", 3, 200),
		noteEvent("t-a", "order-a1", 3, 200),
		noteEvent("t-a", "order-a2", 1, 200),
		noteEvent("t-b", "order-b", 4, 200),
	}
	if err := seed(ctx, admin, 0, evs); err != nil {
		t.Fatal(err)
	}
	pub, err := NewNATSPublisher(NATSConfig{URL: url, PublishTimeout: 5 * time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	var publisher message.Publisher = pub
	if !checked {
		publisher = plainPublisher{pub}
	}
	r := startRelay(ctx, t, d, Config{Topic: topic, Publisher: publisher, PollInterval: 20 * time.Millisecond,
		MinErrorBackoff: 20 * time.Millisecond, MaxErrorBackoff: 100 * time.Millisecond, Logger: testLogger(t, 1)})

	want := "t-b/order-b v1, t-a/order-a1 v1, t-b/order-b v2, t-b/order-b v3, t-a/order-a2 v1, t-b/order-b v4"
	deadline := time.Now().Add(30 * time.Second)
	for renderMessages(jsMessages(t, url, topic)) != want {
		if time.Now().After(deadline) {
			t.Fatalf("JetStream holds [%s], want [%s]; relay status %+v", renderMessages(jsMessages(t, url, topic)), want, r.Status())
		}
		time.Sleep(20 * time.Millisecond)
	}
	head := lastPosition(ctx, t, admin)
	checkpoint := func() projections.Checkpoint {
		cps, err := projections.ReadCheckpoints(ctx, d.Projector, r.Name())
		if err != nil {
			t.Fatal(err)
		}
		return cps[r.Name()]
	}
	waitFor(t, 10*time.Second, "the relay's checkpoint at the log's last event", func() bool { return checkpoint().Position == head })
	if cp := checkpoint(); cp.Status != projections.StateRunning || cp.LastError != "" || cp.ParkedStreams != 1 || cp.ParkedLetters != 2 {
		t.Errorf("relay checkpoint %+v: want running, no error, 1 parked stream and 2 parked letters", cp)
	}
	letters := relayLetters(ctx, t, d, r.Name())
	if len(letters) != 2 {
		t.Fatalf("relay dead letters %+v, want 2", letters)
	}
	if l := letters[0]; l.Tenant != "t-a" || l.Event.Stream != "order-a1" || l.Event.Version != 2 || !l.Head || l.Attempts != 1 ||
		l.Status != projections.LetterParked || !strings.Contains(l.Error, "maximum payload") || l.Event.ID != eventID(3) {
		t.Errorf("head letter: %s/%s v%d head=%v attempts=%d %s %q; want t-a/order-a1 v2, the head, 1 attempt, parked, the size in the error",
			l.Tenant, l.Event.Stream, l.Event.Version, l.Head, l.Attempts, l.Status, l.Error)
	}
	if l := letters[1]; l.Tenant != "t-a" || l.Event.Stream != "order-a1" || l.Event.Version != 3 || l.Head || l.Attempts != 0 || l.Status != projections.LetterParked {
		t.Errorf("second letter: %s/%s v%d head=%v attempts=%d %s; want t-a/order-a1 v3 parked behind the head", l.Tenant, l.Event.Stream, l.Event.Version, l.Head, l.Attempts, l.Status)
	}

	// Later events: A's parked stream parks behind, B's is published.
	if err := seed(ctx, admin, len(evs), []genEvent{noteEvent("t-a", "order-a1", 4, 200), noteEvent("t-b", "order-b", 5, 200)}); err != nil {
		t.Fatal(err)
	}
	want += ", t-b/order-b v5"
	waitFor(t, 10*time.Second, "B's fifth event in JetStream", func() bool { return renderMessages(jsMessages(t, url, topic)) == want })
	head = lastPosition(ctx, t, admin)
	waitFor(t, 10*time.Second, "the relay's checkpoint at the log's last event", func() bool { return checkpoint().Position == head })
	if letters := relayLetters(ctx, t, d, r.Name()); len(letters) != 3 || letters[2].Event.Version != 4 || letters[2].Head {
		t.Errorf("relay dead letters %+v, want A's fourth event parked behind the head", letters)
	}
	if cp := checkpoint(); cp.Status != projections.StateRunning || cp.ParkedStreams != 1 || cp.ParkedLetters != 3 {
		t.Errorf("relay checkpoint %+v: want running, 1 parked stream and 3 parked letters", cp)
	}
}

// panicky panics when asked to publish the event eventID, as a broken
// transport might.
type panicky struct {
	message.Publisher
	eventID string
	panics  atomic.Int32
}

func (p *panicky) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		if m.Metadata.Get(MetaEventID) == p.eventID {
			p.panics.Add(1)
			panic("transport bug")
		}
	}
	return p.Publisher.Publish(topic, msgs...)
}

// TestRelayRecoversPublisherPanic: a panic in the publish path is
// recovered and counted as a failure of the event being published. The
// batch is retried PanicAttempts times; then the event's stream is parked
// (the panic's value in the letter) and every other event is published.
func TestRelayRecoversPublisherPanic(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 2*time.Minute)
	url := natsURL(t)
	topic := newTopic(t, url)
	d := testdb.New(t, orderview.Migrations)
	admin := adminConn(ctx, t, d.AdminURL)
	evs := []genEvent{
		noteEvent("t-b", "order-b", 1, 100),
		noteEvent("t-a", "order-a", 1, 100),
		noteEvent("t-b", "order-b", 2, 100),
		noteEvent("t-a", "order-a", 2, 100),
	}
	if err := seed(ctx, admin, 0, evs); err != nil {
		t.Fatal(err)
	}
	pub := natsPublisher(t, url)
	bad := &panicky{Publisher: pub, eventID: eventID(1)}
	r := startRelay(ctx, t, d, Config{Topic: topic, Publisher: bad, PanicAttempts: 2, PollInterval: 20 * time.Millisecond,
		MinErrorBackoff: 20 * time.Millisecond, MaxErrorBackoff: 50 * time.Millisecond, Logger: quietLogger()})
	want := "t-b/order-b v1, t-b/order-b v2"
	waitFor(t, 20*time.Second, "B's events in JetStream", func() bool { return renderMessages(jsMessages(t, url, topic)) == want })
	head := lastPosition(ctx, t, admin)
	waitFor(t, 10*time.Second, "the relay's checkpoint at the log's last event", func() bool { return r.Status().Checkpoint == head })
	letters := relayLetters(ctx, t, d, r.Name())
	if len(letters) != 2 || letters[0].Event.ID != eventID(1) || letters[0].Attempts != 2 || !strings.Contains(letters[0].Error, "transport bug") ||
		letters[1].Event.ID != eventID(3) || letters[1].Head {
		t.Errorf("relay dead letters %+v: want A's first event (2 attempts, the panic's value) and A's second behind it", letters)
	}
	if st := r.Status(); st.State != projections.StateRunning || st.Parked != 2 {
		t.Errorf("relay status %+v: want running with 2 events parked", st)
	}
	if n := bad.panics.Load(); n < 2 {
		t.Errorf("the publisher panicked %d times, want at least 2 attempts", n)
	}
}

// panickyMany panics on every message of a set of events, as a broken
// transport might, after waiting delay (a slow broker), and counts its
// calls.
type panickyMany struct {
	message.Publisher
	eventIDs map[string]bool
	delay    time.Duration
	calls    atomic.Int32
}

func (p *panickyMany) Publish(topic string, msgs ...*message.Message) error {
	p.calls.Add(1)
	time.Sleep(p.delay)
	for _, m := range msgs {
		if p.eventIDs[m.Metadata.Get(MetaEventID)] {
			panic("transport bug")
		}
	}
	return p.Publisher.Publish(topic, msgs...)
}

// TestRelayParksSeveralPanickingStreamsOfOneBatch (found by the HOSTILE
// chaos scenario): a tenant has three streams whose publishing panics, all
// in one batch. Each round of the batch counts one more attempt of the
// first poison event not yet at PanicAttempts; one at its limit is parked,
// and the round goes on to the next. The count of an event a round stopped
// at must survive the round: it used to be forgotten when the round was
// rolled back, so the first event started over at every such round, the
// second only counted when the first was at its limit again, and so on:
// PanicAttempts^3 = 27 rounds with backoff (minutes for everyone, with the
// default backoff up to 30 s), instead of PanicAttempts + 2 per further
// stream = 7, six of which fail.
func TestRelayParksSeveralPanickingStreamsOfOneBatch(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 2*time.Minute)
	url := natsURL(t)
	topic := newTopic(t, url)
	d := testdb.New(t, orderview.Migrations)
	admin := adminConn(ctx, t, d.AdminURL)
	evs := []genEvent{
		noteEvent("t-a", "order-a1", 1, 100), // eventID(0): panics
		noteEvent("t-b", "order-b", 1, 100),
		noteEvent("t-a", "order-a2", 1, 100), // eventID(2): panics
		noteEvent("t-b", "order-b", 2, 100),
		noteEvent("t-a", "order-a3", 1, 100), // eventID(4): panics
		noteEvent("t-b", "order-b", 3, 100),
	}
	if err := seed(ctx, admin, 0, evs); err != nil {
		t.Fatal(err)
	}
	pub := natsPublisher(t, url)
	const attempts, poison = 3, 3
	bad := &panickyMany{Publisher: pub, eventIDs: map[string]bool{eventID(0): true, eventID(2): true, eventID(4): true}}
	r := startRelay(ctx, t, d, Config{Topic: topic, Publisher: bad, PanicAttempts: attempts, PollInterval: 20 * time.Millisecond,
		MinErrorBackoff: 10 * time.Millisecond, MaxErrorBackoff: 20 * time.Millisecond, Logger: quietLogger()})
	head := lastPosition(ctx, t, admin)
	waitFor(t, 60*time.Second, "the relay's checkpoint at the log's last event", func() bool { return r.Status().Checkpoint == head })
	if got, want := renderMessages(jsMessages(t, url, topic)), "t-b/order-b v1, t-b/order-b v2, t-b/order-b v3"; got != want {
		t.Errorf("JetStream holds %s, want %s", got, want)
	}
	letters := relayLetters(ctx, t, d, r.Name())
	if len(letters) != poison {
		t.Errorf("%d relay dead letters, want the %d poison events", len(letters), poison)
	}
	if got, most := int(r.Status().Failed), attempts+2*(poison-1)-1; got > most {
		t.Errorf("%d rounds failed before the %d poison streams were parked, want at most %d (PanicAttempts %d + 2 per further stream, but the last round)",
			got, poison, most, attempts)
	}
}

// TestRelayPoisonBehindSlowBrokerMakesProgress (found by the HOSTILE chaos
// scenario): a broker that takes 40 ms per call, a batch of 240 events
// with two panicking ones in the middle, and 2 s for a round. Finding a
// poison event by publishing one message at a time took 240 calls (9.6 s):
// every round ran out of time and was rolled back, so no event after the
// checkpoint was ever published, for any tenant. Splitting the batch in
// halves finds each in about 2 log2(240) calls, and a round that stops at a
// poison event commits the events before it: every other event is
// published, both poison streams are parked.
func TestRelayPoisonBehindSlowBrokerMakesProgress(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 2*time.Minute)
	url := natsURL(t)
	topic := newTopic(t, url)
	d := testdb.New(t, orderview.Migrations)
	admin := adminConn(ctx, t, d.AdminURL)
	const n = 240
	var evs []genEvent
	for i := range n {
		tenant, stream := "t-b", fmt.Sprintf("order-b%d", i%7)
		if i == 90 || i == 150 {
			tenant, stream = "t-a", fmt.Sprintf("order-a%d", i)
		}
		evs = append(evs, noteEvent(tenant, stream, int64(i/7+1), 100))
	}
	if err := seed(ctx, admin, 0, evs); err != nil {
		t.Fatal(err)
	}
	pub := natsPublisher(t, url)
	bad := &panickyMany{Publisher: pub, eventIDs: map[string]bool{eventID(90): true, eventID(150): true}, delay: 40 * time.Millisecond}
	r := startRelay(ctx, t, d, Config{Topic: topic, Publisher: bad, BatchSize: n, PanicAttempts: 2, FinishTimeout: 2 * time.Second,
		PollInterval: 20 * time.Millisecond, MinErrorBackoff: 10 * time.Millisecond, MaxErrorBackoff: 20 * time.Millisecond, Logger: quietLogger()})
	head := lastPosition(ctx, t, admin)
	waitFor(t, 60*time.Second, "the relay's checkpoint at the log's last event", func() bool { return r.Status().Checkpoint == head })
	if got := len(jsMessages(t, url, topic)); got != n-2 {
		t.Errorf("JetStream holds %d messages, want the %d events that are not poison", got, n-2)
	}
	letters := relayLetters(ctx, t, d, r.Name())
	if len(letters) != 2 || letters[0].Event.ID != eventID(90) || letters[1].Event.ID != eventID(150) {
		t.Errorf("relay dead letters %+v: want the two poison events", letters)
	}
	if calls := bad.calls.Load(); calls > 80 {
		t.Errorf("the publisher was called %d times, want at most 80 (halving, not one message at a time)", calls)
	}
}

// TestRelayBrokerOutageParksNothing: while the broker is down every
// publication fails, for every event alike. That is the circumstances'
// failure, not the events': the relay retries the same batch with backoff,
// its checkpoint row shows the error, nothing is parked, and once the
// broker is back every event is published in log order.
func TestRelayBrokerOutageParksNothing(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 2*time.Minute)
	d := testdb.New(t, orderview.Migrations)
	admin := adminConn(ctx, t, d.AdminURL)
	dir := t.TempDir()
	start := func(port int) *server.Server {
		t.Helper()
		ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true})
		if err != nil {
			t.Fatal(err)
		}
		go ns.Start()
		if !ns.ReadyForConnections(10 * time.Second) {
			t.Fatal("embedded nats-server not ready")
		}
		return ns
	}
	ns := start(-1)
	url := ns.ClientURL()
	port := ns.Addr().(*net.TCPAddr).Port
	t.Cleanup(func() { ns.Shutdown() })
	topic := "strata_outage"
	pub, err := NewNATSPublisher(NATSConfig{URL: url, PublishTimeout: 300 * time.Millisecond, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	r := startRelay(ctx, t, d, Config{Topic: topic, Publisher: pub, PollInterval: 20 * time.Millisecond,
		MinErrorBackoff: 20 * time.Millisecond, MaxErrorBackoff: 100 * time.Millisecond, Logger: quietLogger()})
	if err := seed(ctx, admin, 0, []genEvent{noteEvent("t-a", "order-a", 1, 100), noteEvent("t-b", "order-b", 1, 100)}); err != nil {
		t.Fatal(err)
	}
	want := "t-a/order-a v1, t-b/order-b v1"
	waitFor(t, 20*time.Second, "the first events in JetStream", func() bool { return renderMessages(jsMessages(t, url, topic)) == want })
	before := lastPosition(ctx, t, admin)
	waitFor(t, 10*time.Second, "the relay's checkpoint past the first events", func() bool { return r.Status().Checkpoint == before })

	ns.Shutdown()
	ns.WaitForShutdown()
	later := []genEvent{noteEvent("t-a", "order-a", 2, 100), noteEvent("t-b", "order-b", 2, 100), noteEvent("t-c", "order-c", 1, 100)}
	if err := seed(ctx, admin, 2, later); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the relay to fail on the broker", func() bool { return r.Status().State == projections.StateError })
	first := r.Status().ErrorAt
	waitFor(t, 20*time.Second, "the relay to retry", func() bool { return r.Status().ErrorAt.After(first) })
	cps, err := projections.ReadCheckpoints(ctx, d.Projector, r.Name())
	if err != nil {
		t.Fatal(err)
	}
	if cp := cps[r.Name()]; cp.Status != projections.StateError || cp.LastError == "" || cp.Position != before || cp.ParkedLetters != 0 {
		t.Errorf("relay checkpoint during the outage %+v: want the error recorded, the position unchanged, nothing parked", cp)
	}
	if letters := relayLetters(ctx, t, d, r.Name()); len(letters) != 0 {
		t.Errorf("dead letters during a broker outage: %+v, want none", letters)
	}

	ns = start(port)
	t.Cleanup(func() { ns.Shutdown() })
	want += ", t-a/order-a v2, t-b/order-b v2, t-c/order-c v1"
	waitFor(t, 30*time.Second, "every event in JetStream after the outage", func() bool { return renderMessages(jsMessages(t, url, topic)) == want })
	head := lastPosition(ctx, t, admin)
	waitFor(t, 10*time.Second, "the relay running at the log's last event", func() bool {
		st := r.Status()
		return st.Checkpoint == head && st.State == projections.StateRunning
	})
	if letters := relayLetters(ctx, t, d, r.Name()); len(letters) != 0 || r.Status().Parked != 0 {
		t.Errorf("dead letters after a broker outage: %+v, want none", letters)
	}
}

// divByZero is SQLTxPublisher, but publishing the event eventID fails in
// the batch's own transaction with a real data exception (22012), as a
// value PostgreSQL refuses would.
func divByZero(eventID string) func(tx pgx.Tx) (message.Publisher, error) {
	inner := SQLTxPublisher(quietLogger())
	return func(tx pgx.Tx) (message.Publisher, error) {
		p, err := inner(tx)
		if err != nil {
			return nil, err
		}
		return refusing{Publisher: p, tx: tx, eventID: eventID}, nil
	}
}

type refusing struct {
	message.Publisher
	tx      pgx.Tx
	eventID string
}

func (p refusing) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		if m.Metadata.Get(MetaEventID) == p.eventID {
			_, err := p.tx.Exec(m.Context(), `SELECT 1/0`)
			return err
		}
	}
	return p.Publisher.Publish(topic, msgs...)
}

// TestRelaySQLParksRefusedEvent: on watermill-sql a message is written in
// the batch's transaction. One that PostgreSQL refuses (a data exception)
// aborts only its savepoint: its stream is parked, the other events are
// inserted exactly once, and the batch's transaction commits with the
// checkpoint.
func TestRelaySQLParksRefusedEvent(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 2*time.Minute)
	d := testdb.New(t, orderview.Migrations)
	admin := adminConn(ctx, t, d.AdminURL)
	evs := []genEvent{
		noteEvent("t-b", "order-b", 1, 100),
		noteEvent("t-a", "order-a", 1, 100),
		noteEvent("t-b", "order-b", 2, 100),
		noteEvent("t-a", "order-a", 2, 100),
		noteEvent("t-a", "order-x", 1, 100),
	}
	if err := seed(ctx, admin, 0, evs); err != nil {
		t.Fatal(err)
	}
	r := startRelay(ctx, t, d, Config{TxPublisher: divByZero(eventID(1)), PollInterval: 20 * time.Millisecond,
		MinErrorBackoff: 20 * time.Millisecond, Logger: quietLogger()})
	head := lastPosition(ctx, t, admin)
	waitFor(t, 20*time.Second, "the relay's checkpoint at the log's last event", func() bool { return r.Status().Checkpoint == head })
	if got, want := sqlMessages(ctx, t, admin), "t-b/order-b v1, t-b/order-b v2, t-a/order-x v1"; got != want {
		t.Errorf("watermill_strata_events holds [%s], want [%s]", got, want)
	}
	letters := relayLetters(ctx, t, d, r.Name())
	if len(letters) != 2 || letters[0].Event.ID != eventID(1) || !strings.Contains(letters[0].Error, "22012") || letters[1].Event.ID != eventID(3) {
		t.Errorf("relay dead letters %+v: want A's first event (division by zero) and A's second behind it", letters)
	}
}

// sqlMessages renders watermill_strata_events in subscription order.
func sqlMessages(ctx context.Context, t testing.TB, conn *pgx.Conn) string {
	t.Helper()
	var out *string
	if err := conn.QueryRow(ctx, `SELECT string_agg((metadata->>'tenant') || '/' || (metadata->>'stream') || ' v' || (metadata->>'version'), ', ' ORDER BY transaction_id, "offset")
FROM strata.watermill_strata_events`).Scan(&out); err != nil {
		t.Fatal(err)
	}
	if out == nil {
		return ""
	}
	return *out
}

// TestRelayDeadLettersThroughReplay: the relay's dead letters are the
// operator's like any other (what `strata replay dlq` and
// /v1/admin/dead-letters call), over NATS JetStream and watermill-sql.
// With a size limit the relay parks two streams (a head and an event
// behind it each). They are listed under the relay's name; a retry while
// the limit still holds counts one more attempt and leaves the stream
// parked; one head is discarded with a reason, which makes the event
// behind it the head; then, with the limit raised, a retry of every
// parked stream re-publishes the letters in version order and unparks
// both, while the relay runs (it waits on its pause lock meanwhile). The
// relay then publishes those streams' next events itself, after the
// retried ones, and a second retry finds nothing to do.
func TestRelayDeadLettersThroughReplay(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"nats", "sql"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t, 2*time.Minute)
			d := testdb.New(t, orderview.Migrations)
			admin := adminConn(ctx, t, d.AdminURL)
			var tr transport
			for _, x := range transports(t, d) {
				if x.name == name {
					tr = x
				}
			}
			const limit = 1000
			evs := []genEvent{
				noteEvent("t-a", "order-a", 1, 100),
				noteEvent("t-a", "order-a", 2, 3000), // head of A
				noteEvent("t-b", "order-b", 1, 100),
				noteEvent("t-a", "order-a", 3, 100), // behind A's head
				noteEvent("t-c", "order-c", 1, 100),
				noteEvent("t-c", "order-c", 2, 3000), // head of C, discarded
				noteEvent("t-c", "order-c", 3, 100),  // behind C's head, then its head
			}
			if err := seed(ctx, admin, 0, evs); err != nil {
				t.Fatal(err)
			}
			cfg := Config{Topic: tr.topic, MaxMessageBytes: limit, PollInterval: 20 * time.Millisecond, MinErrorBackoff: 20 * time.Millisecond, Logger: quietLogger()}
			tr.publisher(t, &cfg)
			r := startRelay(ctx, t, d, cfg)
			held := func() string {
				if name == "sql" {
					return sqlMessages(ctx, t, admin)
				}
				return renderMessages(jsMessages(t, natsURL(t), tr.topic))
			}
			want := "t-a/order-a v1, t-b/order-b v1, t-c/order-c v1"
			waitFor(t, 20*time.Second, "the publishable events", func() bool { return held() == want })
			head := lastPosition(ctx, t, admin)
			waitFor(t, 10*time.Second, "the relay's checkpoint at the log's last event", func() bool { return r.Status().Checkpoint == head })

			service := func(max int64) *replay.Service {
				rc := RepublishConfig{Topic: tr.topic, MaxMessageBytes: max, SQL: name == "sql"}
				if name == "nats" {
					rc.Publisher = func() (message.Publisher, error) {
						return NewNATSPublisher(NATSConfig{URL: natsURL(t), Logger: quietLogger()})
					}
				}
				rp, err := NewRepublisher(rc)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = rp.Close() })
				svc, err := replay.New(replay.Config{Registry: order.Registry, Projections: orderview.All(), Pool: d.Projector, App: d.App,
					Log: postgres.New(d.App, d.Projector), Relays: []projections.Projection{rp}, Logger: quietLogger()})
				if err != nil {
					t.Fatal(err)
				}
				return svc
			}
			strict, raised := service(limit), service(0)

			letters, err := strict.DeadLetters(ctx, replay.ListOptions{Projections: []string{r.Name()}})
			if err != nil {
				t.Fatal(err)
			}
			if len(letters) != 4 || !letters[0].Head || letters[0].Event.ID != eventID(1) || letters[1].Event.ID != eventID(3) ||
				!letters[2].Head || letters[2].Event.ID != eventID(5) || letters[3].Event.ID != eventID(6) {
				t.Fatalf("relay letters %+v: want A v2 (head), A v3, C v2 (head), C v3", letters)
			}
			headA, headC := letters[0], letters[2]

			// Still too large: the head fails again, nothing is published.
			rep, err := strict.Retry(ctx, replay.RetrySpec{ID: headA.ID, Actor: "test"})
			if err != nil {
				t.Fatal(err)
			}
			if f := rep.Failed(); len(f) != 1 || f[0].Failed == nil || f[0].Failed.ID != headA.ID || f[0].Failed.Attempts != 2 || !strings.Contains(f[0].Failed.Error, "exceeds") {
				t.Errorf("retry under the limit: %+v (%s), want A's head failed again (2 attempts, the size in the error)", rep, failures(rep))
			}

			// Discard C's head: C v3 becomes the head.
			if _, err := strict.Discard(ctx, "", headC.ID, "test", "too large for the subscribers"); err != nil {
				t.Fatal(err)
			}

			// The relay goes on meanwhile; the retry waits for its batch and
			// holds it off while it re-publishes.
			rep, err = raised.Retry(ctx, replay.RetrySpec{All: true, Projections: []string{r.Name()}, Actor: "test"})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Streams) != 2 || len(rep.Failed()) != 0 || rep.Applied() != 3 {
				t.Errorf("retry with the limit raised: %+v (%s), want A and C unparked, 3 letters re-published", rep, failures(rep))
			}
			if err := seed(ctx, admin, len(evs), []genEvent{noteEvent("t-a", "order-a", 4, 100), noteEvent("t-c", "order-c", 4, 100)}); err != nil {
				t.Fatal(err)
			}
			want += ", t-a/order-a v2, t-a/order-a v3, t-c/order-c v3, t-a/order-a v4, t-c/order-c v4"
			waitFor(t, 20*time.Second, "the retried letters and the streams' next events", func() bool { return held() == want })
			if _, err := raised.Retry(ctx, replay.RetrySpec{All: true, Projections: []string{r.Name()}, Actor: "test"}); !errors.Is(err, replay.ErrNothingToDo) {
				t.Errorf("second retry: %v, want ErrNothingToDo", err)
			}
			head = lastPosition(ctx, t, admin)
			waitFor(t, 10*time.Second, "the relay's checkpoint at the log's last event", func() bool { return r.Status().Checkpoint == head })
			cps, err := projections.ReadCheckpoints(ctx, d.Projector, r.Name())
			if err != nil {
				t.Fatal(err)
			}
			if cp := cps[r.Name()]; cp.Status != projections.StateRunning || cp.ParkedStreams != 0 || cp.ParkedLetters != 0 {
				t.Errorf("relay checkpoint %+v: want running, nothing parked", cp)
			}
			all := relayLetters(ctx, t, d, r.Name())
			states := map[string]projections.LetterStatus{}
			for _, l := range all {
				states[fmt.Sprintf("%s v%d", l.Event.Stream, l.Event.Version)] = l.Status
			}
			if len(all) != 4 || states["order-a v2"] != projections.LetterRetried || states["order-a v3"] != projections.LetterRetried ||
				states["order-c v2"] != projections.LetterDiscarded || states["order-c v3"] != projections.LetterRetried {
				t.Errorf("relay letters afterwards %v: want A's two and C v3 retried, C v2 discarded", states)
			}
		})
	}
}

// failures renders the letters a retry stopped at.
func failures(rep replay.RetryReport) string {
	var out []string
	for _, s := range rep.Failed() {
		if s.Failed != nil {
			out = append(out, fmt.Sprintf("%s/%s v%d, %d attempts: %s", s.Tenant, s.Stream, s.Failed.Event.Version, s.Failed.Attempts, s.Failed.Error))
		}
	}
	return strings.Join(out, "; ")
}

// gatedPublisher is the relay's NATSPublisher, but once armed its next
// Publish waits for release: the relay's batch transaction is then open,
// holding the pause lock, after it decided what to publish and what to
// park.
type gatedPublisher struct {
	*NATSPublisher
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (g *gatedPublisher) Publish(topic string, msgs ...*message.Message) error {
	if g.armed.CompareAndSwap(true, false) {
		close(g.entered)
		<-g.release
	}
	return g.NATSPublisher.Publish(topic, msgs...)
}

// TestRelayRetryWaitsForBatchInFlight forces the race between the relay
// and an operator's retry of its letters: the relay's batch has found
// A's stream parked and is about to park A's new event behind the head
// (its transaction open) when the retry starts. The retry must wait for
// that batch (the relay's pause lock), then re-publish A's letters in
// order including the one the batch parked, and unpark the stream;
// otherwise the batch would park its event behind a head the retry has
// already published and unparked, and the event would never be published.
func TestRelayRetryWaitsForBatchInFlight(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 2*time.Minute)
	url := natsURL(t)
	topic := newTopic(t, url)
	d := testdb.New(t, orderview.Migrations)
	admin := adminConn(ctx, t, d.AdminURL)
	if err := seed(ctx, admin, 0, []genEvent{noteEvent("t-a", "order-a", 1, 100), noteEvent("t-a", "order-a", 2, 3000), noteEvent("t-b", "order-b", 1, 100)}); err != nil {
		t.Fatal(err)
	}
	pub := natsPublisher(t, url)
	gate := &gatedPublisher{NATSPublisher: pub, entered: make(chan struct{}), release: make(chan struct{})}
	var released sync.Once
	open := func() { released.Do(func() { close(gate.release) }) }
	r := startRelay(ctx, t, d, Config{Topic: topic, Publisher: gate, MaxMessageBytes: 1000, PollInterval: 20 * time.Millisecond,
		MinErrorBackoff: 20 * time.Millisecond, Logger: quietLogger()})
	t.Cleanup(open) // runs before the relay is stopped (cleanups run last in, first out)
	head := lastPosition(ctx, t, admin)
	waitFor(t, 20*time.Second, "the relay's checkpoint at the log's last event", func() bool { return r.Status().Checkpoint == head })

	gate.armed.Store(true)
	if err := seed(ctx, admin, 3, []genEvent{noteEvent("t-a", "order-a", 3, 100), noteEvent("t-b", "order-b", 2, 100)}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gate.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the relay never published the second batch")
	}

	rp, err := NewRepublisher(RepublishConfig{Topic: topic, Publisher: func() (message.Publisher, error) {
		return NewNATSPublisher(NATSConfig{URL: url, Logger: quietLogger()})
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rp.Close() })
	svc, err := replay.New(replay.Config{Registry: order.Registry, Projections: orderview.All(), Pool: d.Projector, App: d.App,
		Log: postgres.New(d.App, d.Projector), Relays: []projections.Projection{rp}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		rep replay.RetryReport
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := svc.Retry(ctx, replay.RetrySpec{Stream: "order-a", Tenant: "t-a", Actor: "test"})
		done <- result{rep, err}
	}()
	// The retry waits on the relay's pause lock, held by the batch.
	waitFor(t, 20*time.Second, "the retry waiting for the relay's batch", func() bool {
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event = 'advisory' AND query LIKE '%pg_advisory_lock%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	})
	select {
	case res := <-done:
		t.Fatalf("the retry ended while the relay's batch was in flight: %+v, %v", res.rep, res.err)
	default:
	}
	open()
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	if len(res.rep.Streams) != 1 || !res.rep.Streams[0].Unparked || res.rep.Applied() != 2 {
		t.Errorf("retry: %+v (%s), want A's two letters (the head and the event the batch parked) re-published and A unparked", res.rep, failures(res.rep))
	}
	want := "t-a/order-a v1, t-b/order-b v1, t-b/order-b v2, t-a/order-a v2, t-a/order-a v3"
	waitFor(t, 20*time.Second, "every event in JetStream", func() bool { return renderMessages(jsMessages(t, url, topic)) == want })
	cps, err := projections.ReadCheckpoints(ctx, d.Projector, r.Name())
	if err != nil {
		t.Fatal(err)
	}
	if cp := cps[r.Name()]; cp.ParkedStreams != 0 || cp.ParkedLetters != 0 {
		t.Errorf("relay checkpoint %+v: want nothing parked", cp)
	}
}
