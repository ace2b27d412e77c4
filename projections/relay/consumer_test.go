package relay

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"

	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/orderview"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/projections"
)

// hooked wraps a projection: before applying an event it calls hook, which
// may queue statements of its own or fail.
type hooked struct {
	projections.Projection
	hook func(b *pgx.Batch, ev projections.Event) error
}

func (h hooked) Apply(b *pgx.Batch, ev projections.Event) error {
	if err := h.hook(b, ev); err != nil {
		return err
	}
	return h.Projection.Apply(b, ev)
}

// storeFed applies the log to the live tables of p with a projection
// runner.
func storeFed(ctx context.Context, t *testing.T, d *testdb.DB, p projections.Projection) {
	t.Helper()
	r, err := projections.NewRunner(p, postgres.New(d.App, d.Projector), d.Projector, projections.RunnerConfig{Registry: order.Registry, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.CatchUp(ctx, lastPosition(ctx, t, adminConn(ctx, t, d.AdminURL))); err != nil {
		t.Fatal(err)
	}
}

func deadLetterCount(ctx context.Context, t *testing.T, d *testdb.DB) int {
	t.Helper()
	conn := adminConn(ctx, t, d.AdminURL)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM strata.dead_letters`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestConsumerShutdownIsNotPoison stops a consumer while a message is
// being applied (a statement of the projection sleeps): the router cancels
// the message's context, the statement fails with "context canceled", and
// the message must be nacked, not dead-lettered, and applied by the next
// consumer. That is the openmeter #3141 failure: PoisonQueue acking into
// the poison topic what failed only because the router was closing.
func TestConsumerShutdownIsNotPoison(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 2*time.Minute)
	d := testdb.New(t, orderview.Migrations)
	admin := adminConn(ctx, t, d.AdminURL)
	shadow(ctx, t, admin, "order_list", "s_order_list")
	evs := generate(21, 2, 40)
	if err := seed(ctx, admin, 0, evs); err != nil {
		t.Fatal(err)
	}
	const blocked = 7 // index of the event whose application hangs
	for _, tr := range transports(t, d) {
		t.Run(tr.name, func(t *testing.T) {
			relayAll(ctx, t, d, tr, len(evs))
			consumer := "shutdown_" + tr.name
			inFlight := make(chan struct{})
			var once sync.Once
			hanging := hooked{Projection: orderview.NewOrderList(orderview.OrderListTables{Orders: "s_order_list"}),
				hook: func(b *pgx.Batch, ev projections.Event) error {
					if ev.ID == eventID(blocked) {
						once.Do(func() { close(inFlight) })
						b.Queue(`SELECT pg_sleep(60)`)
					}
					return nil
				}}
			c1, err := NewConsumer(d.Projector, ConsumerConfig{Registry: order.Registry, Topic: tr.topic, MaxRetries: 3, InitialInterval: 10 * time.Millisecond,
				MaxInterval: 50 * time.Millisecond, CloseTimeout: 10 * time.Second, Logger: testLogger(t, slog.LevelWarn)})
			if err != nil {
				t.Fatal(err)
			}
			if err := c1.Add(consumer, hanging, tr.subscriber(t, consumer)); err != nil {
				t.Fatal(err)
			}
			stop := runConsumer(ctx, t, c1)
			select {
			case <-inFlight:
			case <-time.After(30 * time.Second):
				natsDiag(t, tr, consumer)
				t.Fatal("the hanging event was never applied")
			}
			time.Sleep(100 * time.Millisecond) // the sleeping statement is running
			began := time.Now()
			if err := stop(); err != nil {
				t.Errorf("consumer 1: %v", err)
			}
			if took := time.Since(began); took > 8*time.Second {
				t.Errorf("the consumer took %s to stop", took)
			}
			if n := deadLetterCount(ctx, t, d); n != 0 {
				t.Fatalf("%d dead letters after a shutdown, want none", n)
			}
			key := evs[blocked].Tenant + "/" + evs[blocked].Stream
			if v := appliedVersions(ctx, t, admin, consumer)[key]; v >= evs[blocked].Version {
				t.Fatalf("%s applied up to v%d although v%d was interrupted", key, v, evs[blocked].Version)
			}

			// The next consumer gets the message again and applies it.
			c2, err := NewConsumer(d.Projector, ConsumerConfig{Registry: order.Registry, Topic: tr.topic, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			tp := &tap{Subscriber: tr.subscriber(t, consumer)}
			if err := c2.Add(consumer, orderview.NewOrderList(orderview.OrderListTables{Orders: "s_order_list"}), tp); err != nil {
				t.Fatal(err)
			}
			stop = runConsumer(ctx, t, c2)
			heads := streamHeads(evs)
			waitFor(t, 30*time.Second, "every event applied after the restart", func() bool {
				return sameVersions(heads, appliedVersions(ctx, t, admin, consumer))
			})
			if err := stop(); err != nil {
				t.Errorf("consumer 2: %v", err)
			}
			index := map[string]int{}
			for i := range evs {
				index[eventID(i)] = i
			}
			redelivered, earlier := false, 0
			for _, dl := range tp.deliveries() {
				redelivered = redelivered || dl.id == eventID(blocked)
				if index[dl.id] < blocked {
					earlier++
				}
			}
			if !redelivered {
				t.Error("the interrupted message was not delivered again")
			}
			// JetStream keeps the durable consumer's acks across the restart
			// (the subscriber creates the consumer itself, so nats.go does not
			// delete it on Unsubscribe). watermill-sql stores a batch's acks
			// with the batch, and the shutdown rolled that back: the earlier
			// messages come again and change nothing.
			if tr.name == "nats" && earlier > 0 {
				t.Errorf("%d messages acknowledged before the restart were delivered again: the durable consumer did not survive", earlier)
			}
			t.Logf("%s: after the restart %d deliveries, %d of messages handled before it", tr.name, len(tp.deliveries()), earlier)
			if n := deadLetterCount(ctx, t, d); n != 0 {
				t.Errorf("%d dead letters, want none", n)
			}
			if _, err := admin.Exec(ctx, `TRUNCATE strata.s_order_list`); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestConsumerPoisonParksStream makes one event of a stream fail on every
// attempt and another stream's first event panic. With MaxRetries 2 each is
// tried 3 times, then dead-lettered with its reason into the shared
// dead-letter store under the consumer's name, and every later event of
// its stream that the projection handles is parked behind it (without
// being tried), while all other streams are applied. The consumer's
// checkpoint row counts the parked streams and letters.
func TestConsumerPoisonParksStream(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 2*time.Minute)
	d := testdb.New(t, orderview.Migrations)
	admin := adminConn(ctx, t, d.AdminURL)
	shadow(ctx, t, admin, "order_list", "s_order_list")
	evs := generate(31, 2, 120)
	if err := seed(ctx, admin, 0, evs); err != nil {
		t.Fatal(err)
	}
	// The failing event: one order_list handles, neither first nor last of
	// its stream; the panicking one: the first event of another stream.
	heads := streamHeads(evs)
	handled := map[string]bool{}
	for _, typ := range orderview.NewOrderList(orderview.OrderListTables{}).EventTypes() {
		handled[typ] = true
	}
	failing, panicking := -1, -1
	for i, e := range evs {
		if handled[e.Type] && e.Version >= 2 && heads[e.Tenant+"/"+e.Stream] > e.Version {
			failing = i
			break
		}
	}
	for i, e := range evs {
		if e.Version == 1 && e.Stream != evs[failing].Stream && heads[e.Tenant+"/"+e.Stream] >= 2 {
			panicking = i
			break
		}
	}
	poisoned := map[string]bool{
		evs[failing].Tenant + "/" + evs[failing].Stream:     true,
		evs[panicking].Tenant + "/" + evs[panicking].Stream: true,
	}
	storeFed(ctx, t, d, orderview.NewOrderList(orderview.OrderListTables{}))

	for _, tr := range transports(t, d) {
		t.Run(tr.name, func(t *testing.T) {
			relayAll(ctx, t, d, tr, len(evs))
			consumer := "poison_" + tr.name
			var attempts atomic.Int32
			p := hooked{Projection: orderview.NewOrderList(orderview.OrderListTables{Orders: "s_order_list"}),
				hook: func(b *pgx.Batch, ev projections.Event) error {
					switch ev.ID {
					case eventID(failing):
						attempts.Add(1)
						return errors.New("boom: the projection rejects this event")
					case eventID(panicking):
						panic("kaboom")
					}
					return nil
				}}
			c, err := NewConsumer(d.Projector, ConsumerConfig{Registry: order.Registry, Topic: tr.topic, MaxRetries: 2, InitialInterval: 5 * time.Millisecond,
				MaxInterval: 20 * time.Millisecond, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Add(consumer, p, tr.subscriber(t, consumer)); err != nil {
				t.Fatal(err)
			}
			stop := runConsumer(ctx, t, c)
			began := time.Now()
			waitFor(t, 60*time.Second, "every stream handled", func() bool {
				ok := sameVersions(heads, appliedVersions(ctx, t, admin, consumer))
				if !ok && time.Since(began) > 50*time.Second {
					natsDiag(t, tr, consumer)
				}
				return ok
			})
			if err := stop(); err != nil {
				t.Errorf("consumer: %v", err)
			}
			if n := attempts.Load(); n != 3 {
				t.Errorf("the failing event was tried %d times, want 3 (MaxRetries 2)", n)
			}

			type letter struct {
				key                string
				version            int64
				attempts           int
				reason, projection string
			}
			rs, err := admin.Query(ctx, `SELECT tenant_id || '/' || stream_id, version, attempts, error, projection
FROM strata.dead_letters WHERE projection = $1 ORDER BY tenant_id, stream_id, version`, consumer)
			if err != nil {
				t.Fatal(err)
			}
			letters, err := pgx.CollectRows(rs, func(r pgx.CollectableRow) (letter, error) {
				var l letter
				err := r.Scan(&l.key, &l.version, &l.attempts, &l.reason, &l.projection)
				return l, err
			})
			if err != nil {
				t.Fatal(err)
			}
			// From the failing event on, every event of its stream that
			// order_list handles; all of the panicking one's.
			want := 0
			for _, e := range evs {
				switch key := e.Tenant + "/" + e.Stream; {
				case !handled[e.Type]:
				case key == evs[failing].Tenant+"/"+evs[failing].Stream && e.Version >= evs[failing].Version,
					key == evs[panicking].Tenant+"/"+evs[panicking].Stream:
					want++
				}
			}
			if len(letters) != want {
				t.Errorf("%d dead letters, want %d: %+v", len(letters), want, letters)
			}
			var streams, parkedLetters, parkedRows int64
			if err := admin.QueryRow(ctx, `SELECT parked_streams, parked_letters, (SELECT count(*) FROM strata.parked_streams p WHERE p.projection = c.projection AND p.generation = c.generation)
FROM strata.projection_checkpoints c WHERE projection = $1`, consumer).Scan(&streams, &parkedLetters, &parkedRows); err != nil {
				t.Fatal(err)
			}
			if streams != 2 || parkedRows != 2 || parkedLetters != int64(len(letters)) {
				t.Errorf("checkpoint counters: %d parked streams (%d rows), %d parked letters; want 2 and %d", streams, parkedRows, parkedLetters, len(letters))
			}
			for _, l := range letters {
				if !poisoned[l.key] {
					t.Errorf("dead letter of an unpoisoned stream: %+v", l)
					continue
				}
				first := l.key == evs[failing].Tenant+"/"+evs[failing].Stream && l.version == evs[failing].Version ||
					l.key == evs[panicking].Tenant+"/"+evs[panicking].Stream && l.version == 1
				switch {
				case first && l.attempts != 3:
					t.Errorf("%s v%d: %d attempts recorded, want 3", l.key, l.version, l.attempts)
				case l.projection != consumer:
					t.Errorf("%s v%d: projection %q, want the consumer %q", l.key, l.version, l.projection, consumer)
				case first && !strings.Contains(l.reason, "boom") && !strings.Contains(l.reason, "panic occurred: \"kaboom\""):
					t.Errorf("%s v%d: reason %q", l.key, l.version, l.reason)
				case !first && (l.attempts != 0 || !strings.Contains(l.reason, "parked behind")):
					t.Errorf("%s v%d: parked behind its stream's dead letter, got attempts %d, reason %q", l.key, l.version, l.attempts, l.reason)
				}
			}

			// Every other order's row is what the store-fed projection
			// made; the failing order stands at its first event.
			var differ int
			if err := admin.QueryRow(ctx, `SELECT count(*) FROM (
    (SELECT * FROM strata.order_list EXCEPT SELECT * FROM strata.s_order_list)
    UNION ALL (SELECT * FROM strata.s_order_list EXCEPT SELECT * FROM strata.order_list)) x
WHERE NOT (tenant_id, 'order-' || order_id) IN (($1, $2), ($3, $4))`,
				evs[failing].Tenant, evs[failing].Stream, evs[panicking].Tenant, evs[panicking].Stream).Scan(&differ); err != nil {
				t.Fatal(err)
			}
			if differ != 0 {
				t.Errorf("%d rows of unpoisoned orders differ from the store-fed projection", differ)
			}
			if _, err := admin.Exec(ctx, `TRUNCATE strata.s_order_list`); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func natsDiag(t *testing.T, tr transport, consumer string) {
	if tr.name != "nats" {
		return
	}
	nc, err := nats.Connect(natsURL(t))
	if err != nil {
		return
	}
	defer nc.Close()
	js, _ := nc.JetStream()
	if ci, err := js.ConsumerInfo(tr.topic, consumer); err == nil {
		t.Logf("consumer info: delivered %+v ack floor %+v pending %d ack pending %d redelivered %d push bound %v config %+v",
			ci.Delivered, ci.AckFloor, ci.NumPending, ci.NumAckPending, ci.NumRedelivered, ci.PushBound, ci.Config)
	} else {
		t.Logf("consumer info: %v", err)
	}
}
