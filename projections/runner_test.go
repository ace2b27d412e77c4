package projections_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-es/strata/examples/orders/orderview"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/domain/money"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/ordertest"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/projections/projectiontest"
)

func TestRunnerConfigValidate(t *testing.T) {
	t.Parallel()
	cfg := projections.RunnerConfig{BatchSize: -1, PollInterval: -time.Second}
	cfg.SetDefaults()
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "batch size") || !strings.Contains(err.Error(), "poll interval") {
		t.Fatalf("Validate = %v", err)
	}
}

// TestRunnerConfigRefusesForeignSharedReads: shared reads that decode with
// another registry than the runner's would be ignored, every runner reading
// and decoding the log for itself (the benchmark once ran so, at a third of
// its speed, without a word); the configuration is refused instead.
func TestRunnerConfigRefusesForeignSharedReads(t *testing.T) {
	t.Parallel()
	cfg := projections.RunnerConfig{Registry: order.Registry, Shared: projections.NewSharedReads(nil, event.NewRegistry(order.Codecs()...), 0)}
	cfg.SetDefaults()
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "another registry") {
		t.Fatalf("Validate = %v, want the registries' mismatch", err)
	}
	cfg.Shared = projections.NewSharedReads(nil, order.Registry, 0)
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate with the runner's own registry = %v", err)
	}
}

// failingProjection fails the events of one stream version with an SQL
// error, to show that a failure is attributed to the right event.
type failingProjection struct{ version int64 }

func (failingProjection) Name() string { return "failing_test" }
func (failingProjection) EventTypes() []string {
	return []string{order.TypeCreated, order.TypeLineAdded}
}
func (failingProjection) Tables() []string { return nil }
func (p failingProjection) Apply(b *pgx.Batch, ev projections.Event) error {
	if ev.Version == p.version {
		b.Queue(`SELECT 1 / 0`)
		return nil
	}
	b.Queue(`SELECT 1`)
	return nil
}

func TestEventErrorNamesTheFailingEvent(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, time.Minute)
	d := testdb.New(t, orderview.Migrations)
	store := postgres.New(d.App, d.Projector)
	evs := ordertest.Generate(ordertest.Config{Seed: 1, Tenants: 3, Orders: 6, Customers: 2, Start: time.Now()})
	end, err := projectiontest.Append(ctx, store, evs)
	if err != nil {
		t.Fatal(err)
	}
	r, err := projections.NewRunner(failingProjection{version: 2}, store, d.Projector, projections.RunnerConfig{Registry: order.Registry, BatchSize: 100, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	err = r.CatchUp(ctx, end)
	var ee *projections.EventError
	if !errors.As(err, &ee) {
		t.Fatalf("CatchUp = %v, want an *projections.EventError", err)
	}
	want := -1
	for i, e := range evs {
		if e.Version == 2 && (e.Type == order.TypeCreated || e.Type == order.TypeLineAdded) {
			// Events are grouped by tenant: the first failing event is
			// the first version 2 of the alphabetically first tenant.
			if want < 0 || e.Tenant < evs[want].Tenant {
				want = i
			}
		}
	}
	if ee.Index != want || ee.Event.Version != 2 || ee.Event.Stream != evs[want].Stream || ee.Event.Tenant != evs[want].Tenant {
		t.Errorf("error names event %d (%s/%s v%d), want %d (%s/%s v2)", ee.Index, ee.Event.Tenant, ee.Event.Stream, ee.Event.Version,
			want, evs[want].Tenant, evs[want].Stream)
	}
	if db.SQLState(err) != "22012" {
		t.Errorf("cause %v, want division by zero", ee.Err)
	}
	if cp := projectiontest.Checkpoint(ctx, t, d.AdminURL, "failing_test"); !cp.Position.IsZero() {
		t.Errorf("checkpoint moved to %s despite the failure", cp.Position)
	}
}

// insertEvent writes one event directly into the log as a superuser
// (fault injection: the store would refuse to make a hole).
func insertEvent(ctx context.Context, t testing.TB, adminURL, tenant, stream string, version int64, p event.Payload) {
	t.Helper()
	typ, sv, data, err := order.Registry.Encode(p)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, `INSERT INTO strata.events (tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata)
VALUES ($1, $2, $3, gen_random_uuid(), $4, $5, $6, '{}')`, tenant, stream, version, typ, sv, data)
	if err != nil {
		t.Fatal(err)
	}
}

