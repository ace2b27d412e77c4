package projections_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/ordertest"
	"github.com/strata-es/strata/examples/orders/orderview"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/projections/projectiontest"
	"github.com/strata-es/strata/replay"
)

// groupOf returns a group of runners of ps on d.
func groupOf(t *testing.T, d *testdb.DB, store *postgres.Store, cfg projections.RunnerConfig, ps ...projections.Projection) *projections.Group {
	t.Helper()
	cfg.Registry = order.Registry
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	cfg.LeaseRetry = 50 * time.Millisecond
	if cfg.Logger == nil {
		cfg.Logger = slogTo(testWriter{t})
	}
	var rs []*projections.Runner
	for _, p := range ps {
		r, err := projections.NewRunner(p, store, d.Projector, cfg)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	g, err := projections.NewGroup(rs)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// runGroup runs g until the test ends.
func runGroup(t *testing.T, ctx context.Context, g *projections.Group) {
	t.Helper()
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); g.Run(rctx) }()
	t.Cleanup(func() { stop(); <-done })
}

// inGroup waits until n members are in g.
func inGroup(t *testing.T, g *projections.Group, n int64) {
	t.Helper()
	waitFor(t, 20*time.Second, "the members to be in the group", func() bool { st := g.Stats(); return st.Joined-st.Left == n })
}

// reached reports whether every named checkpoint is at or after end.
func reached(ctx context.Context, t *testing.T, d *testdb.DB, end event.Position, names ...string) bool {
	for _, n := range names {
		if projectiontest.Checkpoint(ctx, t, d.AdminURL, n).Position.Less(end) {
			return false
		}
	}
	return true
}

// verifyLedgers runs replay verify over ps: every member's completeness
// ledger, written by the group for all members in one statement per
// tenant, must agree with the log.
func verifyLedgers(ctx context.Context, t *testing.T, d *testdb.DB, store *postgres.Store, ps ...projections.Projection) {
	t.Helper()
	svc, err := replay.New(replay.Config{Registry: order.Registry, Pool: d.Projector, App: d.App, Log: store, Projections: ps, Logger: quietLogger(),
		Runner: projections.RunnerConfig{Registry: order.Registry}})
	if err != nil {
		t.Fatal(err)
	}
	vs, err := svc.Verify(ctx, replay.VerifyOptions{Projections: projections.Names(ps)})
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) == 0 {
		t.Fatal("verify found no ledger to check")
	}
	for _, v := range vs {
		if !v.Complete {
			t.Errorf("ledger of %s, tenant %s: %+v", v.Projection, v.Tenant, v)
		}
	}
}

