package relay

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/orderview"
	"github.com/strata-es/strata/internal/failpoint"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/projections"
)

// childEnv hands the relay child process its configuration.
const childEnv = "STRATA_TEST_RELAY_CHILD"

type childConfig struct {
	DatabaseURL string `json:"database_url"`
	NATSURL     string `json:"nats_url"` // "" = watermill-sql
	Topic       string `json:"topic"`
	BatchSize   int    `json:"batch_size"`
}

// TestRelayChild is the relay process of the kill tests: it relays until it
// is killed (or, run on its own without its environment, does nothing).
// It logs each batch it published on stderr.
func TestRelayChild(t *testing.T) {
	raw := os.Getenv(childEnv)
	if raw == "" {
		return
	}
	var cfg childConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, 2*time.Minute)
	pool, err := db.OpenPool(ctx, cfg.DatabaseURL, db.PoolConfig{Role: db.RoleProjector, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	rc := Config{Topic: cfg.Topic, BatchSize: cfg.BatchSize, PollInterval: 20 * time.Millisecond, LeaseRetry: 50 * time.Millisecond,
		MinErrorBackoff: 20 * time.Millisecond, Logger: logger}
	if cfg.NATSURL != "" {
		pub, err := NewNATSPublisher(NATSConfig{URL: cfg.NATSURL, Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		defer pub.Close()
		rc.Publisher = pub
	} else {
		rc.TxPublisher = SQLTxPublisher(logger)
	}
	r, err := New(postgres.New(nil, pool), pool, rc)
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Run(ctx)
}

// relayChild is a running relay child process.
type relayChild struct {
	cmd    *exec.Cmd
	stderr *syncWriter
	done   chan error
}

func startRelayChild(ctx context.Context, t *testing.T, cfg childConfig, failpoints string) *relayChild {
	t.Helper()
	raw, _ := json.Marshal(cfg)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestRelayChild$", "-test.count=1", "-test.v=false")
	cmd.Env = append(os.Environ(), childEnv+"="+string(raw), failpoint.EnvVar+"="+failpoints)
	c := &relayChild{cmd: cmd, stderr: &syncWriter{w: &bytes.Buffer{}}, done: make(chan error, 1)}
	cmd.Stderr = c.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.done <- cmd.Wait() }()
	return c
}

// kill sends SIGKILL and waits for the process.
func (c *relayChild) kill(t *testing.T) {
	t.Helper()
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	c.wait(t)
}

// wait waits for the child's end and checks that SIGKILL ended it (sent by
// the test, or by its own failpoint).
func (c *relayChild) wait(t *testing.T) {
	t.Helper()
	select {
	case err := <-c.done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("relay child ended with %v, want SIGKILL\n%s", err, c.log())
		}
	case <-time.After(time.Minute):
		t.Fatalf("relay child did not end\n%s", c.log())
	}
}

func (c *relayChild) log() string { return c.stderr.String() }

// published sums the events of the batches the child logged as published.
func (c *relayChild) published() int {
	n := 0
	sc := bufio.NewScanner(strings.NewReader(c.log()))
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, `msg="published batch"`) {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "events="); ok {
				k, _ := strconv.Atoi(v)
				n += k
			}
		}
	}
	return n
}

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}

// delivery is one message as a subscriber handed it to the consumer: its
// event ID, tenant/stream and version.
type delivery struct {
	id, key string
	version int64
}

// tap records every message a subscriber delivers, redeliveries included.
type tap struct {
	message.Subscriber
	mu   sync.Mutex
	seen []delivery
}

func (s *tap) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	in, err := s.Subscriber.Subscribe(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := make(chan *message.Message)
	go func() {
		defer close(out)
		for m := range in {
			v, _ := strconv.ParseInt(m.Metadata.Get(MetaVersion), 10, 64)
			s.mu.Lock()
			s.seen = append(s.seen, delivery{id: m.Metadata.Get(MetaEventID), key: m.Metadata.Get(MetaTenant) + "/" + m.Metadata.Get(MetaStream), version: v})
			s.mu.Unlock()
			out <- m
		}
	}()
	return out, nil
}

