package relay

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/orderview"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/replay"
)

// gatedSink is StoreSink, but once armed, the first time it finds stream
// parked it holds the consumer's transaction open (between the lookup and
// the parking) until released.
type gatedSink struct {
	StoreSink
	tenant, stream string
	armed          *atomic.Bool
	entered        chan struct{}
	release        chan struct{}
}

func (g gatedSink) Parked(ctx context.Context, tx pgx.Tx, consumer, tenant, stream string) (bool, error) {
	parked, err := g.StoreSink.Parked(ctx, tx, consumer, tenant, stream)
	if err == nil && parked && tenant == g.tenant && stream == g.stream && g.armed.CompareAndSwap(true, false) {
		close(g.entered)
		select {
		case <-g.release:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	return parked, err
}

// TestConsumerDeadLettersThroughReplay drives a broker-fed consumer's dead
// letters through the operator's library (what `strata replay dlq` and
// /v1/admin/dead-letters call), over NATS JetStream and watermill-sql.
//
// Stream A fails at a middle event and stream B at its last one; both are
// parked in the shared store under the consumer's name, with the events
// behind A's head. B's letter is discarded with a reason. Then, while the
// consumer runs and has found A parked for A's next event (its transaction
// held open before it parks the event), A is retried: the retry waits for
// that transaction (the consumer's pause lock), so that the letter is
// written before the retry reads A's letters, applies every letter of A in
// order with the projection the
// consumer's row names (into the consumer's tables), and unparks A; the
// consumer then applies A's later events itself. A second retry changes
// nothing. In the end the broker-fed tables equal the store-fed ones (but
// for B's discarded event), relay_applied holds every stream's head, and no
// letter, parked stream or counter is left behind.
func TestConsumerDeadLettersThroughReplay(t *testing.T) {
	t.Parallel()
	evs := generate(47, 2, 240)
	const first = 180 // events seeded, relayed and consumed before the retry; the rest after
	key := func(e genEvent) string { return e.Tenant + "/" + e.Stream }
	last := map[string]int{}
	for i, e := range evs {
		last[key(e)] = i
	}
	// A: fails at version >= 2, with later events before and after the cut;
	// its first event after the cut is parked while the retry starts.
	// B: fails at its very last event (v >= 2), before the cut.
	a, b, aNext := -1, -1, -1
	for i := 0; i < first && a < 0; i++ {
		if evs[i].Version < 2 {
			continue
		}
		later, after := false, -1
		for j := i + 1; j < len(evs); j++ {
			if key(evs[j]) == key(evs[i]) {
				if j < first {
					later = true
				} else if after < 0 {
					after = j
				}
			}
		}
		if later && after >= 0 {
			a, aNext = i, after
		}
	}
	for i := 0; i < first; i++ {
		if evs[i].Version >= 2 && last[key(evs[i])] == i && key(evs[i]) != key(evs[a]) {
			b = i
			break
		}
	}
	if a < 0 || b < 0 {
		t.Fatal("the generated events have no streams to poison as the test needs")
	}
	var aLetters []int64 // versions of A parked before the retry: from the failure to A's first event after the cut
	for i, e := range evs {
		if key(e) == key(evs[a]) && e.Version >= evs[a].Version && i <= aNext {
			aLetters = append(aLetters, e.Version)
		}
	}

	for _, name := range []string{"nats", "sql"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t, 3*time.Minute)
			d := testdb.New(t, orderview.Migrations)
			var tr transport
			for _, x := range transports(t, d) {
				if x.name == name {
					tr = x
				}
			}
			admin := adminConn(ctx, t, d.AdminURL)
			shadow(ctx, t, admin, "order_details", "s_order_details")
			shadow(ctx, t, admin, "order_detail_lines", "s_order_detail_lines")
			if err := seed(ctx, admin, 0, evs[:first]); err != nil {
				t.Fatal(err)
			}
			relayAll(ctx, t, d, tr, first)

			consumer := "dlq_" + name
			tables := orderview.OrderDetailsTables{Orders: "s_order_details", Lines: "s_order_detail_lines"}
			p := hooked{Projection: orderview.NewOrderDetails(tables), hook: func(_ *pgx.Batch, ev projections.Event) error {
				if ev.ID == eventID(a) || ev.ID == eventID(b) {
					return errors.New("boom: the projection rejects this event")
				}
				return nil
			}}
			gate := gatedSink{tenant: evs[a].Tenant, stream: evs[a].Stream, armed: &atomic.Bool{}, entered: make(chan struct{}), release: make(chan struct{})}
			c, err := NewConsumer(d.Projector, ConsumerConfig{Registry: order.Registry, Topic: tr.topic, MaxRetries: 2, InitialInterval: 5 * time.Millisecond,
				MaxInterval: 20 * time.Millisecond, Sink: gate, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Add(consumer, p, tr.subscriber(t, consumer)); err != nil {
				t.Fatal(err)
			}
			stop := runConsumer(ctx, t, c)
			waitFor(t, 60*time.Second, "every stream handled before the cut", func() bool {
				return sameVersions(streamHeads(evs[:first]), appliedVersions(ctx, t, admin, consumer))
			})

			svc, err := replay.New(replay.Config{Registry: order.Registry, Projections: orderview.All(), Pool: d.Projector, App: d.App, Log: postgres.New(d.App, d.Projector),
				ConsumerProjection: ConsumerProjection, YieldTimeout: 20 * time.Second, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			// The letters, as `dlq list --projection <consumer>` shows them.
			letters, err := svc.DeadLetters(ctx, replay.ListOptions{Projections: []string{consumer}})
			if err != nil {
				t.Fatal(err)
			}
			byVersion := map[string]map[int64]projections.DeadLetter{}
			for _, l := range letters {
				k := l.Tenant + "/" + l.Event.Stream
				if byVersion[k] == nil {
					byVersion[k] = map[int64]projections.DeadLetter{}
				}
				byVersion[k][l.Event.Version] = l
				if l.Projection != consumer || l.Status != projections.LetterParked {
					t.Errorf("letter %d: projection %s, status %s; want %s, parked", l.ID, l.Projection, l.Status, consumer)
				}
			}
			headA, headB := byVersion[key(evs[a])][evs[a].Version], byVersion[key(evs[b])][evs[b].Version]
			if want := (len(aLetters) - 1) + 1; len(letters) != want { // A but its event after the cut, and B
				t.Fatalf("%d letters, want %d (A from v%d to its last before the cut, and B's): %+v", len(letters), want, evs[a].Version, letters)
			}
			for _, h := range []projections.DeadLetter{headA, headB} {
				if !h.Head || h.Attempts != 3 || !strings.Contains(h.Error, "boom") || !h.NextAttemptAt.IsZero() || h.Event.ID == "" {
					t.Errorf("head letter: %+v; want the head, 3 attempts, the error, no automatic retry", h)
				}
			}
			if headA.Event.ID != eventID(a) || headA.Event.Type != evs[a].Type || string(headA.Event.Data) == "" || headA.Event.Metadata.CorrelationID == "" {
				t.Errorf("A's head does not carry its event: %+v", headA.Event)
			}
			for v, l := range byVersion[key(evs[a])] {
				if v != evs[a].Version && (l.Attempts != 0 || !strings.Contains(l.Error, "parked behind version")) {
					t.Errorf("A v%d: %d attempts, error %q; want parked behind the head, never tried", v, l.Attempts, l.Error)
				}
			}
			// Unknown names are refused; without a filter the consumer's
			// letters are listed too.
			if _, err := svc.DeadLetters(ctx, replay.ListOptions{Projections: []string{"no_such_consumer"}}); !errors.Is(err, replay.ErrInvalid) {
				t.Errorf("list of an unknown consumer: %v", err)
			}
			if all, err := svc.DeadLetters(ctx, replay.ListOptions{}); err != nil || len(all) != len(letters) {
				t.Errorf("list of everything: %d letters, %v", len(all), err)
			}
			cs, err := svc.Consumers(ctx)
			if err != nil || len(cs) != 1 || cs[0].Name != consumer || cs[0].Projection != "order_details" ||
				!slices.Equal(cs[0].Tables, []string{"s_order_details", "s_order_detail_lines"}) || !cs[0].Retryable ||
				cs[0].ParkedStreams != 2 || cs[0].ParkedLetters != int64(len(letters)) {
				t.Errorf("consumers: %+v %v", cs, err)
			}

			// Discard B's letter: recorded with who and why; B is unparked.
			dl, err := svc.Discard(ctx, "", headB.ID, "test", "the order was entered twice")
			if err != nil || dl.Status != projections.LetterDiscarded || dl.Reason != "the order was entered twice" || dl.ResolvedBy != "test" || dl.ResolvedAt.IsZero() {
				t.Fatalf("discard B: %+v %v", dl, err)
			}
			if _, err := svc.Discard(ctx, "", headB.ID, "test", "again"); !errors.Is(err, replay.ErrNothingToDo) {
				t.Errorf("second discard: %v", err)
			}

			// The later events arrive; the consumer finds A parked for A's next
			// event and holds that transaction open. A retry started now must
			// wait for it, then apply that letter too.
			gate.armed.Store(true)
			if err := seed(ctx, admin, first, evs[first:]); err != nil {
				t.Fatal(err)
			}
			relayAll(ctx, t, d, tr, len(evs)-first)
			select {
			case <-gate.entered:
			case <-time.After(60 * time.Second):
				t.Fatal("A's next event was never parked")
			}
			type result struct {
				rep replay.RetryReport
				err error
			}
			retried := make(chan result, 1)
			began := time.Now()
			go func() {
				rep, err := svc.Retry(ctx, replay.RetrySpec{ID: headA.ID, Actor: "test"})
				retried <- result{rep, err}
			}()
			select {
			case r := <-retried:
				t.Fatalf("the retry did not wait for the consumer's transaction in flight: %+v %v", r.rep, r.err)
			case <-time.After(500 * time.Millisecond):
			}
			close(gate.release)
			r := <-retried
			if r.err != nil {
				t.Fatalf("retry A: %v", r.err)
			}
			t.Logf("%s: the retry of A waited %s for the consumer's transaction, applied %d letters", name, time.Since(began).Round(time.Millisecond), r.rep.Applied())
			if len(r.rep.Streams) != 1 || !r.rep.Streams[0].Unparked || r.rep.Streams[0].Projection != consumer || r.rep.Streams[0].Stream != evs[a].Stream {
				t.Fatalf("retry report: %+v", r.rep)
			}
			var versions []int64
			for _, id := range r.rep.Streams[0].Applied {
				l, err := svc.DeadLetter(ctx, evs[a].Tenant, id)
				if err != nil {
					t.Fatal(err)
				}
				if l.Status != projections.LetterRetried || l.ResolvedBy != "test" {
					t.Errorf("letter %d after the retry: %s by %q", id, l.Status, l.ResolvedBy)
				}
				versions = append(versions, l.Event.Version)
			}
			if !slices.Equal(versions, aLetters) {
				t.Errorf("retry applied versions %v of A, want %v in order", versions, aLetters)
			}

			heads := streamHeads(evs)
			waitFor(t, 60*time.Second, "every stream handled", func() bool {
				return sameVersions(heads, appliedVersions(ctx, t, admin, consumer))
			})
			if err := stop(); err != nil {
				t.Errorf("consumer: %v", err)
			}
			before := rows(ctx, t, admin, "s_order_details") + rows(ctx, t, admin, "s_order_detail_lines")
			if rep, err := svc.Retry(ctx, replay.RetrySpec{ID: headA.ID, Actor: "test"}); !errors.Is(err, replay.ErrNothingToDo) {
				t.Errorf("second retry of A: %+v %v", rep, err)
			}
			if rep, err := svc.Retry(ctx, replay.RetrySpec{All: true, Projections: []string{consumer}, Actor: "test"}); !errors.Is(err, replay.ErrNothingToDo) {
				t.Errorf("retry --all: %+v %v", rep, err)
			}
			if after := rows(ctx, t, admin, "s_order_details") + rows(ctx, t, admin, "s_order_detail_lines"); after != before {
				t.Error("a second retry changed rows")
			}

			// Nothing is left parked, and the counters agree.
			var parkedLetters, parkedRows, streams, letterCount int64
			if err := admin.QueryRow(ctx, `SELECT c.parked_streams, c.parked_letters,
    (SELECT count(*) FROM strata.parked_streams p WHERE p.projection = c.projection),
    (SELECT count(*) FROM strata.dead_letters d WHERE d.projection = c.projection AND d.status = 'parked')
FROM strata.projection_checkpoints c WHERE c.projection = $1`, consumer).Scan(&streams, &parkedLetters, &parkedRows, &letterCount); err != nil {
				t.Fatal(err)
			}
			if streams != 0 || parkedLetters != 0 || parkedRows != 0 || letterCount != 0 {
				t.Errorf("left parked: counters %d streams, %d letters; %d parked_streams rows, %d parked letters", streams, parkedLetters, parkedRows, letterCount)
			}

			// The broker-fed tables equal the store-fed ones, but for B's
			// discarded event.
			storeFed(ctx, t, d, orderview.NewOrderDetails(orderview.OrderDetailsTables{}))
			bOrder := strings.TrimPrefix(evs[b].Stream, "order-")
			for _, tb := range [][2]string{{"order_details", "s_order_details"}, {"order_detail_lines", "s_order_detail_lines"}} {
				var differ int
				if err := admin.QueryRow(ctx, `SELECT count(*) FROM (
    (SELECT * FROM strata.`+tb[0]+` EXCEPT SELECT * FROM strata.`+tb[1]+`)
    UNION ALL (SELECT * FROM strata.`+tb[1]+` EXCEPT SELECT * FROM strata.`+tb[0]+`)) x
WHERE (tenant_id, order_id) <> ($1, $2)`, evs[b].Tenant, bOrder).Scan(&differ); err != nil {
					t.Fatal(err)
				}
				if differ != 0 {
					t.Errorf("%s: %d rows differ from the store-fed projection:\n%s", tb[1], differ, tableDiff(ctx, t, admin, tb[0], tb[1]))
				}
			}
			var bVersion int64
			if err := admin.QueryRow(ctx, `SELECT version FROM strata.s_order_details WHERE tenant_id = $1 AND order_id = $2`, evs[b].Tenant, bOrder).Scan(&bVersion); err != nil || bVersion != evs[b].Version-1 {
				t.Errorf("B's row is at version %d (%v), want %d: its last event was discarded", bVersion, err, evs[b].Version-1)
			}
		})
	}
}

// TestConsumerRefusesProjectionName: a consumer named like a projection
// (or a relay) whose checkpoint row exists would mix its dead letters and
// counters with theirs; Run refuses it before consuming anything. A
// consumer's own row is taken again on restart.
func TestConsumerRefusesProjectionName(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, time.Minute)
	d := testdb.New(t, orderview.Migrations)
	admin := adminConn(ctx, t, d.AdminURL)
	if _, err := admin.Exec(ctx, `INSERT INTO strata.projection_checkpoints (projection) VALUES ('order_list'), ('relay_strata_events')`); err != nil {
		t.Fatal(err)
	}
	tr := transports(t, d)[1] // sql
	for _, name := range []string{"order_list", "relay_strata_events"} {
		c, err := NewConsumer(d.Projector, ConsumerConfig{Registry: order.Registry, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Add(name, orderview.NewOrderList(orderview.OrderListTables{}), tr.subscriber(t, name)); err != nil {
			t.Fatal(err)
		}
		if err := c.Run(ctx); !errors.Is(err, projections.ErrNotConsumer) {
			t.Errorf("consumer %s: Run returned %v, want ErrNotConsumer", name, err)
		}
	}
	for range 2 {
		c, err := NewConsumer(d.Projector, ConsumerConfig{Registry: order.Registry, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Add("billing_orders", orderview.NewOrderList(orderview.OrderListTables{Orders: "billing_order_list"}), tr.subscriber(t, "billing_orders")); err != nil {
			t.Fatal(err)
		}
		stop := runConsumer(ctx, t, c)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
	cps, err := projections.ReadCheckpoints(ctx, d.Projector, "billing_orders", "order_list")
	if err != nil {
		t.Fatal(err)
	}
	if c := cps["billing_orders"].Consumer; c == nil || c.Projection != "order_list" || !slices.Equal(c.Tables, []string{"billing_order_list"}) {
		t.Errorf("the consumer's row describes %+v", c)
	}
	if cps["order_list"].Consumer != nil {
		t.Errorf("the projection's row was taken over: %+v", cps["order_list"].Consumer)
	}
}
