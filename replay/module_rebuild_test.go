package replay_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples"
	"github.com/strata-es/strata/examples/inventory/stock"
	"github.com/strata-es/strata/examples/inventory/stockview"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/projections/projectiontest"
	"github.com/strata-es/strata/replay"
)

// TestRebuildOfAnotherModulesProjection: a rebuild of a projection whose
// events are not order events keeps every row. The log interleaves both
// modules' events; the service's one registry must reach the rebuild's
// runners (they once fell back to the order registry, parked every
// inventory event as "unknown event type" and swapped in an empty table).
func TestRebuildOfAnotherModulesProjection(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 2*time.Minute)
	mods := examples.All()
	reg := mods.MustRegistry()
	d := testdb.New(t, mods.Lines()...)
	store := postgres.New(d.App, d.Projector)
	start := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	orderHistories := genHistories(11, []string{"t-a", "t-b"}, 40, start)
	appendAll(ctx, t, store, orderHistories[:20])
	var head event.Position
	for i := range 12 {
		tenant, sku := []string{"t-a", "t-b"}[i%2], fmt.Sprintf("sku-%d", i)
		at := start.Add(time.Duration(i) * time.Minute)
		head = appendWith(ctx, t, store, reg, tenant, stock.StreamID(sku), 0,
			stock.Received{SKU: sku, Quantity: int64(10 + i), At: at},
			stock.Reserved{SKU: sku, ReservationID: "r-1", Quantity: 3, At: at},
			stock.Committed{SKU: sku, ReservationID: "r-1", Quantity: 3, At: at})
	}
	appendAll(ctx, t, store, orderHistories[20:]) // and orders after them
	p := stockview.NewItems(stockview.ItemsTables{})
	live, err := projections.NewRunner(p, store, d.Projector, projections.RunnerConfig{Registry: reg, DeadLetters: true, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := live.CatchUp(ctx, head); err != nil {
		t.Fatal(err)
	}
	before := projectiontest.Dump(ctx, t, d.AdminURL, p.Tables()...)
	if n := len(splitLines(before)); n != 12+2 {
		t.Fatalf("the live projection holds %d lines, want 12 rows:\n%s", n, before)
	}

	// The service as strata builds it: every module's projections and one
	// registry; the runner settings leave the registry unset.
	svc, err := replay.New(replay.Config{Registry: reg, Projections: mods.Projections(), Pool: d.Projector, App: d.App, Log: store,
		Logger: quiet(), Runner: projections.RunnerConfig{BatchSize: 50}, YieldTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Rebuild(ctx, replay.RebuildOptions{Projections: []string{p.Name()}}); err != nil {
		t.Fatal(err)
	}
	if after := projectiontest.Dump(ctx, t, d.AdminURL, p.Tables()...); after != before {
		t.Fatalf("the rebuild changed the rows:\n%s", projectiontest.Diff(before, after))
	}
	var parked int
	if err := adminConn(ctx, t, d.AdminURL).QueryRow(ctx, `SELECT count(*) FROM strata.dead_letters`).Scan(&parked); err != nil {
		t.Fatal(err)
	}
	if parked != 0 {
		t.Fatalf("the rebuild parked %d events", parked)
	}
}

// TestRebuildRefusesUndecodableEvents: a service (or a runner) given a
// registry without the codecs of a projection's events refuses to start,
// before any shadow table exists or any swap: an unknown event type is an
// error of the process, never events silently dropped from a rebuilt table.
func TestRebuildRefusesUndecodableEvents(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, examples.All().Lines()...)
	store := postgres.New(d.App, d.Projector)
	p := stockview.NewItems(stockview.ItemsTables{})
	_, err := replay.New(replay.Config{Registry: order.Registry, Projections: []projections.Projection{p}, Pool: d.Projector, App: d.App,
		Log: store, Logger: quiet()})
	if !errors.Is(err, event.ErrUnknownType) {
		t.Fatalf("replay.New with a registry lacking inventory events: %v, want ErrUnknownType", err)
	}
	if _, err := projections.NewRunner(p, store, d.Projector, projections.RunnerConfig{Registry: order.Registry}); !errors.Is(err, event.ErrUnknownType) {
		t.Fatalf("NewRunner with a registry lacking inventory events: %v, want ErrUnknownType", err)
	}
}
