package replay_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/orderview"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/replay"
)

// droppingLog is the defect peers shipped: a log reader that loses one
// event (here the last event of a stream, so that no per-stream version
// check downstream can notice). A runner reading through it advances its
// checkpoint over the event without counting it.
type droppingLog struct {
	*postgres.Store
	drop string // event ID
}

func (l droppingLog) ReadAll(ctx context.Context, after event.Position, limit int) ([]event.Record, error) {
	recs, err := l.Store.ReadAll(ctx, after, limit)
	out := recs[:0:0]
	for _, r := range recs {
		if r.ID != l.drop {
			out = append(out, r)
		}
	}
	return out, err
}

func catchUp(ctx context.Context, t *testing.T, b *bundle, log eventstore.Log, p projections.Projection, until event.Position) {
	t.Helper()
	r, err := projections.NewRunner(p, log, b.d.Projector, projections.RunnerConfig{Registry: order.Registry, BatchSize: 97, Logger: quiet(), DeadLetters: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.CatchUp(ctx, until); err != nil {
		t.Fatal(err)
	}
}

func verdictsOf(ctx context.Context, t *testing.T, b *bundle, o replay.VerifyOptions) map[string]replay.Verdict {
	t.Helper()
	vs, err := b.svc.Verify(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]replay.Verdict{}
	for _, v := range vs {
		out[v.Projection+"/"+v.Tenant] = v
	}
	return out
}

// TestVerifyCompleteAndSkipped: on a healthy system every projection and
// tenant is complete and the ledger's figures add up to the store's; a
// runner whose reader lost one event, and a checkpoint moved past events
// whose effects never committed (the chaos_broken defect), are each caught
// and the missing event named.
func TestVerifyCompleteAndSkipped(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	d := testdb.New(t, orderview.Migrations)
	b := newBundle(t, d)
	tenants := []string{"acme", "globex", "initech"}
	hs := genHistories(19, tenants, 1500, time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	head := appendAll(ctx, t, b.store, hs)

	all := orderview.All()
	healthy, lossy := all[0], all[1]
	catchUp(ctx, t, b, b.store, healthy, head)

	// The lossy runner loses the last event of one order, in the middle of
	// the log (so marks lie on both sides of it).
	mid := hs[len(hs)/2]
	recs, err := b.store.ReadStream(ctx, mid.tenant, order.StreamID(mid.id), 0)
	if err != nil || len(recs) == 0 {
		t.Fatal(err, len(recs))
	}
	lost := recs[len(recs)-1]
	catchUp(ctx, t, b, droppingLog{b.store, lost.ID}, lossy, head)

	vs := verdictsOf(ctx, t, b, replay.VerifyOptions{Projections: []string{healthy.Name(), lossy.Name()}})
	var total int64
	for _, tenant := range tenants {
		v, ok := vs[healthy.Name()+"/"+tenant]
		if !ok || !v.Complete || v.Problem != "" {
			t.Fatalf("%s/%s: want complete, got %+v", healthy.Name(), tenant, v)
		}
		if v.StoreEvents != v.LedgerEvents || v.Applied+v.Parked+v.Skipped != v.LedgerEvents || v.Applied == 0 {
			t.Fatalf("%s/%s: figures do not add up: %+v", healthy.Name(), tenant, v)
		}
		total += v.StoreEvents
	}
	if total < 3*projections.LedgerMarkEvery {
		t.Fatalf("only %d events: the test needs several marks per tenant", total)
	}
	bad := vs[lossy.Name()+"/"+mid.tenant]
	if bad.Complete || bad.Problem != "missing" || bad.Event == nil || bad.Event.ID != lost.ID {
		t.Fatalf("lossy runner: want event %s missing, got %+v (event %+v)", lost.ID, bad, bad.Event)
	}
	t.Logf("caught: %s tenant %s: %s event %s (%s v%d) after %s", bad.Projection, bad.Tenant, bad.Problem, bad.Event.ID, bad.Event.Stream, bad.Event.Version, bad.After)
	// For one tenant the log is read through its index by tenant
	// (eventstore.TenantLog): the same verdict, found without the others.
	one := verdictsOf(ctx, t, b, replay.VerifyOptions{Projections: []string{lossy.Name()}, Tenant: mid.tenant})[lossy.Name()+"/"+mid.tenant]
	if one.Complete || one.Problem != bad.Problem || one.Event == nil || one.Event.ID != bad.Event.ID || one.After != bad.After ||
		one.StoreEvents != bad.StoreEvents {
		t.Fatalf("verify --tenant %s: %+v, want the all-tenant verdict %+v", mid.tenant, one, bad)
	}
	for _, tenant := range tenants {
		if tenant != mid.tenant && !vs[lossy.Name()+"/"+tenant].Complete {
			t.Fatalf("tenant %s was not touched by the loss: %+v", tenant, vs[lossy.Name()+"/"+tenant])
		}
	}

	// The chaos_broken defect: the checkpoint commits on its own, past a
	// batch whose writes (and ledger) never committed.
	more := genHistories(23, tenants[:1], 20, time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC))
	for i := range more {
		more[i].id = fmt.Sprintf("late%03d", i)
		for j, e := range more[i].events {
			more[i].events[j] = renameOrder(e, more[i].id)
		}
	}
	first := lastPosition(ctx, t, b)
	newHead := appendAll(ctx, t, b.store, more)
	adminExec(ctx, t, d.AdminURL, fmt.Sprintf(`UPDATE strata.projection_checkpoints SET pos_major = %d, pos_minor = %d WHERE projection = '%s'`,
		newHead.Major, newHead.Minor, healthy.Name()))
	after, err := b.store.ReadAll(ctx, first, 1)
	if err != nil || len(after) != 1 {
		t.Fatal(err)
	}
	vs = verdictsOf(ctx, t, b, replay.VerifyOptions{Projections: []string{healthy.Name()}, Tenant: tenants[0]})
	v := vs[healthy.Name()+"/"+tenants[0]]
	if v.Complete || v.Problem != "missing" || v.Event == nil || v.Event.ID != after[0].ID {
		t.Fatalf("checkpoint moved alone: want the first event after %s (%s) missing, got %+v (event %+v)", first, after[0].ID, v, v.Event)
	}
}

// renameOrder points an order event at another order ID.
func renameOrder(e event.Payload, id string) event.Payload {
	switch x := e.(type) {
	case order.Created:
		x.OrderID = id
		return x
	case order.LineAdded:
		x.OrderID = id
		return x
	case order.LineRemoved:
		x.OrderID = id
		return x
	case order.Placed:
		x.OrderID = id
		return x
	case order.Paid:
		x.OrderID = id
		return x
	case order.Cancelled:
		x.OrderID = id
		return x
	}
	return e
}

// TestVerifyDeep: rebuilt into shadow tables at the live checkpoint, the
// rows of a healthy projection equal the live ones; a live row changed
// behind the projection's back is named with both versions; the live
// tables are untouched and the shadow is gone afterwards.
func TestVerifyDeep(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	d := testdb.New(t, orderview.Migrations)
	b := newBundle(t, d)
	hs := genHistories(7, []string{"acme", "globex"}, 200, time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	head := appendAll(ctx, t, b.store, hs)
	p := orderview.All()[1] // order_list
	catchUp(ctx, t, b, b.store, p, head)
	before := dumpTables(ctx, t, d.AdminURL, liveTables(p))

	vs, err := b.svc.VerifyDeep(ctx, replay.VerifyOptions{Projections: []string{p.Name()}})
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 1 || !vs[0].Equal || vs[0].Rows != 200 || vs[0].Differing != 0 || vs[0].Checkpoint != head.String() {
		t.Fatalf("healthy: %+v", vs)
	}

	adminExec(ctx, t, d.AdminURL, `UPDATE strata.order_list SET status = 'paid' WHERE tenant_id = 'globex' AND order_id = 'o00001'`)
	changed := dumpTables(ctx, t, d.AdminURL, liveTables(p))
	vs, err = b.svc.VerifyDeep(ctx, replay.VerifyOptions{Projections: []string{p.Name()}, Tenant: "globex"})
	if err != nil {
		t.Fatal(err)
	}
	f := vs[0].First
	if vs[0].Equal || vs[0].Differing != 2 || f == nil || f.Table != "order_list" || f.Tenant != "globex" ||
		!strings.Contains(f.Key, `"o00001"`) || !strings.Contains(f.Live, `"paid"`) || strings.Contains(f.Rebuilt, `"paid"`) || f.Rebuilt == "" {
		t.Fatalf("tampered row: %+v first %+v", vs[0], f)
	}
	t.Logf("first differing row: %s %s key %s\n  live    %s\n  rebuilt %s", f.Table, f.Tenant, f.Key, f.Live, f.Rebuilt)
	if after := dumpTables(ctx, t, d.AdminURL, liveTables(p)); after != changed || after == before {
		t.Fatal("deep verify changed the live tables")
	}
	var shadows int
	conn := adminConn(ctx, t, d.AdminURL)
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'strata' AND tablename LIKE '%rebuild%'`).Scan(&shadows); err != nil || shadows != 0 {
		t.Fatalf("shadow tables left: %d %v", shadows, err)
	}
	if cp := checkpoint(ctx, t, b, p.Name()+"__rebuild"); cp.Projection != "" {
		t.Fatalf("shadow checkpoint left: %+v", cp)
	}
}

// TestVerifyWhileARunnerCommits: a runner that commits between verify's
// read of its checkpoint and of its ledger row must not make the ledger
// look ahead of the log ("extra"). The race is forced: verify is held on
// the ledger marks of the first projection (a lock the runner does not
// need, its batch passing no mark) while the second projection's runner
// applies new events and commits; verify then reads that runner's ledger.
func TestVerifyWhileARunnerCommits(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	d := testdb.New(t, orderview.Migrations)
	b := newBundle(t, d)
	all := orderview.All()
	first, second := all[0], all[1]
	head := appendAll(ctx, t, b.store, genHistories(29, []string{"acme"}, 10, time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)))
	catchUp(ctx, t, b, b.store, first, head)
	catchUp(ctx, t, b, b.store, second, head)

	more := genHistories(31, []string{"acme"}, 1, time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC))
	more[0].id = "late001"
	for j, e := range more[0].events {
		more[0].events[j] = renameOrder(e, more[0].id)
	}
	// Appended before the lock is taken: the lock's transaction holds the
	// log's horizon (it has a transaction ID), and these must be visible.
	newHead := appendAll(ctx, t, b.store, more)

	admin := adminConn(ctx, t, d.AdminURL)
	hold, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // released below
	if _, err := hold.Exec(ctx, `LOCK TABLE projection_ledger_marks IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	type result struct {
		vs  []replay.Verdict
		err error
	}
	done := make(chan result, 1)
	go func() {
		vs, err := b.svc.Verify(ctx, replay.VerifyOptions{Projections: []string{first.Name(), second.Name()}, Tenant: "acme"})
		done <- result{vs, err}
	}()
	watch := adminConn(ctx, t, d.AdminURL)
	waitFor(t, 30*time.Second, "verify waiting for the ledger marks", func() bool {
		var n int
		err := watch.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'strata.projection_ledger_marks'::regclass`).Scan(&n)
		return err == nil && n > 0
	})
	catchUp(ctx, t, b, b.store, second, newHead)
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	if len(res.vs) != 2 {
		t.Fatalf("want 2 verdicts, got %+v", res.vs)
	}
	for _, v := range res.vs {
		if !v.Complete || v.StoreEvents != v.LedgerEvents {
			t.Fatalf("%s: a runner's commit during verify made it %q (store %d, ledger %d events)", v.Projection, v.Problem, v.StoreEvents, v.LedgerEvents)
		}
	}
}
