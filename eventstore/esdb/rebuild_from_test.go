package esdb

import (
	"slices"
	"testing"

	"log/slog"
	"strings"
	"time"

	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/ordertest"
	"github.com/strata-es/strata/examples/orders/orderview"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/projections/projectiontest"
	"github.com/strata-es/strata/replay"
)

// TestFakeServerRebuildFrom: `replay rebuild --from` on a deployment whose
// events live in EventStoreDB (the fake here; read models in PostgreSQL).
// It once read PostgreSQL's events table directly and so could not work
// there; it reads the log and the streams through the store port now.
func TestFakeServerRebuildFrom(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	addr := newFakeServer().serve(t, "127.0.0.1:0")
	store := openFake(t, addr, WithIdempotencyStore(&memIdempotency{}))
	d := testdb.New(t, orderview.Migrations)

	evs := ordertest.Generate(ordertest.Config{Seed: 5, Tenants: 2, Orders: 40, Customers: 4, Start: time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)})
	half := len(evs) / 2
	for half < len(evs) && evs[half].Stream == evs[half-1].Stream {
		half++ // cut between streams' appends
	}
	token, err := projectiontest.Append(ctx, store, evs[:half])
	if err != nil {
		t.Fatal(err)
	}
	head, err := projectiontest.Append(ctx, store, evs[half:])
	if err != nil {
		t.Fatal(err)
	}
	p := orderview.NewOrderList(orderview.OrderListTables{})
	quiet := slog.New(slog.DiscardHandler)
	live, err := projections.NewRunner(p, store, d.Projector, projections.RunnerConfig{Registry: order.Registry, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := live.CatchUp(ctx, head); err != nil {
		t.Fatal(err)
	}
	want := projectiontest.Dump(ctx, t, d.AdminURL, p.Tables()...)

	// Damage every row: the streams touched after the token come back
	// re-derived from the log, the others stay damaged.
	projectiontest.Exec(ctx, t, d.AdminURL, `UPDATE strata.order_list SET customer_id = 'damaged'`)
	touched := map[string]bool{} // by an event order_list applies
	for _, e := range evs[half:] {
		if slices.Contains(p.EventTypes(), e.Type) {
			touched[e.Tenant+"|"+strings.TrimPrefix(e.Stream, order.StreamPrefix)] = true
		}
	}
	svc, err := replay.New(replay.Config{Registry: order.Registry, Projections: []projections.Projection{p}, Pool: d.Projector, App: d.App,
		Log: store, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	res, err := svc.Rebuild(ctx, replay.RebuildOptions{Projections: []string{p.Name()}, From: &token})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Projections[0].Streams; got != int64(len(touched)) {
		t.Errorf("re-derived %d streams, want the %d touched after the token", got, len(touched))
	}
	got := projectiontest.Dump(ctx, t, d.AdminURL, p.Tables()...)
	for _, line := range strings.Split(strings.TrimSpace(want), "\n")[1:] {
		f := strings.Split(line, "|")
		restored := strings.Contains(got, line)
		if touched[f[0]+"|"+f[1]] != restored {
			t.Errorf("order %s/%s: touched after the token %v, restored %v", f[0], f[1], touched[f[0]+"|"+f[1]], restored)
		}
	}
}
