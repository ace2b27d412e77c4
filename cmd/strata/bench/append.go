package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/eventstore/postgres"
)

const (
	benchStreams = 10_000
	benchTenants = 4
	// benchPayload is an order.line_added v2 body of realistic size.
	benchPayload = `{"order_id":"7d9f1f5e-3a4b-4c2d-9e8f-0a1b2c3d4e5f","product_id":"SKU-10021","quantity":2,"unit_price":{"amount":49950,"currency":"EUR"},"at":"2026-11-29T20:00:00Z"}`
)

var benchMeta = event.Metadata{
	CommandID:     "5b0c7e2a-1f3d-4e6a-8b9c-d0e1f2a3b4c5",
	CorrelationID: "5b0c7e2a-1f3d-4e6a-8b9c-d0e1f2a3b4c5",
	CausationID:   "9a8b7c6d-5e4f-4a3b-2c1d-0e9f8a7b6c5d",
	Actor:         "u-1234",
	TraceParent:   "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
}

// rawEventsDDL makes a table identical to strata.events (columns, defaults,
// identity, constraints and indexes) but without row-level security, owned
// by the superuser: the raw baseline.
const rawEventsDDL = `CREATE TABLE public.raw_events (LIKE strata.events INCLUDING ALL)`

// streamVersions tracks, per writer, the version of each stream it owns.
// Streams are partitioned over writers so both variants do the same work
// without losing races: exact expected versions always match.
type streamVersions struct {
	streams []int
	version []int64
}

func partition(writers int) []*streamVersions {
	out := make([]*streamVersions, writers)
	for i := range out {
		out[i] = &streamVersions{}
	}
	for s := 0; s < benchStreams; s++ {
		p := out[s%writers]
		p.streams = append(p.streams, s)
		p.version = append(p.version, 0)
	}
	return out
}

func benchAppend(ctx context.Context, e *Env) ([]Result, error) {
	url, err := e.newDatabase(ctx, "bench_append")
	if err != nil {
		return nil, err
	}
	admin, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	if _, err := admin.Exec(ctx, rawEventsDDL); err != nil {
		return nil, err
	}
	groupCfg, groupDefault, err := benchGroupConfig()
	if err != nil {
		return nil, err
	}
	var results []Result
	for _, writers := range []int{1, 8, 32} {
		app, err := db.OpenPool(ctx, url, db.PoolConfig{Role: db.RoleApp, MaxConns: int32(writers)})
		if err != nil {
			return nil, err
		}
		raw, err := db.OpenPool(ctx, url, db.PoolConfig{MaxConns: int32(writers)})
		if err != nil {
			app.Close()
			return nil, err
		}
		ungrouped := postgres.New(app, nil)
		grouped := postgres.New(app, nil, postgres.WithGroupCommit(groupCfg))
		var ungroupedRuns, groupedRuns, rawRuns, wmRuns, batchRuns []Run
		for i := 0; i < e.cfg.Runs; i++ {
			// Alternate the variants so drift on a shared machine hits both.
			parts := partition(writers)
			rawRuns = append(rawRuns, closedLoop(ctx, writers, e.cfg.Warmup, e.cfg.Duration, func(ctx context.Context, w int, rng *rand.Rand) error {
				p := parts[w]
				k := rng.IntN(len(p.streams))
				_, err := raw.Exec(ctx, `INSERT INTO public.raw_events (tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata)
					VALUES ($1, $2, $3, $4, 'order.line_added', 2, $5, $6)`,
					fmt.Sprintf("tenant-%d", p.streams[k]%benchTenants), fmt.Sprintf("order-raw-w%d-%d-%d", writers, i, p.streams[k]),
					p.version[k]+1, uuid.NewString(), benchPayload, benchMetaJSON)
				if err == nil {
					p.version[k]++
				}
				return err
			}))
			e.logf("append raw     writers=%-2d run %d: %.0f events/s p99 %.2f ms", writers, i+1, rawRuns[i].Throughput, rawRuns[i].P99ms)
			ungroupedRuns = append(ungroupedRuns, strataRun(ctx, e, ungrouped, writers, fmt.Sprintf("order-w%d-%d", writers, i)))
			e.logf("append strata  writers=%-2d run %d: %.0f events/s p99 %.2f ms (group commit off)", writers, i+1, ungroupedRuns[i].Throughput, ungroupedRuns[i].P99ms)
			groupedRuns = append(groupedRuns, strataRun(ctx, e, grouped, writers, fmt.Sprintf("order-g%d-%d", writers, i)))
			e.logf("append strata  writers=%-2d run %d: %.0f events/s p99 %.2f ms (group commit on)", writers, i+1, groupedRuns[i].Throughput, groupedRuns[i].P99ms)
			wm, err := watermillRuns(ctx, e, raw, writers, i)
			if err != nil {
				app.Close()
				raw.Close()
				return nil, err
			}
			wmRuns = append(wmRuns, wm)
			batchRuns = append(batchRuns, batchedRuns(ctx, e, raw, writers, i))
		}
		app.Close()
		raw.Close()
		g, u, r := summarize(groupedRuns), summarize(ungroupedRuns), summarize(rawRuns)
		s := u
		if groupDefault {
			s = g
		}
		res := Result{Workload: "append", Concurrency: writers, Unit: "events/s", Strata: s, Raw: &r,
			RawLabel: "single-row INSERT into an identical table", Ratio: ratioOf(s, r)}
		switch writers {
		case 8:
			res.Target = ">= 0.8x raw"
			res.Met = met(res.Ratio >= 0.8)
		case 32:
			res.Target = ">= 1.5x raw"
			res.Met = met(res.Ratio >= 1.5)
		}
		results = append(results, res)
		// Group commit against strata without it, same run, same pool.
		gu := Result{Workload: "append grouped vs ungrouped", Concurrency: writers, Unit: "events/s", Strata: g, Raw: &u,
			RawLabel: "strata with group commit off", Ratio: ratioOf(g, u)}
		if writers == 1 {
			// A lone writer must not pay for grouping (issue 18).
			gu.Target = "p99 <= 2x ungrouped"
			gu.Met = met(g.Median.P99ms <= 2*u.Median.P99ms)
		}
		results = append(results, gu)
		wm, batch := summarize(wmRuns), summarize(batchRuns)
		peer := Result{Workload: "append vs watermill-sql", Concurrency: writers, Unit: "events/s", Strata: s, Raw: &wm,
			RawLabel: "watermill-sql PostgreSQL publisher, one event per publish", Ratio: ratioOf(s, wm)}
		if writers == 8 {
			peer.Target = ">= 3x watermill-sql"
			peer.Met = met(peer.Ratio >= 3)
		}
		ceiling := Result{Workload: "append vs 10-per-tx", Concurrency: writers, Unit: "events/s", Strata: s, Raw: &batch,
			RawLabel: "raw INSERT of 10 events per transaction (the group-commit ceiling)", Ratio: ratioOf(s, batch)}
		if writers == 32 {
			ceiling.Target = ">= 0.8x ceiling"
			ceiling.Met = met(ceiling.Ratio >= 0.8)
		}
		results = append(results, peer, ceiling)
	}
	return results, nil
}

