package projections_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/ordertest"
	"github.com/strata-es/strata/examples/orders/orderview"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/projections/projectiontest"
	"github.com/strata-es/strata/replay"
)

// projector is one projector process of a test: its share and a runner
// per partition of one projection, run until stopped.
type projector struct {
	share   *projections.Share
	runners []*projections.Runner
	stop    context.CancelFunc
	done    sync.WaitGroup
}

func startProjector(ctx context.Context, t *testing.T, d *testdb.DB, store *postgres.Store, p projections.Projection, count int, cfg projections.RunnerConfig) *projector {
	t.Helper()
	pr := &projector{share: projections.NewShare(d.Projector, quietLogger())}
	cfg.Registry, cfg.Share, cfg.Logger = order.Registry, pr.share, quietLogger()
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	cfg.LeaseRetry = 50 * time.Millisecond
	for i := range count {
		cfg.Partition = eventstore.Partition{Index: i, Count: count}
		r, err := projections.NewRunner(p, store, d.Projector, cfg)
		if err != nil {
			t.Fatal(err)
		}
		pr.runners = append(pr.runners, r)
	}
	rctx, stop := context.WithCancel(ctx)
	pr.stop = stop
	pr.done.Add(1)
	go func() { defer pr.done.Done(); pr.share.Run(rctx) }()
	<-pr.share.Counted()
	for _, r := range pr.runners {
		pr.done.Add(1)
		go func() { defer pr.done.Done(); r.Run(rctx) }()
	}
	t.Cleanup(pr.close)
	return pr
}

func (pr *projector) close() { pr.stop(); pr.done.Wait() }

// running counts the runners applying their partition.
func (pr *projector) running() int {
	n := 0
	for _, r := range pr.runners {
		if r.Status().State == projections.StateRunning {
			n++
		}
	}
	return n
}

