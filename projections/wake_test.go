package projections_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/strata-es/strata/examples/orders/orderview"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/ordertest"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/projections/projectiontest"
)

// noPoll is a poll interval no test waits for: whatever the runner
// applies within a test that uses it, a wake-up made it happen.
const noPoll = time.Hour

// wakingStore returns d's store, whose appends fire the wake-up signal it
// also returns, and a progress signal for the runners.
func wakingStore(d *testdb.DB) (*postgres.Store, *projections.Signal, *projections.Progress) {
	wake := projections.NewSignal()
	return postgres.New(d.App, d.Projector, postgres.WithAppendHook(wake.Fire)), wake, projections.NewProgress()
}

// startRunner runs r until the test ends and waits until it is active.
func startRunner(t *testing.T, ctx context.Context, r *projections.Runner) {
	t.Helper()
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); r.Run(rctx) }()
	t.Cleanup(func() { stop(); <-done })
	waitFor(t, 20*time.Second, "the runner to be active", func() bool { return r.Status().State == projections.StateRunning })
}

// awaitApplied waits on the runner's progress signal (no polling) until
// name has applied pos, and returns how long that took.
func awaitApplied(t *testing.T, p *projections.Progress, name string, pos event.Position, began time.Time, limit time.Duration) time.Duration {
	t.Helper()
	timeout := time.NewTimer(limit)
	defer timeout.Stop()
	for {
		ch := p.C()
		if got, _ := p.Position(name); !got.Less(pos) {
			return time.Since(began)
		}
		select {
		case <-ch:
		case <-timeout.C:
			t.Fatalf("%s did not apply %s within %s (polling is off: the wake-up was lost)", name, pos, limit)
		}
	}
}

func appendOne(t *testing.T, ctx context.Context, s eventstore.Store, tenant, id string) event.Position {
	t.Helper()
	evs := ordertest.Generate(ordertest.Config{Seed: uint64(len(id)), Tenants: 1, Orders: 1, Customers: 1, Start: time.Now()})[:1]
	evs[0].Tenant, evs[0].Stream = tenant, "order-"+id
	evs[0].Data = []byte(`{"order_id":"` + id + `","customer_id":"c-1","currency":"EUR","at":"2026-04-01T10:00:00Z"}`)
	pos, err := projectiontest.Append(ctx, s, evs)
	if err != nil {
		t.Fatal(err)
	}
	return pos
}

