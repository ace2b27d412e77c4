package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"

	"github.com/strata-es/strata/commands"
	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples/inventory/stock"
	"github.com/strata-es/strata/examples/inventory/stockcmd"
)

// Stream lengths of the long-stream workload (issue 31 §4). The short
// streams are many, taken in turn, so that they stay short while a run
// appends to them.
const (
	longStream   = 10_000
	shortStream  = 10
	shortStreams = 256
)

// benchLongStream (issue 31 §4) measures a command on a stream of 10,000
// events against the same command on a stream of 10, both with the
// handler's history cache off (every command loads its aggregate from
// the store: a cold cache), with and without the inventory item's
// snapshots, in the same run. Target: with snapshots, the long stream's
// commands within 1.5x of the short one's (throughput ratio >= 0.67x at
// one writer, which is latency within 1.5x).
func benchLongStream(ctx context.Context, e *Env) ([]Result, error) {
	url, err := e.newDatabase(ctx, "bench_longstream")
	if err != nil {
		return nil, err
	}
	app, err := db.OpenPool(ctx, url, db.PoolConfig{Role: db.RoleApp, MaxConns: 4})
	if err != nil {
		return nil, err
	}
	defer app.Close()
	store := postgres.New(app, nil)
	reg := event.NewRegistry(stock.Codecs()...)
	const tenant = "tenant-long"
	if err := seedStock(ctx, store, reg, tenant, "sku-long", longStream); err != nil {
		return nil, err
	}
	for i := range shortStreams {
		if err := seedStock(ctx, store, reg, tenant, fmt.Sprintf("sku-short-%d", i), shortStream); err != nil {
			return nil, err
		}
	}
	e.logf("longstream: seeded a stream of %d events and %d of %d", longStream, shortStreams, shortStream)
	plainAgg := stockcmd.Aggregate
	plainAgg.Snapshots = nil
	handler := func(agg commands.Aggregate[*stock.Item]) (*commands.Handler[*stock.Item], error) {
		return commands.NewHandler(agg, store, store, commands.Config{Registry: reg, CacheBytes: -1})
	}
	plain, err := handler(plainAgg)
	if err != nil {
		return nil, err
	}
	snapped, err := handler(stockcmd.Aggregate)
	if err != nil {
		return nil, err
	}
	next := 0
	run := func(h *commands.Handler[*stock.Item], long bool) Run {
		tctx := domain.NewContext(ctx, tenant)
		return closedLoop(tctx, 1, e.cfg.Warmup, e.cfg.Duration, func(ctx context.Context, _ int, _ *rand.Rand) error {
			sku := "sku-long"
			if !long {
				next++
				sku = fmt.Sprintf("sku-short-%d", next%shortStreams)
			}
			_, err := h.Handle(ctx, stockcmd.Receive{SKU: sku, Quantity: 1}, commands.Options{})
			return err
		})
	}
	var results []Result
	for _, mode := range []struct {
		name    string
		h       *commands.Handler[*stock.Item]
		target  string
		enforce bool
	}{
		{"snapshots", snapped, ">= 0.67x (within 1.5x) of a 10-event stream", true},
		{"no snapshots", plain, "", false},
	} {
		var longRuns, shortRuns []Run
		for i := 0; i < e.cfg.Runs; i++ {
			longRuns = append(longRuns, run(mode.h, true))
			e.logf("longstream %-12s long  run %d: %.0f commands/s p99 %.2f ms", mode.name, i+1, longRuns[i].Throughput, longRuns[i].P99ms)
			shortRuns = append(shortRuns, run(mode.h, false))
			e.logf("longstream %-12s short run %d: %.0f commands/s p99 %.2f ms", mode.name, i+1, shortRuns[i].Throughput, shortRuns[i].P99ms)
		}
		l, s := summarize(longRuns), summarize(shortRuns)
		r := Result{Workload: fmt.Sprintf("command on a %d-event stream, cold cache, %s", longStream, mode.name), Concurrency: 1, Unit: "commands/s",
			Strata: l, Raw: &s, RawLabel: fmt.Sprintf("the same command on a %d-event stream", shortStream), Ratio: ratioOf(l, s), Target: mode.target}
		if mode.enforce {
			r.Met = met(r.Ratio >= 1/1.5)
		}
		results = append(results, r)
	}
	return results, nil
}

// seedStock appends n stock.received events to sku's stream, in batches.
func seedStock(ctx context.Context, store eventstore.Store, reg *event.Registry, tenant, sku string, n int) error {
	const batch = 1000
	for done := 0; done < n; {
		evs := make([]eventstore.NewEvent, min(batch, n-done))
		for i := range evs {
			typ, sv, data, err := reg.Encode(stock.Received{SKU: sku, Quantity: 1, At: time.Now().UTC()})
			if err != nil {
				return err
			}
			evs[i] = eventstore.NewEvent{ID: uuid.NewString(), Type: typ, SchemaVersion: sv, Data: data}
		}
		if _, err := store.Append(ctx, eventstore.AppendRequest{Tenant: tenant, Stream: stock.StreamID(sku), Expected: eventstore.Exact(int64(done)), Events: evs}); err != nil {
			return fmt.Errorf("seed %s: %w", sku, err)
		}
		done += len(evs)
	}
	return nil
}