// strataRun measures appends through store; streams are named prefix-N.
func strataRun(ctx context.Context, e *Env, store eventstore.Store, writers int, prefix string) Run {
	parts := partition(writers)
	return closedLoop(ctx, writers, e.cfg.Warmup, e.cfg.Duration, func(ctx context.Context, w int, rng *rand.Rand) error {
		p := parts[w]
		k := rng.IntN(len(p.streams))
		_, err := store.Append(ctx, eventstore.AppendRequest{
			Tenant:   fmt.Sprintf("tenant-%d", p.streams[k]%benchTenants),
			Stream:   fmt.Sprintf("%s-%d", prefix, p.streams[k]),
			Expected: eventstore.Exact(p.version[k]),
			Events: []eventstore.NewEvent{{ID: uuid.NewString(), Type: "order.line_added", SchemaVersion: 2,
				Data: []byte(benchPayload), Metadata: benchMeta}},
		})
		if err == nil {
			p.version[k]++
		}
		return err
	})
}

// benchGroupConfig is the group commit measured: STRATA_GROUP_COMMIT's
// parameters when it is set to on (so a setting can be tried without a
// rebuild), else the defaults. groupDefault says whether the append rows
// (against raw, watermill-sql and 10-per-tx) show strata with group
// commit: the default setting, or STRATA_GROUP_COMMIT when set.
func benchGroupConfig() (cfg postgres.GroupConfig, groupDefault bool, err error) {
	setting := postgres.DefaultGroupCommit
	if v := strings.TrimSpace(os.Getenv("STRATA_GROUP_COMMIT")); v != "" {
		setting = v
	}
	cfg, on, err := postgres.ParseGroupCommit(setting)
	if err != nil {
		return cfg, false, fmt.Errorf("STRATA_GROUP_COMMIT: %w", err)
	}
	if !on {
		cfg, _, _ = postgres.ParseGroupCommit("on")
	}
	return cfg, on, nil
}

var benchMetaJSON = func() string {
	return `{"command_id":"` + benchMeta.CommandID + `","correlation_id":"` + benchMeta.CorrelationID +
		`","causation_id":"` + benchMeta.CausationID + `","actor":"` + benchMeta.Actor + `","traceparent":"` + benchMeta.TraceParent + `"}`
}()
