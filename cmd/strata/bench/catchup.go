package bench

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples"
	"github.com/strata-es/strata/examples/orders/ordertest"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/replay"
)

// logDB is the database holding the seeded log for catch-up and rebuild.
type logDB struct {
	url    string
	events int
	head   event.Position
}

// seedLog creates a database with cfg.CatchUp generated events (realistic
// order histories over 8 tenants, interleaved), once per run.
func (e *Env) seedLog(ctx context.Context) (*logDB, error) {
	if e.seeded != nil {
		return e.seeded, nil
	}
	url, err := e.newDatabase(ctx, "bench_log")
	if err != nil {
		return nil, err
	}
	began := time.Now()
	evs := ordertest.Generate(ordertest.Config{Seed: 2026, Tenants: 8, Orders: e.cfg.CatchUp/5 + 1, Customers: 500, Open: 200,
		Start: time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC), Spacing: 2 * time.Minute})[:e.cfg.CatchUp]
	if err := ordertest.Seed(ctx, url, evs, 5000); err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "VACUUM ANALYZE strata.events"); err != nil {
		return nil, err
	}
	proj, err := db.OpenPool(ctx, url, db.PoolConfig{Role: db.RoleProjector, MaxConns: 2})
	if err != nil {
		return nil, err
	}
	defer proj.Close()
	head, err := postgres.New(nil, proj).Head(ctx)
	if err != nil {
		return nil, err
	}
	e.logf("seeded %d events in %s", len(evs), time.Since(began).Round(time.Millisecond))
	e.seeded = &logDB{url: url, events: len(evs), head: head}
	return e.seeded, nil
}

func resetReadSide(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	// Every projection's tables, so that a module's new table is never left
	// holding the last run's rows (which the next run, from an empty
	// ledger, would insert again).
	for _, t := range examples.All().Tables() {
		if _, err := conn.Exec(ctx, "TRUNCATE strata."+pgx.Identifier{t}.Sanitize()); err != nil {
			return fmt.Errorf("reset %s: %w", t, err)
		}
	}
	if _, err := conn.Exec(ctx, "TRUNCATE strata.projection_ledger, strata.projection_ledger_marks"); err != nil {
		return fmt.Errorf("reset the ledger: %w", err)
	}
	_, err = conn.Exec(ctx, "DELETE FROM strata.projection_checkpoints")
	if err == nil {
		// Statistics of empty tables: the hardest start for the planner
		// (see the projector pool's plan_cache_mode in db).
		_, err = conn.Exec(ctx, "VACUUM ANALYZE")
	}
	return err
}

// catchUpOnce runs every projection from empty to the head, concurrently,
// each on a runner session of its own (serve with
// STRATA_PROJECTION_GROUP=false), and returns the time until the last is
// done and each projection's own time (the slowest is what a user waits
// for).
func catchUpOnce(ctx context.Context, l *logDB) (time.Duration, map[string]time.Duration, error) {
	proj, err := db.OpenPool(ctx, l.url, db.PoolConfig{Role: db.RoleProjector, MaxConns: 16})
	if err != nil {
		return 0, nil, err
	}
	defer proj.Close()
	store := postgres.New(nil, proj)
	// One registry for the shared reads and every runner: a runner refuses
	// shared reads that decode with another.
	reg := examples.All().MustRegistry()
	shared := projections.NewSharedReads(store, reg, 0)
	var runners []*projections.Runner
	for _, p := range examples.All().Projections() {
		r, err := projections.NewRunner(p, store, proj, projections.RunnerConfig{Shared: shared, Registry: reg})
		if err != nil {
			return 0, nil, err
		}
		runners = append(runners, r)
	}
	began := time.Now()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		each = map[string]time.Duration{}
	)
	errs := make(chan error, len(runners))
	for _, r := range runners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.CatchUp(ctx, l.head); err != nil {
				errs <- fmt.Errorf("%s: %w", r.Name(), err)
			}
			mu.Lock()
			each[r.Name()] = time.Since(began)
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return 0, nil, err
	}
	return time.Since(began), each, nil
}

// catchUpGroup runs every projection from empty to the head in one
// projections.Group that never disperses (Group.CatchUp): one session, one
// read and one transaction per batch for all of them. serve's group lets
// its members catch up on sessions of their own instead; this row is why.
func catchUpGroup(ctx context.Context, l *logDB) (time.Duration, error) {
	proj, err := db.OpenPool(ctx, l.url, db.PoolConfig{Role: db.RoleProjector, MaxConns: 4})
	if err != nil {
		return 0, err
	}
	defer proj.Close()
	store := postgres.New(nil, proj)
	reg := examples.All().MustRegistry()
	var runners []*projections.Runner
	for _, p := range examples.All().Projections() {
		r, err := projections.NewRunner(p, store, proj, projections.RunnerConfig{Registry: reg})
		if err != nil {
			return 0, err
		}
		runners = append(runners, r)
	}
	g, err := projections.NewGroup(runners)
	if err != nil {
		return 0, err
	}
	began := time.Now()
	if err := g.CatchUp(ctx, l.head); err != nil {
		return 0, err
	}
	return time.Since(began), nil
}