// TestWakeInProcess: an append in this process wakes the runner at once.
func TestWakeInProcess(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, time.Minute)
	d := testdb.New(t, orderview.Migrations)
	store, wake, progress := wakingStore(d)
	r, err := projections.NewRunner(orderview.NewOrderList(orderview.OrderListTables{}), store, d.Projector, projections.RunnerConfig{Registry: order.Registry, PollInterval: noPoll, Wake: wake.C, Progress: progress, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	startRunner(t, ctx, r)
	var lat []time.Duration
	for i := range 20 {
		began := time.Now()
		pos := appendOne(t, ctx, store, "t-w", "w"+string(rune('a'+i)))
		lat = append(lat, awaitApplied(t, progress, orderview.OrderListName, pos, began, 10*time.Second))
	}
	slices.Sort(lat)
	t.Logf("append -> applied, in-process wake-up: median %s, max %s", lat[len(lat)/2], lat[len(lat)-1])
}

// TestWakeAcrossProcesses: an append made by another process (another
// store, announcing its appends with NOTIFY after commit) wakes the runner
// through LISTEN.
func TestWakeAcrossProcesses(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, time.Minute)
	d := testdb.New(t, orderview.Migrations)
	lctx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)

	// The projector process: woken only by its LISTEN connection.
	listened := projections.NewSignal()
	firstWake := listened.C()
	go projections.Listen(lctx, d.Projector, listened, quietLogger())
	select {
	case <-firstWake: // fired once LISTEN is in place
	case <-ctx.Done():
		t.Fatal("LISTEN never started")
	}
	progress := projections.NewProgress()
	reader := postgres.New(d.App, d.Projector)
	r, err := projections.NewRunner(orderview.NewOrderList(orderview.OrderListTables{}), reader, d.Projector, projections.RunnerConfig{Registry: order.Registry, PollInterval: noPoll, Wake: listened.C, Progress: progress, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	startRunner(t, ctx, r)

	// The command process: its appends fire a broadcast that the notifier
	// turns into coalesced NOTIFYs.
	appended := projections.NewSignal()
	writer := postgres.New(d.App, nil, postgres.WithAppendHook(appended.Fire))
	go projections.NotifyAppends(lctx, d.App, appended.C, quietLogger())

	var lat []time.Duration
	for i := range 10 {
		began := time.Now()
		pos := appendOne(t, ctx, writer, "t-x", "x"+string(rune('a'+i)))
		lat = append(lat, awaitApplied(t, progress, orderview.OrderListName, pos, began, 10*time.Second))
	}
	slices.Sort(lat)
	t.Logf("append -> applied, NOTIFY/LISTEN wake-up: median %s, max %s", lat[len(lat)/2], lat[len(lat)-1])
}

// TestWakeRepollsBehindAnOpenTransaction: a wake-up that finds nothing
// visible, because an older transaction is still open, is followed by
// quick re-reads, so the event is applied soon after that transaction
// ends, without another wake-up and without waiting for the poll.
func TestWakeRepollsBehindAnOpenTransaction(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, time.Minute)
	// A cluster of its own: the held transaction pauses every reader of
	// its cluster.
	d := testdb.NewPrivate(t, nil, orderview.Migrations).DB
	store, wake, progress := wakingStore(d)
	r, err := projections.NewRunner(orderview.NewOrderList(orderview.OrderListTables{}), store, d.Projector, projections.RunnerConfig{Registry: order.Registry, PollInterval: noPoll, Wake: wake.C, Progress: progress, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	startRunner(t, ctx, r)

	held, err := pgx.Connect(ctx, d.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close(context.Background())
	tx, err := held.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil { // takes a transaction id
		t.Fatal(err)
	}
	pos := appendOne(t, ctx, store, "t-r", "r1") // committed, fires the wake-up, not visible yet
	time.Sleep(100 * time.Millisecond)           // the runner re-reads meanwhile (nothing to wait on: this is the open transaction's lifetime)
	if got, _ := progress.Position(orderview.OrderListName); !got.Less(pos) {
		t.Fatal("the event was applied while an older transaction was open")
	}
	committed := time.Now()
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	lat := awaitApplied(t, progress, orderview.OrderListName, pos, committed, 5*time.Second)
	t.Logf("applied %s after the older transaction ended (poll interval %s)", lat, noPoll)
}

// TestWakeSharesTheHeadRead: runners woken by the same append read and
// decode the head once between them (SharedReads), and, with polling off,
// every runner still applies every append: a shared read never answers a
// wake-up it began before.
func TestWakeSharesTheHeadRead(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, time.Minute)
	d := testdb.New(t, orderview.Migrations)
	store, wake, progress := wakingStore(d)
	shared := projections.NewSharedReads(store, order.Registry, 0)
	all := orderview.All()
	for _, p := range all {
		// A gather pause longer than an append takes: every runner is
		// woken and pausing before the first of them reads.
		r, err := projections.NewRunner(p, store, d.Projector, projections.RunnerConfig{Registry: order.Registry, PollInterval: noPoll,
			Gather: 25 * time.Millisecond, Wake: wake.C, Progress: progress, Shared: shared, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		startRunner(t, ctx, r)
	}
	before := shared.Stats()
	const appends = 30
	for i := range appends {
		began := time.Now()
		pos := appendOne(t, ctx, store, "t-s", "s"+string(rune('a'+i)))
		for _, p := range all {
			awaitApplied(t, progress, p.Name(), pos, began, 10*time.Second)
		}
	}
	st := shared.Stats()
	reads, heads := st.Reads-before.Reads, st.SharedHeads-before.SharedHeads
	t.Logf("%d appends, %d runners: %d log reads, %d head reads shared", appends, len(all), reads, heads)
	// Alone the runners would make at least appends x runners reads;
	// sharing, about one per append (the runners that took their channel
	// after the first read began read again).
	if heads < appends || reads+heads < int64(appends*len(all)) {
		t.Fatalf("head reads were not shared: %d log reads, %d shared", reads, heads)
	}
}
