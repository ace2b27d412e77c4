package bench

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples"
	"github.com/strata-es/strata/replay"
)

// benchVerify runs `strata replay verify` (the library the CLI calls) over
// the seeded log once every projection has caught up: the whole log read
// once and each event folded into every projection's ledger. The baseline
// is reading the same log, page by page, with nothing else done.
func benchVerify(ctx context.Context, e *Env) ([]Result, error) {
	l, err := e.seedLog(ctx)
	if err != nil {
		return nil, err
	}
	if err := resetReadSide(ctx, l.url); err != nil {
		return nil, err
	}
	if _, _, err := catchUpOnce(ctx, l); err != nil {
		return nil, err
	}
	proj, err := db.OpenPool(ctx, l.url, db.PoolConfig{Role: db.RoleProjector, MaxConns: 4})
	if err != nil {
		return nil, err
	}
	defer proj.Close()
	store := postgres.New(nil, proj)
	mods := examples.All()
	svc, err := replay.New(replay.Config{Pool: proj, Log: store, Logger: slog.New(slog.DiscardHandler),
		Projections: mods.Projections(), Registry: mods.MustRegistry()})
	if err != nil {
		return nil, err
	}
	var strataRuns, rawRuns []Run
	for i := 0; i < e.cfg.Runs; i++ {
		began := time.Now()
		var after event.Position
		n := 0
		for {
			recs, err := store.ReadAll(ctx, after, 5000)
			if err != nil {
				return nil, err
			}
			if len(recs) == 0 {
				break
			}
			n += len(recs)
			after = recs[len(recs)-1].Position
		}
		d := time.Since(began)
		rawRuns = append(rawRuns, Run{Ops: int64(n), Seconds: d.Seconds(), Throughput: float64(n) / d.Seconds()})

		began = time.Now()
		vs, err := svc.Verify(ctx, replay.VerifyOptions{})
		if err != nil {
			return nil, err
		}
		d = time.Since(began)
		for _, v := range vs {
			if !v.Complete {
				return nil, fmt.Errorf("verify: %s tenant %s is not complete: %s", v.Projection, v.Tenant, v.Problem)
			}
		}
		strataRuns = append(strataRuns, Run{Ops: int64(l.events), Seconds: d.Seconds(), Throughput: float64(l.events) / d.Seconds()})
		e.logf("verify raw    run %d: %.0f events/s read", i+1, rawRuns[i].Throughput)
		e.logf("verify strata run %d: %.0f events/s (%d events, %d projections, %d projection-tenant pairs complete) in %s",
			i+1, strataRuns[i].Throughput, l.events, len(mods.Projections()), len(vs), d.Round(time.Millisecond))
	}
	s, r := summarize(strataRuns), summarize(rawRuns)
	return []Result{{Workload: "replay verify", Concurrency: 1, Unit: "events/s", Strata: s, Raw: &r,
		RawLabel: "read the log, 5000 events per page", Ratio: ratioOf(s, r),
		Target: ">= 0.5x reading the log", Met: met(r.Median.Throughput > 0 && s.Median.Throughput >= 0.5*r.Median.Throughput),
		Note: fmt.Sprintf("%d events, every ledger of %d projections recomputed and compared", l.events, len(mods.Projections()))}}, nil
}
