package orderview_test

import (
	"context"
	"flag"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/ordertest"
	"github.com/strata-es/strata/examples/orders/orderview"
	"github.com/strata-es/strata/internal/pgstat"
	"github.com/strata-es/strata/internal/pgtest"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/projections/projectiontest"
)

var (
	catchupEvents  = flag.Int("catchup.events", 5000, "TestCatchUpThroughput: events to seed (at least 200000 for the published figure)")
	catchupBatch   = flag.Int("catchup.batch", 500, "TestCatchUpThroughput: events per projection transaction")
	catchupTenants = flag.Int("catchup.tenants", 8, "TestCatchUpThroughput: tenants the orders are spread over")
	catchupShared  = flag.Bool("catchup.shared", true, "TestCatchUpThroughput: share reads between the runners (projections.SharedReads)")
	catchupOnly    = flag.String("catchup.only", "", "TestCatchUpThroughput: run only this projection")
	catchupPgStat  = flag.Bool("catchup.pgstat", false, "TestCatchUpThroughput: log the statements that took the most server time (pg_stat_statements)")
)

// TestCatchUpThroughput measures catch-up from an empty read side: it
// seeds realistic order histories (several tenants, interleaved) into the
// log of a private cluster, then runs every projection concurrently, each
// from the first event to the head, and reports events per second (events
// in the log divided by the time until the last projection is done). It
// then checks every row against the oracle. Run the published measurement
// with
//
//	go test ./projections -run TestCatchUpThroughput -catchup.events=200000 -v
func TestCatchUpThroughput(t *testing.T) {
	ctx := testCtx(t, 30*time.Minute)
	settings := map[string]string{
		"shared_buffers": "512MB",
		"max_wal_size":   "4GB",
	}
	if *catchupPgStat {
		settings["shared_preload_libraries"] = "pg_stat_statements"
		settings["pg_stat_statements.track"] = "all"
	}
	priv := testdb.NewPrivate(t, settings, orderview.Migrations)
	d := priv.DB
	// About 5.4 events per order; the last histories are cut short, as
	// they would be in a live log.
	nOrders := *catchupEvents/5 + 1
	evs := ordertest.Generate(ordertest.Config{Seed: 2026, Tenants: *catchupTenants, Orders: nOrders, Customers: 500, Open: 200,
		Start: time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC), Spacing: 2 * time.Minute})[:*catchupEvents]
	began := time.Now()
	projectiontest.MustSeed(ctx, t, d.AdminURL, evs, 5000)
	projectiontest.Exec(ctx, t, d.AdminURL, "VACUUM ANALYZE strata.events")
	t.Logf("seeded %d events (%d orders, %d tenants) in %s", len(evs), nOrders, *catchupTenants, time.Since(began).Round(time.Millisecond))

	if *catchupPgStat {
		conn, err := pgx.Connect(ctx, d.AdminURL)
		if err != nil {
			t.Fatal(err)
		}
		err = pgstat.Reset(ctx, conn)
		conn.Close(ctx)
		if err != nil {
			t.Fatal(err)
		}
	}
	store := postgres.New(d.App, d.Projector)
	head := projectiontest.Head(ctx, t, store)
	cpu := pgtest.StartCPU(t, priv.Server.DataDir())
	var wg sync.WaitGroup
	projs := orderview.All()
	if *catchupOnly != "" {
		projs = slices.DeleteFunc(projs, func(p projections.Projection) bool { return p.Name() != *catchupOnly })
	}
	took := make([]time.Duration, len(projs))
	var shared *projections.SharedReads
	if *catchupShared {
		shared = projections.NewSharedReads(store, order.Registry, 0)
	}
	began = time.Now()
	for i, p := range projs {
		r, err := projections.NewRunner(p, store, d.Projector, projections.RunnerConfig{Registry: order.Registry, BatchSize: *catchupBatch, Shared: shared, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.CatchUp(ctx, head); err != nil {
				t.Error(err)
			}
			took[i] = time.Since(began)
		}()
	}
	wg.Wait()
	total := time.Since(began)
	for i, p := range projs {
		t.Logf("  %-17s %8s  %8.0f events/s", p.Name(), took[i].Round(time.Millisecond), float64(len(evs))/took[i].Seconds())
	}
	t.Logf("catch-up, all %d projections concurrently, batch %d: %d events in %s = %.0f events/s",
		len(projs), *catchupBatch, len(evs), total.Round(time.Millisecond), float64(len(evs))/total.Seconds())
	if shared != nil {
		st := shared.Stats()
		t.Logf("shared reads: %d batches read from the log, %d shared", st.Reads, st.Shared)
	}
	cpu.Log(len(evs))

	if *catchupPgStat {
		logTopStatements(ctx, t, d.AdminURL)
	}
	if len(projs) < len(orderview.All()) {
		return
	}
	want, err := ordertest.Expected(evs)
	if err != nil {
		t.Fatal(err)
	}
	if got := ordertest.Dump(ctx, t, d.AdminURL, ordertest.Tables()...); got != want {
		t.Errorf("rows differ from the oracle:\n%s", ordertest.Diff(want, got))
	}
}

// logTopStatements logs where the server spent its time.
func logTopStatements(ctx context.Context, t *testing.T, adminURL string) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	lines, err := pgstat.Top(ctx, conn, 15)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		t.Log(l)
	}
}
