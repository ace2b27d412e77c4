package replay_test

import (
	"flag"
	"fmt"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/orderview"
	"github.com/strata-es/strata/internal/pgtest"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/replay"
)

var (
	rebuildEvents = flag.Int("rebuild.events", 4000, "TestRebuildThroughput: events to seed (1000000 for the published figure)")
	rebuildBatch  = flag.Int("rebuild.batch", 5000, "TestRebuildThroughput: events per rebuild transaction")
	rebuildOnly   = flag.String("rebuild.only", "", "TestRebuildThroughput: rebuild only this projection")
)

// TestRebuildThroughput measures `rebuild --all` over a seeded log on a
// private cluster: events of the log per second, from the start of the
// rebuild to the last swap (all four projections built concurrently into
// shadow tables, deferred indexes built, swapped), and the CPU it took.
// The published figure comes from
//
//	go test ./replay -run TestRebuildThroughput -rebuild.events=1000000 -v -timeout 30m
//
// For small logs it also checks the result against a fresh rebuild.
func TestRebuildThroughput(t *testing.T) {
	ctx := testCtx(t, 30*time.Minute)
	priv := testdb.NewPrivate(t, map[string]string{"shared_buffers": "512MB", "max_wal_size": "4GB"}, orderview.Migrations)
	d := priv.DB
	tenants := []string{"t-alpha", "t-bravo", "t-charlie", "t-delta", "t-echo", "t-foxtrot", "t-golf", "t-hotel"}
	began := time.Now()
	hs := genHistories(2026, tenants, *rebuildEvents/4+1, time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))
	n := 0
	for i := range hs {
		if n+len(hs[i].events) >= *rebuildEvents {
			hs[i].events = hs[i].events[:max(*rebuildEvents-n, 1)]
			hs = hs[:i+1]
			n += len(hs[i].events)
			break
		}
		n += len(hs[i].events)
	}
	seedSQL(ctx, t, d.AdminURL, hs)
	adminExec(ctx, t, d.AdminURL, "VACUUM ANALYZE strata.events")
	t.Logf("seeded %d events (%d orders, %d tenants) in %s", n, len(hs), len(tenants), time.Since(began).Round(time.Millisecond))

	b := newBundle(t, d)
	svc, err := replay.New(replay.Config{Registry: order.Registry, Projections: orderview.All(), Pool: d.Projector, Log: b.store, Logger: quiet(), Runner: projections.RunnerConfig{BatchSize: *rebuildBatch}})
	if err != nil {
		t.Fatal(err)
	}
	o := replay.RebuildOptions{Actor: "bench"}
	if *rebuildOnly != "" {
		o.Projections = []string{*rebuildOnly}
	}
	var last replay.Progress
	phases := map[replay.Phase]time.Time{}
	start := time.Now()
	o.Progress = func(p replay.Progress) {
		last = p
		if p.Projection != "" || p.Phase == replay.PhaseDone {
			if _, ok := phases[p.Phase]; !ok {
				phases[p.Phase] = time.Now()
			}
		}
	}
	defer debug.SetGCPercent(debug.SetGCPercent(400)) // as `strata replay rebuild` does
	cpu := pgtest.StartCPU(t, priv.Server.DataDir())
	res, err := svc.Rebuild(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range res.Projections {
		t.Logf("  %-17s %8s  %8.0f events/s", p.Name, p.Elapsed.Round(time.Millisecond), float64(p.Events)/p.Elapsed.Seconds())
	}
	t.Logf("rebuild of %d projections, batch %d: %d events in %s = %.0f events/s (last progress: %s %d/%d)", len(res.Projections), *rebuildBatch,
		res.Events, res.Elapsed.Round(time.Millisecond), res.Rate(), last.Phase, last.Done, last.Total)
	var marks []string
	for _, ph := range []replay.Phase{replay.PhaseIndexes, replay.PhaseSwap, replay.PhaseDone} {
		if at, ok := phases[ph]; ok {
			marks = append(marks, fmt.Sprintf("%s from %s", ph, at.Sub(start).Round(time.Millisecond)))
		}
	}
	t.Logf("phases (first projection to enter each): build from 0s, %s", strings.Join(marks, ", "))
	cpu.Log(n)
	if res.Events < int64(n) {
		t.Errorf("the rebuild read %d events, the log holds %d", res.Events, n)
	}
	if n <= 20000 && *rebuildOnly == "" {
		head := lastPosition(ctx, t, b)
		want := dumpTables(ctx, t, d.AdminURL, freshRebuild(ctx, t, b, head, orderview.All()...))
		if got := dumpTables(ctx, t, d.AdminURL, liveTables(orderview.All()...)); got != want {
			t.Fatalf("rebuilt rows differ from a fresh rebuild:\n%s", diffLines(want, got))
		}
	}
}
