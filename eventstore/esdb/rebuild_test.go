package esdb

import (
	"log/slog"
	"testing"
	"time"

	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/ordertest"
	"github.com/strata-es/strata/examples/orders/orderview"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/projections/projectiontest"
	"github.com/strata-es/strata/replay"
)

// TestFakeServerRebuilds: a full rebuild and a tenant's rebuild on a
// deployment whose events live in EventStoreDB (the fake; read models in
// PostgreSQL). The full rebuild folds every projection of the orders
// module (projections.Folder) from the store's $all subscription; the
// tenant's reads that tenant's events through the server-filtered
// subscription (ReadTenant). Both give back the rows the live runners made,
// and the ledgers verify.
func TestFakeServerRebuilds(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	addr := newFakeServer().serve(t, "127.0.0.1:0")
	store := openFake(t, addr, WithIdempotencyStore(&memIdempotency{}))
	d := testdb.New(t, orderview.Migrations)
	evs := ordertest.Generate(ordertest.Config{Seed: 9, Tenants: 3, Orders: 60, Customers: 5, Start: time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)})
	head, err := projectiontest.Append(ctx, store, evs)
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	ps := orderview.All()
	var tables []string
	for _, p := range ps {
		live, err := projections.NewRunner(p, store, d.Projector, projections.RunnerConfig{Registry: order.Registry, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		if err := live.CatchUp(ctx, head); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, p.Tables()...)
	}
	want := projectiontest.Dump(ctx, t, d.AdminURL, tables...)
	svc, err := replay.New(replay.Config{Registry: order.Registry, Projections: ps, Pool: d.Projector, App: d.App, Log: store, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	verify := func(what string, o replay.VerifyOptions) {
		t.Helper()
		verdicts, err := svc.Verify(ctx, o)
		if err != nil {
			t.Fatalf("%s: verify: %v", what, err)
		}
		if len(verdicts) == 0 {
			t.Fatalf("%s: verify gave no verdict", what)
		}
		for _, v := range verdicts {
			if !v.Complete {
				t.Errorf("%s: verify %s of %s: %+v", what, v.Projection, v.Tenant, v)
			}
		}
	}

	projectiontest.Exec(ctx, t, d.AdminURL, `UPDATE strata.order_list SET customer_id = 'damaged'`, `DELETE FROM strata.order_details`)
	res, err := svc.Rebuild(ctx, replay.RebuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Projections {
		if r.Folded != r.Events || r.Events == 0 {
			t.Errorf("%s: folded %d of %d events (%v)", r.Name, r.Folded, r.Events, r.Notes)
		}
	}
	if got := projectiontest.Dump(ctx, t, d.AdminURL, tables...); got != want {
		t.Errorf("folded rebuild on EventStoreDB differs from the live rows:\n%s", projectiontest.Diff(want, got))
	}
	verify("after the full rebuild", replay.VerifyOptions{})

	tenant := evs[0].Tenant
	projectiontest.Exec(ctx, t, d.AdminURL, `UPDATE strata.order_list SET customer_id = 'damaged' WHERE tenant_id = '`+tenant+`'`)
	res, err = svc.Rebuild(ctx, replay.RebuildOptions{Projections: []string{orderview.OrderListName}, Tenant: tenant})
	if err != nil {
		t.Fatal(err)
	}
	if got := projectiontest.Dump(ctx, t, d.AdminURL, tables...); got != want {
		t.Errorf("tenant rebuild on EventStoreDB differs from the live rows:\n%s", projectiontest.Diff(want, got))
	}
	var tenantEvents int64
	for _, e := range evs {
		if e.Tenant == tenant {
			tenantEvents++
		}
	}
	if r := res.Projections[0]; r.Events != tenantEvents {
		t.Errorf("the tenant's rebuild read %d events, the tenant has %d (the others' must not be read)", r.Events, tenantEvents)
	}
	verify("the tenant", replay.VerifyOptions{Tenant: tenant})
}