// formatEach lists each projection's catch-up time, slowest first.
func formatEach(each map[string]time.Duration) string {
	names := make([]string, 0, len(each))
	for n := range each {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return each[names[i]] > each[names[j]] })
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %s", n, each[n].Round(10*time.Millisecond))
	}
	return strings.Join(parts, ", ")
}

// upsertBaseline is the raw limit for catch-up and rebuild: batched
// INSERT ... ON CONFLICT DO UPDATE into a table identical to order_details
// (no row-level security), 500 rows per transaction, one writer per
// projection, over as many rows as the log has events.
func upsertBaseline(ctx context.Context, url string, rows, writers int) (time.Duration, error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `DROP TABLE IF EXISTS public.raw_upsert; CREATE TABLE public.raw_upsert (LIKE strata.order_details INCLUDING ALL)`); err != nil {
		return 0, err
	}
	const batch = 500
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	began := time.Now()
	per := rows / writers
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for lo := 0; lo < per; lo += batch {
				n := min(batch, per-lo)
				tenants, ids, versions := make([]string, n), make([]string, n), make([]int64, n)
				for i := range n {
					k := w*per + lo + i
					// about 5 updates per key, like events per order
					tenants[i], ids[i], versions[i] = fmt.Sprintf("t-%d", k%8), fmt.Sprintf("o-%d", k/5), int64(k%5+1)
				}
				_, err := pool.Exec(ctx, `INSERT INTO public.raw_upsert (tenant_id, order_id, customer_id, status, currency, total_amount, version, created_at)
SELECT t, o, 'c-1', 'draft', 'EUR', v * 100, v, '2026-01-01'
FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(t, o, v)
ON CONFLICT (tenant_id, order_id) DO UPDATE SET version = EXCLUDED.version, total_amount = EXCLUDED.total_amount, status = 'placed'`,
					tenants, ids, versions)
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return 0, err
	}
	return time.Since(began), nil
}

func benchCatchUp(ctx context.Context, e *Env) ([]Result, error) {
	l, err := e.seedLog(ctx)
	if err != nil {
		return nil, err
	}
	var strataRuns, rawRuns, groupRuns []Run
	for i := 0; i < e.cfg.Runs; i++ {
		d, err := upsertBaseline(ctx, l.url, l.events, 4)
		if err != nil {
			return nil, fmt.Errorf("baseline: %w", err)
		}
		rawRuns = append(rawRuns, Run{Ops: int64(l.events), Seconds: d.Seconds(), Throughput: float64(l.events) / d.Seconds()})
		e.logf("catch-up raw    run %d: %.0f rows/s", i+1, rawRuns[i].Throughput)
		if err := resetReadSide(ctx, l.url); err != nil {
			return nil, err
		}
		d, each, err := catchUpOnce(ctx, l)
		if err != nil {
			return nil, err
		}
		strataRuns = append(strataRuns, Run{Ops: int64(l.events), Seconds: d.Seconds(), Throughput: float64(l.events) / d.Seconds()})
		e.logf("catch-up strata run %d: %.0f events/s (all %d projections, %d events; %s)", i+1, strataRuns[i].Throughput,
			len(examples.All().Projections()), l.events, formatEach(each))
		if err := resetReadSide(ctx, l.url); err != nil {
			return nil, err
		}
		if d, err = catchUpGroup(ctx, l); err != nil {
			return nil, err
		}
		groupRuns = append(groupRuns, Run{Ops: int64(l.events), Seconds: d.Seconds(), Throughput: float64(l.events) / d.Seconds()})
		e.logf("catch-up group  run %d: %.0f events/s (all %d projections on one session)", i+1, groupRuns[i].Throughput, len(examples.All().Projections()))
	}
	s, r, g := summarize(strataRuns), summarize(rawRuns), summarize(groupRuns)
	n := len(examples.All().Projections())
	return []Result{{Workload: "projection catch-up", Concurrency: 4, Unit: "events/s", Strata: s, Raw: &r,
		RawLabel: "batched INSERT ... ON CONFLICT, 500 rows/tx, 4 writers", Ratio: ratioOf(s, r),
		Target: ">= 30000 events/s", Met: met(s.Median.Throughput >= 30000),
		Note: fmt.Sprintf("%d events; every event goes through all %d projections, each on a session of its own; the baseline writes each row once", l.events, n)},
		{Workload: "projection catch-up, one session vs one each", Concurrency: 1, Unit: "events/s", Strata: g, Raw: &s,
			RawLabel: fmt.Sprintf("the %d runners on sessions of their own (the row above)", n), Ratio: ratioOf(g, s),
			Note: fmt.Sprintf("%d events through a projections.Group kept on its one session (Group.CatchUp); serve's group has its members catch up on sessions of their own, and groups them at the head", l.events)}}, nil
}