// lastWriters counts the transactions that last wrote the named
// checkpoint rows: 1 when one transaction moved them all.
func lastWriters(ctx context.Context, t *testing.T, d *testdb.DB, names []string) int {
	t.Helper()
	conn, err := pgx.Connect(ctx, d.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(DISTINCT xmin::text) FROM strata.projection_checkpoints WHERE projection = ANY($1)`, names).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestGroupAppliesEveryMemberInOneTransaction (issue 35 §2): the four
// order projections run as a group while orders arrive, in bursts that
// leave the group far behind at times (its members then catch up alone and
// rejoin); their rows equal the oracle's, no batch had to be split, and
// once every member is back, one transaction moves all four checkpoints
// (the rows share its xmin).
func TestGroupAppliesEveryMemberInOneTransaction(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 2*time.Minute)
	d := testdb.New(t, orderview.Migrations)
	store := postgres.New(d.App, d.Projector)
	evs := ordertest.Generate(ordertest.Config{Seed: 35, Tenants: 3, Orders: 40, Customers: 4, Start: time.Now()})
	ps := orderview.All()
	names := projections.Names(ps)
	g := groupOf(t, d, store, projections.RunnerConfig{DeadLetters: true, BatchSize: 17}, ps...)
	runGroup(t, ctx, g)
	var end event.Position
	body, tail := evs[:len(evs)-10], evs[len(evs)-10:]
	for lo := 0; lo < len(body); lo += 25 {
		var err error
		if end, err = projectiontest.Append(ctx, store, body[lo:min(lo+25, len(body))]); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	waitFor(t, 60*time.Second, "every member to reach the end", func() bool { return reached(ctx, t, d, end, names...) })
	inGroup(t, g, int64(len(ps)))
	end, err := projectiontest.Append(ctx, store, tail)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "every member to apply the last events", func() bool { return reached(ctx, t, d, end, names...) })
	want, err := ordertest.Expected(evs)
	if err != nil {
		t.Fatal(err)
	}
	if got := ordertest.Dump(ctx, t, d.AdminURL, ordertest.Tables()...); got != want {
		t.Errorf("the group's rows differ from the oracle:\n%s", ordertest.Diff(want, got))
	}
	st := g.Stats()
	if st.Grouped == 0 || st.Split != 0 {
		t.Errorf("stats %+v: want grouped batches, none split", st)
	}
	verifyLedgers(ctx, t, d, store, ps...)
	if n := lastWriters(ctx, t, d, names); n != 1 {
		t.Errorf("the members' checkpoints were last written by %d transactions, want 1", n)
	}
	for _, r := range g.Runners() {
		if s := r.Status(); s.State != projections.StateRunning || s.Checkpoint.Less(end) {
			t.Errorf("%s: %s at %s, want running at the end", r.Name(), s.State, s.Checkpoint)
		}
	}
}

// TestGroupParksAPoisonEventOfOneMember: a member panics on one stream.
// The group's batch splits, that member parks the stream in its own
// transaction, the others apply the batch; no member leaves the group,
// and every other row equals the oracle.
func TestGroupParksAPoisonEventOfOneMember(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 2*time.Minute)
	d := testdb.New(t, orderview.Migrations)
	store := postgres.New(d.App, d.Projector)
	evs := ordertest.Generate(ordertest.Config{Seed: 36, Tenants: 3, Orders: 20, Customers: 3, Start: time.Now()})
	victim := evs[len(evs)/2]
	list := &panicky{OrderList: orderview.NewOrderList(orderview.OrderListTables{}), tenant: victim.Tenant, stream: victim.Stream}
	details := orderview.NewOrderDetails(orderview.OrderDetailsTables{})
	g := groupOf(t, d, store, projections.RunnerConfig{DeadLetters: true, Failures: projections.FailurePolicy{Attempts: 1}}, details, list)
	runGroup(t, ctx, g)
	inGroup(t, g, 2) // members start alone and join at the head
	end, err := projectiontest.Append(ctx, store, evs)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{details.Name(), list.Name()}
	waitFor(t, 60*time.Second, "both members to reach the end", func() bool { return reached(ctx, t, d, end, names...) })
	if cp := projectiontest.Checkpoint(ctx, t, d.AdminURL, list.Name()); cp.ParkedStreams != 1 {
		t.Errorf("order_list parked %d streams, want 1", cp.ParkedStreams)
	}
	if cp := projectiontest.Checkpoint(ctx, t, d.AdminURL, details.Name()); cp.ParkedStreams != 0 {
		t.Errorf("order_details parked %d streams, want 0", cp.ParkedStreams)
	}
	want, err := ordertest.Expected(evs)
	if err != nil {
		t.Fatal(err)
	}
	for _, table := range details.Tables() {
		if got := ordertest.Dump(ctx, t, d.AdminURL, table); !containsTable(want, got) {
			t.Errorf("%s differs from the oracle", table)
		}
	}
	var others []ordertest.Event
	for _, e := range evs {
		if e.Tenant != victim.Tenant || e.Stream != victim.Stream {
			others = append(others, e)
		}
	}
	wantOthers, err := ordertest.Expected(others)
	if err != nil {
		t.Fatal(err)
	}
	if got := ordertest.Dump(ctx, t, d.AdminURL, "order_list"); !containsTable(wantOthers, got) {
		t.Errorf("order_list's other streams differ from the oracle without the parked stream")
	}
	if st := g.Stats(); st.Split == 0 || st.Left != 0 {
		t.Errorf("stats %+v: want a split batch and no member leaving", st)
	}
	verifyLedgers(ctx, t, d, store, details, list)
}

// stuck is the order list failing every event of one stream with an
// error that is not poison-shaped, until healed: without dead letters the
// projection stops there, as a projection in error does.
type stuck struct {
	*orderview.OrderList
	stream string
	healed atomic.Bool
}

func (p *stuck) fail(ev projections.Event) error {
	if ev.Stream == p.stream && !p.healed.Load() {
		return errors.New("stuck: the module cannot apply this yet")
	}
	return nil
}

func (p *stuck) Apply(b *pgx.Batch, ev projections.Event) error {
	if err := p.fail(ev); err != nil {
		return err
	}
	return p.OrderList.Apply(b, ev)
}

func (p *stuck) ApplyBatch(b *pgx.Batch, evs []projections.Event) error {
	for _, ev := range evs {
		if err := p.fail(ev); err != nil {
			return err
		}
	}
	return p.OrderList.ApplyBatch(b, evs)
}

// TestGroupMemberInErrorRunsAlone: a member that cannot apply an event
// leaves the group and retries alone (status error) while the others
// follow the head in the group; once it can, it catches up and rejoins,
// and the next batches move every checkpoint in one transaction again.
func TestGroupMemberInErrorRunsAlone(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 2*time.Minute)
	d := testdb.New(t, orderview.Migrations)
	store := postgres.New(d.App, d.Projector)
	evs := ordertest.Generate(ordertest.Config{Seed: 37, Tenants: 2, Orders: 24, Customers: 3, Start: time.Now()})
	half := len(evs) / 2
	list := &stuck{OrderList: orderview.NewOrderList(orderview.OrderListTables{}), stream: evs[half/2].Stream}
	details := orderview.NewOrderDetails(orderview.OrderDetailsTables{})
	summaries := orderview.NewCustomerSummaries(orderview.CustomerSummaryTables{})
	g := groupOf(t, d, store, projections.RunnerConfig{MinErrorBackoff: 20 * time.Millisecond, MaxErrorBackoff: 50 * time.Millisecond},
		details, list, summaries)
	runGroup(t, ctx, g)
	mid, err := projectiontest.Append(ctx, store, evs[:half])
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the healthy members to reach the middle", func() bool {
		return reached(ctx, t, d, mid, details.Name(), summaries.Name())
	})
	var listRunner *projections.Runner
	for _, r := range g.Runners() {
		if r.Name() == list.Name() {
			listRunner = r
		}
	}
	waitFor(t, 10*time.Second, "the stuck member to report its error", func() bool { return listRunner.Status().State == projections.StateError })
	if cp := projectiontest.Checkpoint(ctx, t, d.AdminURL, list.Name()); !cp.Position.Less(mid) || cp.Status != projections.StateError {
		t.Fatalf("the stuck member's checkpoint: %s, status %s; want behind the middle, error", cp.Position, cp.Status)
	}
	inGroup(t, g, 2) // the healthy two

	list.healed.Store(true)
	names := []string{details.Name(), list.Name(), summaries.Name()}
	waitFor(t, 30*time.Second, "the healed member to catch up", func() bool { return reached(ctx, t, d, mid, names...) })
	inGroup(t, g, 3)
	end, err := projectiontest.Append(ctx, store, evs[half:])
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "every member to reach the end", func() bool { return reached(ctx, t, d, end, names...) })
	if n := lastWriters(ctx, t, d, names); n != 1 {
		t.Errorf("after the rejoin the checkpoints were last written by %d transactions, want 1", n)
	}
	want, err := ordertest.Expected(evs)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []projections.Projection{details, list, summaries} {
		for _, table := range p.Tables() {
			if got := ordertest.Dump(ctx, t, d.AdminURL, table); !containsTable(want, got) {
				t.Errorf("%s differs from the oracle", table)
			}
		}
	}
	if st := listRunner.Status(); st.State != projections.StateRunning {
		t.Errorf("the healed member is %s, want running", st.State)
	}
}

// TestGroupYieldsOneMemberToATool: a tool takes one member (a rebuild's
// swap, a dead-letter retry); the member pauses while the others go on in
// the group; once the tool is done, it catches up and rejoins.
func TestGroupYieldsOneMemberToATool(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 2*time.Minute)
	d := testdb.New(t, orderview.Migrations)
	store := postgres.New(d.App, d.Projector)
	evs := ordertest.Generate(ordertest.Config{Seed: 38, Tenants: 1, Orders: 12, Customers: 2, Start: time.Now()})
	details := orderview.NewOrderDetails(orderview.OrderDetailsTables{})
	list := orderview.NewOrderList(orderview.OrderListTables{})
	g := groupOf(t, d, store, projections.RunnerConfig{DeadLetters: true, PollInterval: 50 * time.Millisecond}, details, list)
	runGroup(t, ctx, g)
	first, err := projectiontest.Append(ctx, store, evs[:20])
	if err != nil {
		t.Fatal(err)
	}
	names := []string{details.Name(), list.Name()}
	waitFor(t, 20*time.Second, "the group to apply the first events", func() bool { return reached(ctx, t, d, first, names...) })
	inGroup(t, g, 2)
	joined := g.Stats().Joined

	x, err := projections.AcquireExclusive(ctx, d.Projector, list.Name(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var listRunner *projections.Runner
	for _, r := range g.Runners() {
		if r.Name() == list.Name() {
			listRunner = r
		}
	}
	waitFor(t, 5*time.Second, "the member to pause", func() bool { return listRunner.Status().State == projections.StatePaused })
	end, err := projectiontest.Append(ctx, store, evs[20:])
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the other member to go on", func() bool { return reached(ctx, t, d, end, details.Name()) })
	if cp := projectiontest.Checkpoint(ctx, t, d.AdminURL, list.Name()); !cp.Position.Less(end) {
		t.Fatal("the paused member applied events")
	}
	x.Release()
	waitFor(t, 20*time.Second, "the member to resume and catch up", func() bool { return reached(ctx, t, d, end, names...) })
	waitFor(t, 10*time.Second, "the member to rejoin", func() bool { return g.Stats().Joined > joined })
	inGroup(t, g, 2)
}

// TestGroupCatchUpEqualsRunners: the group's CatchUp gives the rows the
// runners give one by one (the benchmark's catch-up uses it).
func TestGroupCatchUpEqualsRunners(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 2*time.Minute)
	d := testdb.New(t, orderview.Migrations)
	store := postgres.New(d.App, d.Projector)
	evs := ordertest.Generate(ordertest.Config{Seed: 39, Tenants: 4, Orders: 60, Customers: 5, Start: time.Now()})
	end, err := projectiontest.Append(ctx, store, evs)
	if err != nil {
		t.Fatal(err)
	}
	g := groupOf(t, d, store, projections.RunnerConfig{BatchSize: 50}, orderview.All()...)
	if err := g.CatchUp(ctx, end); err != nil {
		t.Fatal(err)
	}
	want, err := ordertest.Expected(evs)
	if err != nil {
		t.Fatal(err)
	}
	if got := ordertest.Dump(ctx, t, d.AdminURL, ordertest.Tables()...); got != want {
		t.Errorf("the group's rows differ from the oracle:\n%s", ordertest.Diff(want, got))
	}
	if !reached(ctx, t, d, end, projections.Names(orderview.All())...) {
		t.Error("a checkpoint is short of the end")
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// TestGroupFarBehindCatchesUpAlone: a burst leaves the group two full
// reads behind; its members leave to catch up on sessions of their own (in
// parallel, where one session would apply them one after the other) and
// rejoin at the head, with the oracle's rows.
func TestGroupFarBehindCatchesUpAlone(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 2*time.Minute)
	d := testdb.New(t, orderview.Migrations)
	store := postgres.New(d.App, d.Projector)
	evs := ordertest.Generate(ordertest.Config{Seed: 40, Tenants: 2, Orders: 60, Customers: 3, Start: time.Now()})
	ps := orderview.All()
	g := groupOf(t, d, store, projections.RunnerConfig{BatchSize: 10, CatchUpBatch: 40}, ps...)
	runGroup(t, ctx, g)
	inGroup(t, g, int64(len(ps)))
	// /readyz counts a starting or stopped runner as not connected: moving
	// between the group and a session of its own must not show as either.
	var flapped atomic.Value
	watch, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for watch.Err() == nil {
			for _, r := range g.Runners() {
				if st := r.Status().State; st == projections.StateStarting || st == projections.StateStopped {
					flapped.Store(r.Name() + " " + string(st))
				}
			}
			time.Sleep(200 * time.Microsecond)
		}
	}()
	end, err := projectiontest.Append(ctx, store, evs) // far more than 10 + 40 events
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "every member to reach the end", func() bool { return reached(ctx, t, d, end, projections.Names(ps)...) })
	inGroup(t, g, int64(len(ps)))
	stopWatch()
	<-watched
	if f := flapped.Load(); f != nil {
		t.Errorf("a member showed %s while moving between the group and a session of its own", f)
	}
	if st := g.Stats(); st.Left < int64(len(ps)) || st.Grouped < 2 {
		t.Errorf("stats %+v: want two grouped batches, then every member leaving to catch up", st)
	}
	want, err := ordertest.Expected(evs)
	if err != nil {
		t.Fatal(err)
	}
	if got := ordertest.Dump(ctx, t, d.AdminURL, ordertest.Tables()...); got != want {
		t.Errorf("rows differ from the oracle:\n%s", ordertest.Diff(want, got))
	}
}

// TestGroupStopsEveryMember: when the group's context ends, every member
// reports stopped, those running alone at that moment too.
func TestGroupStopsEveryMember(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, time.Minute)
	d := testdb.New(t, orderview.Migrations)
	store := postgres.New(d.App, d.Projector)
	list := &stuck{OrderList: orderview.NewOrderList(orderview.OrderListTables{}), stream: "order-o-1"}
	details := orderview.NewOrderDetails(orderview.OrderDetailsTables{})
	g := groupOf(t, d, store, projections.RunnerConfig{MinErrorBackoff: 20 * time.Millisecond, MaxErrorBackoff: 50 * time.Millisecond}, details, list)
	evs := ordertest.Generate(ordertest.Config{Seed: 41, Tenants: 1, Orders: 4, Customers: 2, Start: time.Now()})
	if _, err := projectiontest.Append(ctx, store, evs); err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); g.Run(rctx) }()
	var listRunner *projections.Runner
	for _, r := range g.Runners() {
		if r.Name() == list.Name() {
			listRunner = r
		}
	}
	waitFor(t, 20*time.Second, "the stuck member to fail alone", func() bool { return listRunner.Status().State == projections.StateError })
	inGroup(t, g, 1)
	stop()
	<-done
	for _, r := range g.Runners() {
		if s := r.Status().State; s != projections.StateStopped {
			t.Errorf("%s: %s after the group stopped, want stopped", r.Name(), s)
		}
	}
}