// TestStreamHoleStopsTheProjection injects a hole into a stream (versions
// 1, 2, 4) and checks that the runner stops before version 4 with status
// error, in the log, the checkpoints table and the monitor, rather than
// skipping. Two paths find holes: within one batch, and across batches
// after a restart, when the stream is not cached and the log is asked.
func TestStreamHoleStopsTheProjection(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		batch     int
		warmFirst bool
	}{{"within a batch", 500, false}, {"after a restart", 500, true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t, time.Minute)
			d := testdb.New(t, orderview.Migrations)
			store := postgres.New(d.App, d.Projector)
			at := time.Date(2026, 4, 1, 10, 0, 0, 0, time.UTC)
			insertEvent(ctx, t, d.AdminURL, "t-h", "order-h1", 1, order.Created{OrderID: "h1", CustomerID: "c-1", Currency: "EUR", At: at})
			insertEvent(ctx, t, d.AdminURL, "t-h", "order-h1", 2, order.LineAdded{OrderID: "h1", ProductID: "p-1", Quantity: 1,
				UnitPrice: money.Money{Amount: 100, Currency: "EUR"}, At: at})
			waitVisible(ctx, t, store, d.AdminURL)
			beforeHole := projectiontest.Head(ctx, t, store)
			if tc.warmFirst {
				// A first runner applies versions 1 and 2 and goes away.
				r, err := projections.NewRunner(orderview.NewOrderList(orderview.OrderListTables{}), store, d.Projector, projections.RunnerConfig{Registry: order.Registry, Logger: quietLogger()})
				if err != nil {
					t.Fatal(err)
				}
				if err := r.CatchUp(ctx, beforeHole); err != nil {
					t.Fatal(err)
				}
			}
			insertEvent(ctx, t, d.AdminURL, "t-h", "order-h1", 4, order.Placed{OrderID: "h1", Total: money.Money{Amount: 100, Currency: "EUR"}, At: at})
			insertEvent(ctx, t, d.AdminURL, "t-h", "order-h2", 1, order.Created{OrderID: "h2", CustomerID: "c-1", Currency: "EUR", At: at})
			// orderview.All four in the runner's first read: a transaction open
			// elsewhere in the shared cluster may hide the newest for a
			// moment (decision 1).
			waitVisible(ctx, t, store, d.AdminURL)

			var logs logBuffer
			r, err := projections.NewRunner(orderview.NewOrderList(orderview.OrderListTables{}), store, d.Projector, projections.RunnerConfig{Registry: order.Registry, BatchSize: tc.batch,
				MinErrorBackoff: 20 * time.Millisecond, MaxErrorBackoff: 50 * time.Millisecond,
				Logger: slogTo(&logs)})
			if err != nil {
				t.Fatal(err)
			}
			rctx, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); r.Run(rctx) }()
			defer func() { stop(); <-done }()

			waitFor(t, 20*time.Second, "the runner to report an error", func() bool { return r.Status().State == projections.StateError })
			st := r.Status()
			if !strings.Contains(st.LastError, projections.ErrStreamHole.Error()) || !strings.Contains(st.LastError, `"order-h1"`) {
				t.Errorf("last error %q does not name the hole", st.LastError)
			}
			waitFor(t, 10*time.Second, "the error to be projectiontest.Recorded", func() bool {
				return projectiontest.Checkpoint(ctx, t, d.AdminURL, orderview.OrderListName).Status == projections.StateError
			})
			cp := projectiontest.Checkpoint(ctx, t, d.AdminURL, orderview.OrderListName)
			if tc.warmFirst && cp.Position != beforeHole {
				t.Errorf("checkpoint %s, want %s (just before the hole)", cp.Position, beforeHole)
			}
			if !tc.warmFirst && !cp.Position.IsZero() {
				t.Errorf("checkpoint %s, want zero: the batch holding the hole must not commit", cp.Position)
			}
			if !strings.Contains(cp.LastError, "not contiguous") {
				t.Errorf("projectiontest.Recorded error %q", cp.LastError)
			}
			if !strings.Contains(logs.String(), "projection stopped at an event it cannot apply") {
				t.Errorf("no clear log line; logs:\n%s", logs.String())
			}
			m := projections.NewMonitor(projections.MonitorConfig{App: d.App, Log: store, Names: []string{orderview.OrderListName}})
			sts, err := m.All(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if sts[0].State != projections.StateError || sts[0].LagEvents == 0 {
				t.Errorf("monitor says %+v, want error with a lag", sts[0])
			}
		})
	}
}

