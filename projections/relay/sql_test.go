package relay

import (
	"context"
	"testing"
	"time"

	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/orderview"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/projections"
)

// TestRelaySQLEndToEnd runs the watermill-sql path: a relay process killed
// by SIGKILL between its batch's writes and COMMIT, then a relay in this
// process stopped midway (its context cancelled) and started again, while
// events are appended; a broker-fed projection consumes from the SQL
// subscriber meanwhile. The topic table must hold every event exactly once
// in log order (the messages commit with the checkpoint), the consumer must
// see every stream in order, and its read model must equal the store-fed
// one.
func TestRelaySQLEndToEnd(t *testing.T) {
	t.Parallel()
	const total = 2000
	ctx := testCtx(t, 2*time.Minute)
	d := testdb.New(t, orderview.Migrations)
	admin := adminConn(ctx, t, d.AdminURL)
	shadow(ctx, t, admin, "order_list", "s_order_list")
	evs := generate(11, 4, total)
	if err := seed(ctx, admin, 0, evs[:total/2]); err != nil {
		t.Fatal(err)
	}

	cons, err := NewConsumer(d.Projector, ConsumerConfig{Registry: order.Registry, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := NewSQLSubscriber(d.Projector, "order_list", SQLConfig{PollInterval: 20 * time.Millisecond, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	tp := &tap{Subscriber: sub}
	if err := cons.Add("order_list", orderview.NewOrderList(orderview.OrderListTables{Orders: "s_order_list"}), tp); err != nil {
		t.Fatal(err)
	}
	stop := runConsumer(ctx, t, cons)

	// A relay process dies before committing its third batch.
	c := startRelayChild(ctx, t, childConfig{DatabaseURL: d.AdminURL, Topic: DefaultTopic, BatchSize: 100}, FailpointBeforeCommit+"=3")
	c.wait(t)
	if n := c.published(); n != 200 {
		t.Errorf("the relay child committed %d events before it was killed, want 200", n)
	}

	// A relay in this process, stopped midway and started again while the
	// second half is appended.
	store := postgres.New(d.App, d.Projector)
	newRelay := func() *Relay {
		r, err := New(store, d.Projector, Config{BatchSize: 100, PollInterval: 20 * time.Millisecond, TxPublisher: SQLTxPublisher(quietLogger()), Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r1 := newRelay()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = r1.Run(rctx) }()
	waitFor(t, 30*time.Second, "the relay to publish 600 events", func() bool { return r1.Status().Published >= 600 })
	cancel()
	<-done
	if err := seed(ctx, admin, total/2, evs[total/2:]); err != nil {
		t.Fatal(err)
	}
	r2 := newRelay()
	rctx, cancel = context.WithCancel(ctx)
	defer cancel()
	go func() { _ = r2.Run(rctx) }()

	heads := streamHeads(evs)
	waitFor(t, 90*time.Second, "order_list to apply every event", func() bool {
		return sameVersions(heads, appliedVersions(ctx, t, admin, "order_list"))
	})
	if err := stop(); err != nil {
		t.Errorf("consumer: %v", err)
	}

	// Exactly once, in log order: the topic's rows ordered as subscribers
	// read them are the log.
	var inOrder, count int
	// A row is its event by tenant and event ID (metadata; the row's uuid is
	// MessageID of the two).
	if err := admin.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE (m.metadata->>'event_id')::uuid = e.event_id AND m.metadata->>'tenant' = e.tenant_id)
FROM (SELECT metadata, row_number() OVER (ORDER BY transaction_id, "offset") AS n FROM strata.watermill_strata_events) m
JOIN (SELECT tenant_id, event_id, row_number() OVER (ORDER BY tx_id, position) AS n FROM strata.events) e USING (n)`).Scan(&count, &inOrder); err != nil {
		t.Fatal(err)
	}
	var rowsTotal int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM strata.watermill_strata_events`).Scan(&rowsTotal); err != nil {
		t.Fatal(err)
	}
	if rowsTotal != total || inOrder != total {
		t.Errorf("topic table: %d rows, %d in log order; want %d and %d", rowsTotal, inOrder, total, total)
	}
	redelivered := checkDeliveries(t, "order_list", evs, tp.deliveries())

	r, err := projections.NewRunner(orderview.NewOrderList(orderview.OrderListTables{}), store, d.Projector, projections.RunnerConfig{Registry: order.Registry, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	until := lastPosition(ctx, t, admin)
	if err := r.CatchUp(ctx, until); err != nil {
		t.Fatal(err)
	}
	if want, got := rows(ctx, t, admin, "order_list"), rows(ctx, t, admin, "s_order_list"); got != want || want == "" {
		var txs string
		_ = admin.QueryRow(ctx, `SELECT string_agg(format('%s: %s..%s (%s)', tx_id, lo, hi, n), ', ') FROM (SELECT tx_id, min(position) lo, max(position) hi, count(*) n FROM strata.events GROUP BY tx_id ORDER BY tx_id) x`).Scan(&txs)
		t.Errorf("order_list fed from watermill-sql differs from the store-fed one (until %s, checkpoint %s, log %s):\n%s",
			until, r.Status().Checkpoint, txs, tableDiff(ctx, t, admin, "order_list", "s_order_list"))
	}
	// The relay's completeness ledger counted every event once, across
	// the kill before commit and the restart.
	var counted, published int64
	if err := admin.QueryRow(ctx, `SELECT coalesce(sum(l.events), 0), coalesce(sum(l.applied), 0) FROM strata.projection_ledger l
JOIN strata.projection_checkpoints c ON c.generation = l.generation WHERE c.projection = $1`, r2.Name()).Scan(&counted, &published); err != nil {
		t.Fatal(err)
	}
	if counted != total || published != total {
		t.Errorf("relay ledger: %d events counted, %d published; want %d", counted, published, total)
	}
	t.Logf("%d events relayed exactly once through watermill-sql across a SIGKILL before commit and a restart; %d deliveries, %d redelivered",
		total, len(tp.deliveries()), redelivered)
}
