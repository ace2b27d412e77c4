package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/orderview"
	"github.com/strata-es/strata/internal/pgtest"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/projections/relay"
)

// rejecting is a projection whose Apply fails for some events.
type rejecting struct {
	projections.Projection
	reject func(projections.Event) bool
}

func (r rejecting) Apply(b *pgx.Batch, ev projections.Event) error {
	if r.reject(ev) {
		return errors.New("boom: the handler rejects this event")
	}
	return r.Projection.Apply(b, ev)
}

// TestReplayDLQBrokerFed drives a broker-fed consumer's dead letters
// through `strata replay`: a relay publishes the log to watermill-sql, a
// relay.Consumer applies order_details under the consumer name
// billing_details with a handler that rejects two events, and parks them
// (and the event behind one of them) in the shared dead-letter store. The
// CLI lists them (dlq list --json, status --json), retries stream A with
// the fixed handler (its own order_details, found through the consumer's
// checkpoint row) while the consumer runs, refuses a second retry (exit 3),
// and discards B's letter with its reason.
func TestReplayDLQBrokerFed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := pgtest.NewDatabase(t)
	vars := map[string]string{"DATABASE_URL": url, "STRATA_DATA_DIR": t.TempDir(), "STRATA_LOG_LEVEL": "error"}
	replayCmd := func(args ...string) (int, string, string) {
		t.Helper()
		var out, errb bytes.Buffer
		code := run(ctx, append([]string{"replay"}, args...), testEnv(vars), &out, &errb)
		if testing.Verbose() {
			t.Logf("$ strata replay %s  => exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errb.String())
		}
		return code, out.String(), errb.String()
	}
	if code := run(ctx, []string{"migrate", "up"}, testEnv(vars), &bytes.Buffer{}, &bytes.Buffer{}); code != exitOK {
		t.Fatal("migrate up failed")
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	// Order a: created, a line (rejected), placed. Order b: created (rejected).
	if _, err := conn.Exec(ctx, `INSERT INTO strata.events (tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata)
VALUES ('acme', 'order-a', 1, gen_random_uuid(), 'order.created', 1, '{"order_id":"a","customer_id":"c-1","currency":"EUR","at":"2026-01-01T00:00:00Z"}', '{}'),
       ('acme', 'order-a', 2, gen_random_uuid(), 'order.line_added', 2,
        '{"order_id":"a","product_id":"p-1","quantity":2,"unit_price":{"amount":100,"currency":"EUR"},"at":"2026-01-01T00:01:00Z"}', '{}'),
       ('acme', 'order-a', 3, gen_random_uuid(), 'order.placed', 1, '{"order_id":"a","total":{"amount":200,"currency":"EUR"},"at":"2026-01-01T00:02:00Z"}', '{}'),
       ('acme', 'order-b', 1, gen_random_uuid(), 'order.created', 1, '{"order_id":"b","customer_id":"c-2","currency":"EUR","at":"2026-01-01T00:03:00Z"}', '{}')`); err != nil {
		t.Fatal(err)
	}
	proj, err := db.OpenPool(ctx, url, db.PoolConfig{Role: db.RoleProjector, MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer proj.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	r, err := relay.New(postgres.New(nil, proj), proj, relay.Config{TxPublisher: relay.SQLTxPublisher(quiet), PollInterval: 20 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan struct{})
	go func() { defer close(relayDone); _ = r.Run(rctx) }()
	defer func() { stopRelay(); <-relayDone }()

	const consumer = "billing_details"
	p := rejecting{Projection: orderview.NewOrderDetails(orderview.OrderDetailsTables{}), reject: func(ev projections.Event) bool {
		return ev.Stream == "order-a" && ev.Version == 2 || ev.Stream == "order-b"
	}}
	c, err := relay.NewConsumer(proj, relay.ConsumerConfig{Registry: order.Registry, MaxRetries: 1, InitialInterval: 5 * time.Millisecond, MaxInterval: 10 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := relay.NewSQLSubscriber(proj, consumer, relay.SQLConfig{PollInterval: 20 * time.Millisecond, ResendInterval: 50 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Add(consumer, p, sub); err != nil {
		t.Fatal(err)
	}
	cctx, stopConsumer := context.WithCancel(ctx)
	consumerDone := make(chan error, 1)
	go func() { consumerDone <- c.Run(cctx) }()
	defer func() { stopConsumer(); <-consumerDone }()
	select {
	case <-c.Running(): // registered: the CLI knows the name
	case err := <-consumerDone:
		t.Fatalf("consumer: %v", err)
	}

	type letter struct {
		ID         int64  `json:"id"`
		Projection string `json:"projection"`
		Stream     string `json:"stream"`
		Version    int64  `json:"version"`
		Attempts   int    `json:"attempts"`
		Error      string `json:"error"`
		Head       bool   `json:"head"`
		Status     string `json:"status"`
		Reason     string `json:"reason"`
	}
	var list struct {
		Letters []letter `json:"dead_letters"`
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, out, stderr := replayCmd("dlq", "list", "--projection", consumer, "--json")
		if code != exitOK {
			t.Fatalf("dlq list --json: %d %s", code, stderr)
		}
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatal(err)
		}
		if len(list.Letters) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the consumer's letters never appeared: %s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	byKey := map[string]letter{}
	for _, l := range list.Letters {
		byKey[l.Stream+"/"+strconv.FormatInt(l.Version, 10)] = l
		if l.Projection != consumer || l.Status != "parked" {
			t.Errorf("letter %+v: want projection %s, parked", l, consumer)
		}
	}
	headA, behindA, headB := byKey["order-a/2"], byKey["order-a/3"], byKey["order-b/1"]
	if !headA.Head || headA.Attempts != 2 || !strings.Contains(headA.Error, "boom") || behindA.Head || behindA.Attempts != 0 || !headB.Head {
		t.Fatalf("letters: %+v", list.Letters)
	}

	code, out, _ := replayCmd("status", "--json")
	var st struct {
		Consumers []struct {
			Name          string   `json:"name"`
			Projection    string   `json:"projection"`
			Tables        []string `json:"tables"`
			ParkedStreams int64    `json:"parked_streams"`
			DeadLetters   int64    `json:"dead_letters"`
			Retryable     bool     `json:"retryable"`
		} `json:"consumers"`
		Others []struct {
			Name string `json:"name"`
		} `json:"other_checkpoints"`
	}
	if err := json.Unmarshal([]byte(out), &st); code != exitOK || err != nil || len(st.Consumers) != 1 || st.Consumers[0].Name != consumer ||
		st.Consumers[0].Projection != "order_details" || st.Consumers[0].ParkedStreams != 2 || st.Consumers[0].DeadLetters != 3 || !st.Consumers[0].Retryable {
		t.Fatalf("status --json: %d %v %s", code, err, out)
	}
	for _, o := range st.Others {
		if o.Name == consumer {
			t.Errorf("the consumer is listed among other readers too: %s", out)
		}
	}
	if code, out, _ := replayCmd("status"); code != exitOK || !strings.Contains(out, "broker-fed consumers") || !strings.Contains(out, consumer) {
		t.Errorf("status: %d %s", code, out)
	}

	// Retry A (its handler is fixed: the CLI applies its own order_details)
	// while the consumer runs: both letters apply in order, A is unparked.
	id := strconv.FormatInt(headA.ID, 10)
	code, out, stderr := replayCmd("dlq", "retry", id)
	if code != exitOK || !strings.Contains(out, "unparked") {
		t.Fatalf("dlq retry %s: %d\n%s%s", id, code, out, stderr)
	}
	var status string
	var version, total int64
	if err := conn.QueryRow(ctx, `SELECT status, version, total_amount FROM strata.order_details WHERE tenant_id = 'acme' AND order_id = 'a'`).Scan(&status, &version, &total); err != nil ||
		status != "placed" || version != 3 || total != 200 {
		t.Errorf("order a after the retry: %s v%d total %d (%v), want placed v3 200", status, version, total, err)
	}
	if code, _, stderr := replayCmd("dlq", "retry", id); code != exitNothing {
		t.Errorf("second retry: exit %d, want %d (%s)", code, exitNothing, stderr)
	}
	if code, _, stderr := replayCmd("dlq", "retry", "--stream", "order-a", "--projection", consumer); code != exitNothing {
		t.Errorf("retry --stream order-a: exit %d, want %d (%s)", code, exitNothing, stderr)
	}

	// Discard B with its reason.
	idB := strconv.FormatInt(headB.ID, 10)
	if code, out, stderr := replayCmd("dlq", "discard", idB, "--reason", "test order, never real"); code != exitOK || !strings.Contains(out, "unparked") {
		t.Fatalf("dlq discard: %d\n%s%s", code, out, stderr)
	}
	if code, _, _ := replayCmd("dlq", "discard", idB, "--reason", "again"); code != exitNothing {
		t.Errorf("second discard exited %d, want %d", code, exitNothing)
	}
	code, out, _ = replayCmd("dlq", "show", idB, "--json")
	var shown letter
	if err := json.Unmarshal([]byte(out), &shown); code != exitOK || err != nil || shown.Status != "discarded" || shown.Reason != "test order, never real" {
		t.Errorf("dlq show %s: %d %v %s", idB, code, err, out)
	}
	code, out, _ = replayCmd("dlq", "list", "--projection", consumer, "--json")
	if err := json.Unmarshal([]byte(out), &list); code != exitOK || err != nil || len(list.Letters) != 0 {
		t.Errorf("parked letters left: %d %v %s", code, err, out)
	}
	var streams, letters int64
	if err := conn.QueryRow(ctx, `SELECT parked_streams, parked_letters FROM strata.projection_checkpoints WHERE projection = $1`, consumer).Scan(&streams, &letters); err != nil ||
		streams != 0 || letters != 0 {
		t.Errorf("the consumer's counters: %d streams, %d letters (%v), want 0", streams, letters, err)
	}
}