// benchRebuild runs `replay rebuild --all` (the library the CLI calls) over
// the seeded log: shadow tables built from the first event, caught up and
// swapped in.
func benchRebuild(ctx context.Context, e *Env) ([]Result, error) {
	l, err := e.seedLog(ctx)
	if err != nil {
		return nil, err
	}
	proj, err := db.OpenPool(ctx, l.url, db.PoolConfig{Role: db.RoleProjector, MaxConns: 16})
	if err != nil {
		return nil, err
	}
	defer proj.Close()
	svc, err := replay.New(replay.Config{Pool: proj, Log: postgres.New(nil, proj), Logger: slog.New(slog.DiscardHandler),
		Projections: examples.All().Projections(), Registry: examples.All().MustRegistry()})
	if err != nil {
		return nil, err
	}
	defer debug.SetGCPercent(debug.SetGCPercent(400)) // as `strata replay rebuild` does
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(2 << 30))
	var strataRuns, rawRuns, floorRuns []Run
	var floorRows int64
	for i := 0; i < e.cfg.Runs; i++ {
		d, err := upsertBaseline(ctx, l.url, l.events, 4)
		if err != nil {
			return nil, fmt.Errorf("baseline: %w", err)
		}
		rawRuns = append(rawRuns, Run{Ops: int64(l.events), Seconds: d.Seconds(), Throughput: float64(l.events) / d.Seconds()})
		res, err := svc.Rebuild(ctx, replay.RebuildOptions{Actor: "bench"})
		if err != nil {
			return nil, err
		}
		strataRuns = append(strataRuns, Run{Ops: res.Events, Seconds: res.Elapsed.Seconds(), Throughput: res.Rate()})
		// The floor writes the rows this rebuild produced (copyfloor.go).
		fd, rows, err := copyFloor(ctx, l.url)
		if err != nil {
			return nil, fmt.Errorf("COPY floor: %w", err)
		}
		floorRows = rows
		floorRuns = append(floorRuns, Run{Ops: int64(l.events), Seconds: fd.Seconds(), Throughput: float64(l.events) / fd.Seconds()})
		e.logf("rebuild raw    run %d: %.0f rows/s", i+1, rawRuns[i].Throughput)
		folds := 0
		for _, p := range res.Projections {
			if p.Folded > 0 {
				folds++
			}
		}
		e.logf("rebuild strata run %d: %.0f events/s (%d events through %d projections, %d of them folded in memory and written by COPY, shadow tables swapped in)", i+1,
			strataRuns[i].Throughput, res.Events, len(res.Projections), folds)
		for _, p := range res.Projections {
			e.logf("  %s: %s, of which fold %s (writing %s); %d events folded into %d rows", p.Name, p.Elapsed.Round(time.Millisecond),
				p.FoldTook.Round(time.Millisecond), p.FoldWrite.Round(time.Millisecond), p.Folded, p.FoldedRows)
		}
		e.logf("rebuild floor  run %d: %d final rows copied and indexed in %s (%.0f events/s)", i+1, rows, fd.Round(time.Millisecond), floorRuns[i].Throughput)
	}
	s, r, f := summarize(strataRuns), summarize(rawRuns), summarize(floorRuns)
	return []Result{{Workload: "rebuild --all", Concurrency: 4, Unit: "events/s", Strata: s, Raw: &r,
		RawLabel: "batched INSERT ... ON CONFLICT, 500 rows/tx, 4 writers", Ratio: ratioOf(s, r),
		Target: ">= 40000 events/s", Met: met(s.Median.Throughput >= 40000),
		Note: fmt.Sprintf("%d events; shadow tables, secondary indexes built after loading, then swapped", l.events)},
		{Workload: "rebuild --all vs COPY floor", Concurrency: 4, Unit: "events/s", Strata: s, Raw: &f,
			RawLabel: "COPY of the rebuild's final rows into fresh tables, then their indexes (4 connections)", Ratio: ratioOf(s, f),
			Target: ">= 0.6x the COPY floor", Met: met(ratioOf(s, f) >= 0.6),
			Note: fmt.Sprintf("the floor writes the %d final rows of every projection's tables once; events/s is the log's %d events over its time", floorRows, l.events)}}, nil
}