func (s *tap) deliveries() []delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]delivery(nil), s.seen...)
}

// checkDeliveries checks that every event was delivered at least once and
// that no stream's version was delivered before all earlier versions of its
// stream; it returns the number of redeliveries.
func checkDeliveries(t *testing.T, name string, evs []genEvent, ds []delivery) int {
	t.Helper()
	seen := map[string]bool{}
	high := map[string]int64{} // highest version delivered so far per stream
	for i, d := range ds {
		if d.version > high[d.key]+1 {
			t.Errorf("%s: delivery %d: %s v%d before v%d", name, i, d.key, d.version, high[d.key]+1)
			return 0
		}
		high[d.key] = max(high[d.key], d.version)
		seen[d.id] = true
	}
	for i := range evs {
		if !seen[eventID(i)] {
			t.Errorf("%s: event %d (%s/%s v%d) never delivered", name, i, evs[i].Tenant, evs[i].Stream, evs[i].Version)
			return 0
		}
	}
	return len(ds) - len(seen)
}

// TestRelayNATSUnderKill is issue 5's "Done when" for the relay: 10,000
// events of 4 tenants are appended while a relay process publishes them to
// NATS JetStream and is killed twice with SIGKILL: once by its failpoint
// between JetStream's acknowledgement of a batch and the checkpoint's
// advance (so that batch is published again), once at a random moment.
// Two broker-fed projections consume meanwhile. Every event must reach the
// consumer at least once, every stream in version order, JetStream must
// hold each event exactly once (Nats-Msg-Id = MessageID of tenant and
// event ID), and the read
// models fed from the broker must equal the ones fed from the store.
func TestRelayNATSUnderKill(t *testing.T) {
	t.Parallel()
	const total, tenants = 10_000, 4
	ctx := testCtx(t, 3*time.Minute)
	began := time.Now()
	url := natsURL(t)
	topic := newTopic(t, url)
	d := testdb.New(t, orderview.Migrations)
	admin := adminConn(ctx, t, d.AdminURL)
	for _, tb := range [][2]string{{"order_details", "b_order_details"}, {"order_detail_lines", "b_order_detail_lines"},
		{"customer_summaries", "b_customer_summaries"}, {"customer_paid_totals", "b_customer_paid_totals"}, {"customer_orders", "b_customer_orders"}} {
		shadow(ctx, t, admin, tb[0], tb[1])
	}
	fed := []projections.Projection{
		orderview.NewOrderDetails(orderview.OrderDetailsTables{Orders: "b_order_details", Lines: "b_order_detail_lines"}),
		orderview.NewCustomerSummaries(orderview.CustomerSummaryTables{Summaries: "b_customer_summaries", PaidTotals: "b_customer_paid_totals", Orders: "b_customer_orders"}),
	}
	evs := generate(5, tenants, total)

	// The consumer: both projections, each with its own durable consumer.
	cons, err := NewConsumer(d.Projector, ConsumerConfig{Registry: order.Registry, Topic: topic, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	taps := map[string]*tap{}
	for _, p := range fed {
		sub, err := NewNATSSubscriber(NATSConfig{URL: url, AckWait: 10 * time.Second, NakDelay: 100 * time.Millisecond, Logger: quietLogger()}, p.Name())
		if err != nil {
			t.Fatal(err)
		}
		taps[p.Name()] = &tap{Subscriber: sub}
		if err := cons.Add(p.Name(), p, taps[p.Name()]); err != nil {
			t.Fatal(err)
		}
	}
	cctx, stopConsumer := context.WithCancel(ctx)
	consumed := make(chan error, 1)
	go func() { consumed <- cons.Run(cctx) }()
	defer func() {
		stopConsumer()
		if err := <-consumed; err != nil {
			t.Errorf("consumer: %v", err)
		}
	}()

	// The appender: 200 events every 50ms.
	appended := make(chan error, 1)
	go func() {
		for lo := 0; lo < total; lo += 200 {
			if err := seed(ctx, admin, lo, evs[lo:min(lo+200, total)]); err != nil {
				appended <- err
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		appended <- nil
	}()

	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	stored := func() uint64 {
		si, err := js.StreamInfo(topic)
		if err != nil {
			return 0
		}
		return si.State.Msgs
	}

	cfg := childConfig{DatabaseURL: d.AdminURL, NATSURL: url, Topic: topic, BatchSize: 100}
	// Child 1 dies at its 8th batch, between JetStream's ack and the
	// checkpoint.
	c1 := startRelayChild(ctx, t, cfg, FailpointAfterPublish+"=8")
	c1.wait(t)
	afterC1 := stored()
	// Child 2 is killed once JetStream holds 5,000 events.
	c2 := startRelayChild(ctx, t, cfg, "")
	waitFor(t, time.Minute, "5,000 events in JetStream", func() bool { return stored() >= 5000 })
	c2.kill(t)
	afterC2 := stored()
	// Child 3 finishes the job.
	c3 := startRelayChild(ctx, t, cfg, "")
	defer c3.kill(t)
	if err := <-appended; err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "every event in JetStream", func() bool { return stored() >= total })
	relayed := time.Since(began)

	heads := streamHeads(evs)
	for _, p := range fed {
		waitFor(t, 90*time.Second, p.Name()+" to apply every event", func() bool {
			return sameVersions(heads, appliedVersions(ctx, t, admin, p.Name()))
		})
	}
	consumedAt := time.Since(began)
	if n := stored(); n != total {
		t.Errorf("JetStream holds %d messages, want exactly %d (re-publications deduplicated by Nats-Msg-Id)", n, total)
	}
	published := c1.published() + c2.published() + c3.published()
	if published <= total {
		t.Errorf("the relay children published %d events in all; the kill after publishing should have made it re-publish", published)
	}
	for _, p := range fed {
		redelivered := checkDeliveries(t, p.Name(), evs, taps[p.Name()].deliveries())
		t.Logf("%s: %d deliveries, %d redelivered", p.Name(), len(taps[p.Name()].deliveries()), redelivered)
	}

	// The same projections fed from the store, into the live tables.
	store := postgres.New(d.App, d.Projector)
	head := lastPosition(ctx, t, admin)
	for _, p := range []projections.Projection{orderview.NewOrderDetails(orderview.OrderDetailsTables{}), orderview.NewCustomerSummaries(orderview.CustomerSummaryTables{})} {
		r, err := projections.NewRunner(p, store, d.Projector, projections.RunnerConfig{Registry: order.Registry, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.CatchUp(ctx, head); err != nil {
			t.Fatal(err)
		}
	}
	for _, tb := range []string{"order_details", "order_detail_lines", "customer_summaries", "customer_paid_totals", "customer_orders"} {
		want, got := rows(ctx, t, admin, tb), rows(ctx, t, admin, "b_"+tb)
		if want == "" {
			t.Errorf("%s is empty", tb)
		}
		if got != want {
			t.Errorf("%s fed from the broker differs from the store-fed one:\n%s", tb, tableDiff(ctx, t, admin, tb, "b_"+tb))
		}
	}
	var letters int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM strata.dead_letters`).Scan(&letters); err != nil || letters != 0 {
		t.Errorf("dead letters: %d (%v), want none", letters, err)
	}
	t.Logf("%d events, 4 tenants, %d streams; JetStream held %d after kill 1 (failpoint after publish) and %d after kill 2 (SIGKILL); "+
		"children published %d (re-publications included), JetStream stored %d; all relayed after %s, all applied by both consumers after %s",
		total, len(heads), afterC1, afterC2, published, stored(), relayed.Round(time.Millisecond), consumedAt.Round(time.Millisecond))
}