// TestPartitionsShareTheWorkAndSplitOffTheProjection (issue 35 §5): a
// projection that ran whole is split into 4 partitions when a projector
// process runs it so: each partition starts where the projection stood and
// its row is left as split. A second process joins and takes half the
// partitions; it leaves and the first takes them back; then a full rebuild
// replaces the partitions, which split off the rebuilt row again. Events
// keep arriving throughout; the rows equal the oracle's, every ledger
// (the whole projection's up to the split, each partition's from it)
// agrees with the log, and a read-your-writes wait holds until every
// partition has applied the position.
func TestPartitionsShareTheWorkAndSplitOffTheProjection(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 3*time.Minute)
	d := testdb.New(t, orderview.Migrations)
	if _, err := db.EnablePartitionLog(ctx, d.AdminURL); err != nil {
		t.Fatal(err)
	}
	store := postgres.New(d.App, d.Projector)
	details := orderview.NewOrderDetails(orderview.OrderDetailsTables{})
	name := details.Name()
	evs := ordertest.Generate(ordertest.Config{Seed: 51, Tenants: 3, Orders: 120, Customers: 6, Start: time.Now()})
	parts := splitEvents(evs, 5)
	consistency := projections.NewConsistency(d.App, nil)

	// The projection runs whole first.
	split, err := projectiontest.Append(ctx, store, parts[0])
	if err != nil {
		t.Fatal(err)
	}
	whole, err := projections.NewRunner(details, store, d.Projector, projections.RunnerConfig{Registry: order.Registry, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := whole.CatchUp(ctx, split); err != nil {
		t.Fatal(err)
	}

	// One partition catching up alone splits the projection: every
	// partition starts at its checkpoint, and a wait for a later position
	// holds while the three others have not moved.
	end, err := projectiontest.Append(ctx, store, parts[1])
	if err != nil {
		t.Fatal(err)
	}
	first, err := projections.NewRunner(details, store, d.Projector, projections.RunnerConfig{Registry: order.Registry, Logger: quietLogger(),
		Partition: eventstore.Partition{Index: 0, Count: 4}})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.CatchUp(ctx, end); err != nil {
		t.Fatal(err)
	}
	cp := projectiontest.Checkpoint(ctx, t, d.AdminURL, name)
	if cp.Status != projections.StateSplit || cp.Position != split {
		t.Fatalf("%s after the split: %s at %s, want split at %s", name, cp.Status, cp.Position, split)
	}
	for i := range 4 {
		key := projections.PartitionKey(name, eventstore.Partition{Index: i, Count: 4})
		pc := projectiontest.Checkpoint(ctx, t, d.AdminURL, key)
		if pc.Partition == nil || pc.Partition.From != name || pc.Partition.At != split.Token() || pc.Partition.Index != i {
			t.Fatalf("%s: partition %+v, want split off %s at %s", key, pc.Partition, name, split.Token())
		}
		if i > 0 && pc.Position != split {
			t.Fatalf("%s starts at %s, want the split's %s", key, pc.Position, split)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err = consistency.WaitFor(wctx, end, name)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a wait for %s with three partitions behind ended with %v, want a timeout", end, err)
	}

	// One process runs every partition.
	a := startProjector(ctx, t, d, store, details, 4, projections.RunnerConfig{DeadLetters: true})
	waitCaughtUp(ctx, t, consistency, end, name)
	waitFor(t, 20*time.Second, "the first process to hold every partition", func() bool { return a.share.Held(name) == 4 })

	// A second process joins: each ends up with two.
	b := startProjector(ctx, t, d, store, details, 4, projections.RunnerConfig{DeadLetters: true})
	for _, batch := range splitEvents(parts[2], 6) {
		if end, err = projectiontest.Append(ctx, store, batch); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitFor(t, 20*time.Second, "two partitions in each process", func() bool {
		return a.share.Held(name) == 2 && b.share.Held(name) == 2 && a.running() == 2 && b.running() == 2
	})
	waitCaughtUp(ctx, t, consistency, end, name)
	if a.share.Members() != 2 {
		t.Errorf("the first process counts %d members, want 2", a.share.Members())
	}

	// The second leaves; the first takes its partitions back.
	b.close()
	if end, err = projectiontest.Append(ctx, store, parts[3]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the first process to hold every partition again", func() bool { return a.share.Held(name) == 4 && a.running() == 4 })
	waitCaughtUp(ctx, t, consistency, end, name)
	verifyLedgers(ctx, t, d, store, details)

	// A full rebuild replaces the partitions by its row; they split off it.
	svc, err := replay.New(replay.Config{Registry: order.Registry, Pool: d.Projector, App: d.App, Log: store,
		Projections: []projections.Projection{details}, Logger: quietLogger(), Runner: projections.RunnerConfig{Registry: order.Registry}})
	if err != nil {
		t.Fatal(err)
	}
	from := split
	if _, err := svc.Rebuild(ctx, replay.RebuildOptions{Projections: []string{name}, From: &from}); !errors.Is(err, replay.ErrInvalid) {
		t.Errorf("a rebuild --from of a partitioned projection: %v, want ErrInvalid", err)
	}
	// One tenant's rebuild: every partition brought to the swap's
	// position, the tenant's rows replaced, each partition's ledger of the
	// tenant counted again.
	projectiontest.Exec(ctx, t, d.AdminURL, `DELETE FROM strata.order_detail_lines WHERE tenant_id = 't-1'`)
	if _, err := svc.Rebuild(ctx, replay.RebuildOptions{Projections: []string{name}, Tenant: "t-1"}); err != nil {
		t.Fatalf("a one-tenant rebuild of a partitioned projection: %v", err)
	}
	wantSoFar, err := ordertest.Expected(evs[:len(parts[0])+len(parts[1])+len(parts[2])+len(parts[3])])
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "every partition to run again", func() bool { return a.running() == 4 })
	if got, want := ordertest.Dump(ctx, t, d.AdminURL, details.Tables()...), sections(wantSoFar, details.Tables()); got != want {
		t.Errorf("rows after the tenant's rebuild differ from the oracle:\n%s", ordertest.Diff(want, got))
	}
	verifyLedgers(ctx, t, d, store, details)

	res, err := svc.Rebuild(ctx, replay.RebuildOptions{Projections: []string{name}})
	if err != nil {
		t.Fatal(err)
	}
	if end, err = projectiontest.Append(ctx, store, parts[4]); err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(ctx, t, consistency, end, name)
	if cp := projectiontest.Checkpoint(ctx, t, d.AdminURL, name); cp.Status != projections.StateSplit || cp.Position != res.Projections[0].Checkpoint {
		t.Errorf("%s after the rebuild: %s at %s, want split at the rebuild's %s", name, cp.Status, cp.Position, res.Projections[0].Checkpoint)
	}
	want, err := ordertest.Expected(evs)
	if err != nil {
		t.Fatal(err)
	}
	wantTables := sections(want, details.Tables())
	if got := ordertest.Dump(ctx, t, d.AdminURL, details.Tables()...); got != wantTables {
		t.Errorf("the partitions' rows differ from the oracle:\n%s", ordertest.Diff(wantTables, got))
	}
	verifyLedgers(ctx, t, d, store, details)
	vs, err := svc.Verify(ctx, replay.VerifyOptions{Projections: []string{name}})
	if err != nil {
		t.Fatal(err)
	}
	checked := map[string]bool{}
	for _, v := range vs {
		checked[v.Projection] = true
	}
	for i := range 4 {
		if key := projections.PartitionKey(name, eventstore.Partition{Index: i, Count: 4}); !checked[key] {
			t.Errorf("verify of %s did not check partition %s (checked %v)", name, key, checked)
		}
	}

	// Going back to fewer partitions would merge them: refused.
	two, err := projections.NewRunner(details, store, d.Projector, projections.RunnerConfig{Registry: order.Registry, Logger: quietLogger(),
		Partition: eventstore.Partition{Index: 1, Count: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if err := two.CatchUp(ctx, event.Position{}); !errors.Is(err, projections.ErrMergePartitions) {
		t.Errorf("a runner of 2 partitions where 4 run: %v, want ErrMergePartitions", err)
	}
}

// TestPartitionParksAndRetriesItsStream: a poison event parks its stream
// in its partition, under the partition's key and generation; the dead
// letter is listed under the projection's name, and a retry (the
// partition's runner paused meanwhile) applies it once the cause is gone.
func TestPartitionParksAndRetriesItsStream(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 2*time.Minute)
	d := testdb.New(t, orderview.Migrations)
	if _, err := db.EnablePartitionLog(ctx, d.AdminURL); err != nil {
		t.Fatal(err)
	}
	store := postgres.New(d.App, d.Projector)
	evs := ordertest.Generate(ordertest.Config{Seed: 52, Tenants: 2, Orders: 30, Customers: 3, Start: time.Now()})
	victim := evs[len(evs)/2]
	list := &curable{OrderList: orderview.NewOrderList(orderview.OrderListTables{}), tenant: victim.Tenant, stream: victim.Stream, cured: &atomic.Bool{}}
	name := list.Name()
	a := startProjector(ctx, t, d, store, list, 2, projections.RunnerConfig{DeadLetters: true, Failures: projections.FailurePolicy{Attempts: 1}})
	consistency := projections.NewConsistency(d.App, nil)
	end, err := projectiontest.Append(ctx, store, evs)
	if err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(ctx, t, consistency, end, name)
	part := eventstore.Partition{Index: eventstore.BucketOf(victim.Tenant, victim.Stream) % 2, Count: 2}
	key := projections.PartitionKey(name, part)
	if cp := projectiontest.Checkpoint(ctx, t, d.AdminURL, key); cp.ParkedStreams != 1 {
		t.Fatalf("%s parked %d streams, want 1", key, cp.ParkedStreams)
	}
	svc, err := replay.New(replay.Config{Registry: order.Registry, Pool: d.Projector, App: d.App, Log: store,
		Projections: []projections.Projection{list}, Logger: quietLogger(),
		// The rebuild parks as the live runner does: for an operator, with
		// no automatic retry that could unpark the stream before ours.
		Runner: projections.RunnerConfig{Registry: order.Registry, Failures: projections.FailurePolicy{Attempts: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	letters, err := svc.DeadLetters(ctx, replay.ListOptions{Projections: []string{name}})
	if err != nil {
		t.Fatal(err)
	}
	if len(letters) == 0 || !letters[0].Head {
		t.Fatalf("dead letters of %s: %d, want the victim stream's, its head first", name, len(letters))
	}
	for _, l := range letters {
		if l.Projection != key || l.Event.Stream != victim.Stream {
			t.Fatalf("dead letter %d: %s of %s, want the victim's %s under %s", l.ID, l.Projection, l.Event.Stream, victim.Stream, key)
		}
	}
	// A rebuild of the victim's tenant parks the stream again, in the
	// rebuild; the swap hands its letters to the partition.
	if _, err := svc.Rebuild(ctx, replay.RebuildOptions{Projections: []string{name}, Tenant: victim.Tenant}); err != nil {
		t.Fatal(err)
	}
	cp := projectiontest.Checkpoint(ctx, t, d.AdminURL, key)
	if cp.ParkedStreams != 1 {
		t.Fatalf("%s parks %d streams after the tenant's rebuild, want 1", key, cp.ParkedStreams)
	}
	letters, err = svc.DeadLetters(ctx, replay.ListOptions{Projections: []string{name}})
	if err != nil {
		t.Fatal(err)
	}
	if len(letters) == 0 || letters[0].Projection != key || letters[0].Generation != cp.Generation || !letters[0].Head {
		t.Fatalf("dead letters after the tenant's rebuild: %+v, want the victim's under %s, generation %s", letters, key, cp.Generation)
	}
	verifyLedgers(ctx, t, d, store, list)
	list.cured.Store(true)
	report, err := svc.Retry(ctx, replay.RetrySpec{ID: letters[0].ID, Tenant: victim.Tenant, Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if report.Applied() == 0 {
		t.Fatalf("retry applied nothing: %+v", report)
	}
	if cp := projectiontest.Checkpoint(ctx, t, d.AdminURL, key); cp.ParkedStreams != 0 {
		t.Errorf("%s still parks %d streams after the retry", key, cp.ParkedStreams)
	}
	waitFor(t, 20*time.Second, "both partitions to run again", func() bool { return a.running() == 2 })
	want, err := ordertest.Expected(evs)
	if err != nil {
		t.Fatal(err)
	}
	wantTables := sections(want, list.Tables())
	if got := ordertest.Dump(ctx, t, d.AdminURL, list.Tables()...); got != wantTables {
		t.Errorf("rows after the retry differ from the oracle:\n%s", ordertest.Diff(wantTables, got))
	}
	verifyLedgers(ctx, t, d, store, list)
}

// curable fails every event of one stream until cured, also in a
// rebuild's shadow tables.
type curable struct {
	*orderview.OrderList
	tenant, stream string
	cured          *atomic.Bool
}

func (p *curable) WithTables(rename map[string]string) projections.Projection {
	return &curable{OrderList: p.OrderList.WithTables(rename).(*orderview.OrderList), tenant: p.tenant, stream: p.stream, cured: p.cured}
}

func (p *curable) Apply(b *pgx.Batch, ev projections.Event) error {
	if ev.Tenant == p.tenant && ev.Stream == p.stream && !p.cured.Load() {
		return errors.New("the stream cannot be applied yet")
	}
	return p.OrderList.Apply(b, ev)
}

func (p *curable) ApplyBatch(b *pgx.Batch, evs []projections.Event) error {
	for _, ev := range evs {
		if err := p.Apply(b, ev); err != nil {
			return err
		}
	}
	return nil
}

// splitEvents cuts evs into n runs of about equal length.
func splitEvents(evs []projectiontest.Recorded, n int) [][]projectiontest.Recorded {
	var out [][]projectiontest.Recorded
	for i := range n {
		out = append(out, evs[i*len(evs)/n:(i+1)*len(evs)/n])
	}
	return out
}

// waitCaughtUp waits until every partition of name has applied end.
func waitCaughtUp(ctx context.Context, t *testing.T, c *projections.Consistency, end event.Position, name string) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.WaitFor(wctx, end, name); err != nil {
		t.Fatalf("%s did not reach %s: %v", name, end, err)
	}
}

// longNamed is a partitionable projection whose name leaves no room for a
// partition's suffix in a checkpoint key.
type longNamed struct{ *orderview.OrderList }

func (longNamed) Name() string { return "order_list_with_a_name_long_enough_to_fill_a_checkpoint_key" }

// TestPartitionKeyTooLong: a partition whose checkpoint key would pass 63
// bytes is refused when the runner is made, not at its first checkpoint.
func TestPartitionKeyTooLong(t *testing.T) {
	p := longNamed{orderview.NewOrderList(orderview.OrderListTables{})}
	_, err := projections.NewRunner(p, postgres.New(nil, nil), nil, projections.RunnerConfig{Registry: order.Registry,
		Partition: eventstore.Partition{Index: 0, Count: 2}})
	if err == nil || !strings.Contains(err.Error(), "longer than 63 bytes") {
		t.Fatalf("a partition key of %d bytes: %v", len(projections.PartitionKey(p.Name(), eventstore.Partition{Index: 0, Count: 2})), err)
	}
}