// TestLeaseOneActiveRunner starts two runners of one projection: one
// becomes active, the other stands by. When the active one's session is
// killed, the standby takes over and goes on where the first stopped,
// applying nothing twice.
func TestLeaseOneActiveRunner(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 2*time.Minute)
	d := testdb.New(t, orderview.Migrations)
	store := postgres.New(d.App, d.Projector)
	wake := projections.NewSignal()
	cfg := projections.RunnerConfig{Registry: order.Registry, BatchSize: 50, PollInterval: 50 * time.Millisecond, LeaseRetry: 30 * time.Millisecond, Wake: wake.C, Logger: quietLogger()}
	var runners []*projections.Runner
	for range 2 {
		r, err := projections.NewRunner(orderview.NewCustomerSummaries(orderview.CustomerSummaryTables{}), store, d.Projector, cfg)
		if err != nil {
			t.Fatal(err)
		}
		runners = append(runners, r)
	}
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, r := range runners {
		wg.Add(1)
		go func() { defer wg.Done(); r.Run(rctx) }()
	}
	defer func() { stop(); wg.Wait() }()

	states := func() (running, standby int) {
		for _, r := range runners {
			switch r.Status().State {
			case projections.StateRunning:
				running++
			case projections.StateStandby:
				standby++
			}
		}
		return
	}
	waitFor(t, 20*time.Second, "one running and one standby runner", func() bool { r, s := states(); return r == 1 && s == 1 })

	evs := ordertest.Generate(ordertest.Config{Seed: 9, Tenants: 2, Orders: 60, Customers: 5, Start: time.Now()})
	half := len(evs) / 2
	pos, err := projectiontest.Append(ctx, store, evs[:half])
	if err != nil {
		t.Fatal(err)
	}
	wake.Fire()
	waitFor(t, 20*time.Second, "the first half to be applied", func() bool {
		return !projectiontest.Checkpoint(ctx, t, d.AdminURL, orderview.CustomerSummaryName).Position.Less(pos)
	})
	for _, r := range runners {
		if r.Status().State == projections.StateRunning {
			// Both keys of the lease identify the active session.
			conn, err := pgx.Connect(ctx, d.AdminURL)
			if err != nil {
				t.Fatal(err)
			}
			var killed bool
			err = conn.QueryRow(ctx, `SELECT pg_terminate_backend(pid) FROM pg_locks
WHERE locktype = 'advisory' AND granted AND classid = $1::int::oid AND objid = $2::bigint::oid AND objsubid = 2
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
				projections.LeaseClass, int64(uint32(projections.LeaseKey(orderview.CustomerSummaryName)))).Scan(&killed)
			conn.Close(ctx)
			if err != nil || !killed {
				t.Fatalf("terminate the active session: %v %v", killed, err)
			}
			survivor := runners[0]
			if survivor == r {
				survivor = runners[1]
			}
			waitFor(t, 20*time.Second, "the standby to take over", func() bool { return survivor.Status().State == projections.StateRunning })
			break
		}
	}
	pos, err = projectiontest.Append(ctx, store, evs[half:])
	if err != nil {
		t.Fatal(err)
	}
	wake.Fire()
	waitFor(t, 20*time.Second, "the second half to be applied", func() bool {
		return !projectiontest.Checkpoint(ctx, t, d.AdminURL, orderview.CustomerSummaryName).Position.Less(pos)
	})
	waitFor(t, 20*time.Second, "the killed runner to stand by", func() bool { r, s := states(); return r == 1 && s == 1 })
	want, err := ordertest.Expected(evs)
	if err != nil {
		t.Fatal(err)
	}
	wantTables := sections(want, orderview.NewCustomerSummaries(orderview.CustomerSummaryTables{}).Tables())
	if got := ordertest.Dump(ctx, t, d.AdminURL, orderview.NewCustomerSummaries(orderview.CustomerSummaryTables{}).Tables()...); got != wantTables {
		t.Errorf("rows after the take-over:\n%s", ordertest.Diff(wantTables, got))
	}
}

// sections returns the "## table" sections of a dump for tables.
func sections(dump string, tables []string) string {
	var b strings.Builder
	for _, table := range tables {
		start := strings.Index(dump, "## "+table+"\n")
		if start < 0 {
			continue
		}
		rest := dump[start+1:]
		end := strings.Index(rest, "\n## ")
		if end < 0 {
			b.WriteString(dump[start:])
		} else {
			b.WriteString(dump[start : start+1+end+1])
		}
	}
	return b.String()
}

// waitFor polls cond (every 10ms) until it holds or fails the test. It is
// for observing other goroutines' state, not for timing.
func waitFor(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var _ = fmt.Sprint

// TestSetBasedFailureIsPinnedToItsEvent breaks a read model under a
// projection (an order's row deleted behind its back) and checks that the
// set-based batch fails, is rolled back and retried event by event, and
// that the error names the first event touching the missing row.
func TestSetBasedFailureIsPinnedToItsEvent(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, time.Minute)
	d := testdb.New(t, orderview.Migrations)
	store := postgres.New(d.App, d.Projector)
	evs := ordertest.Generate(ordertest.Config{Seed: 5, Tenants: 2, Orders: 30, Customers: 4, Open: 30, Start: time.Now()})
	// Apply the creations, then remove one order's row.
	var created int
	for created < len(evs) && evs[created].Version == 1 {
		created++
	}
	if created == 0 || created == len(evs) {
		t.Fatalf("unexpected history shape (%d creations first)", created)
	}
	pos, err := projectiontest.Append(ctx, store, evs[:created])
	if err != nil {
		t.Fatal(err)
	}
	r, err := projections.NewRunner(orderview.NewOrderList(orderview.OrderListTables{}), store, d.Projector, projections.RunnerConfig{Registry: order.Registry, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.CatchUp(ctx, pos); err != nil {
		t.Fatal(err)
	}
	applied := map[string]bool{}
	for _, e := range evs[:created] {
		applied[e.Tenant+"/"+e.Stream] = true
	}
	victim := -1
	for i := created; i < len(evs); i++ {
		if !applied[evs[i].Tenant+"/"+evs[i].Stream] {
			continue
		}
		if evs[i].Type == order.TypePlaced || evs[i].Type == order.TypePaid || evs[i].Type == order.TypeCancelled {
			victim = i
			break
		}
	}
	if victim < 0 {
		t.Fatal("no status change in the history")
	}
	id := strings.TrimPrefix(evs[victim].Stream, "order-")
	projectiontest.Exec(ctx, t, d.AdminURL, fmt.Sprintf("DELETE FROM strata.order_list WHERE tenant_id = '%s' AND order_id = '%s'", evs[victim].Tenant, id))
	end, err := projectiontest.Append(ctx, store, evs[created:])
	if err != nil {
		t.Fatal(err)
	}
	err = r.CatchUp(ctx, end)
	var ee *projections.EventError
	if !errors.As(err, &ee) || !errors.Is(err, projections.ErrMissingRow) {
		t.Fatalf("CatchUp = %v, want an projections.EventError for a missing row", err)
	}
	if ee.Event.Tenant != evs[victim].Tenant || ee.Event.Stream != evs[victim].Stream {
		t.Errorf("the error names %s/%s v%d, want the first status change of %s/%s", ee.Event.Tenant, ee.Event.Stream, ee.Event.Version,
			evs[victim].Tenant, evs[victim].Stream)
	}
	// Batches before the failing one may commit (on a shared test cluster
	// another test's open transaction can make the new events visible in
	// more than one read); nothing at or after the failing event may.
	if cp := projectiontest.Checkpoint(ctx, t, d.AdminURL, orderview.OrderListName); cp.Position.Less(pos) || !cp.Position.Less(ee.Event.Position) {
		t.Errorf("checkpoint %s, want from %s up to before the failing event at %s: nothing of the failed batch may commit",
			cp.Position, pos, ee.Event.Position)
	}
}

// waitVisible waits until every event written so far is visible to
// readers of the log (no transaction open anywhere in the cluster holds
// the horizon below the newest).
func waitVisible(ctx context.Context, t testing.TB, store interface {
	Head(context.Context) (event.Position, error)
}, adminURL string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var tx string
	var pos int64
	if err := conn.QueryRow(ctx, `SELECT tx_id::text AS tx_text, position FROM strata.events ORDER BY events.tx_id DESC, events.position DESC LIMIT 1`).Scan(&tx, &pos); err != nil {
		t.Fatal(err)
	}
	var last event.Position
	if _, err := fmt.Sscan(tx, &last.Major); err != nil {
		t.Fatal(err)
	}
	last.Minor = uint64(pos)
	waitFor(t, 20*time.Second, "the newest event to be visible", func() bool {
		h, err := store.Head(ctx)
		return err == nil && !h.Less(last)
	})
}

// TestRetriesWaitWhileTheHeadMoves: after a batch that applied events a
// runner retries one parked stream that is due, not all of them: the
// retries run on the session that applies every tenant's next events.
// Once nothing is applied, every due retry runs.
func TestRetriesWaitWhileTheHeadMoves(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, time.Minute)
	d := testdb.New(t, orderview.Migrations)
	store := postgres.New(d.App, d.Projector)
	r, err := projections.NewRunner(orderview.NewOrderList(orderview.OrderListTables{}), store, d.Projector,
		projections.RunnerConfig{Registry: order.Registry, DeadLetters: true, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	x, err := projections.AcquireExclusive(ctx, d.Projector, r.Name(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	if err := r.CatchUpOn(ctx, x, event.Position{}); err != nil { // loads the checkpoint: an empty log
		t.Fatal(err)
	}
	for _, s := range []string{"order-a", "order-b", "order-c"} {
		r.ScheduleRetry("acme", s, time.Now().Add(-time.Second)) // due, and parked no more: each retry ends it
	}
	if tried, err := r.RetryDue(ctx, x.Conn(), 1); err != nil || tried != 1 || r.PendingRetries() != 2 {
		t.Fatalf("while the head moves: tried %d, %d left, err %v; want 1 tried, 2 left", tried, r.PendingRetries(), err)
	}
	if tried, err := r.RetryDue(ctx, x.Conn(), 0); err != nil || tried != 2 || r.PendingRetries() != 0 {
		t.Fatalf("idle: tried %d, %d left, err %v; want 2 tried, none left", tried, r.PendingRetries(), err)
	}
}
