package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/personal"
)

// benchCustomers is the customers per tenant the personal workload's
// orders are for: their keys are made during the warm-up and then held by
// the keyring, as a serving process holds its active customers' keys.
const benchCustomers = 500

// benchPersonal (issue 30 §5) measures the cost of sealing personal data
// on the append path: order.created events (the customer ID is personal
// and the subject) encoded, sealed with the customer's data key and
// appended through the grouped store, against the same events encoded
// and appended without sealing (a registry without a keyring), in the
// same run, on the same pool.
func benchPersonal(ctx context.Context, e *Env) ([]Result, error) {
	plain := order.NewRegistry()
	runs, err := compareCreates(ctx, e, "bench_personal", func(ctx context.Context, app *pgxpool.Pool, _ *postgres.Store) ([]createVariant, error) {
		sealed := plain.Protect(personal.NewKeyring(app, personal.DatabaseKEKs(ctx, app, nil), personal.Config{}))
		return []createVariant{{name: "personal plain ", reg: plain}, {name: "personal sealed", reg: sealed}}, nil
	})
	if err != nil {
		return nil, err
	}
	var results []Result
	for _, r := range runs {
		p, s := r.summaries[0], r.summaries[1]
		results = append(results, Result{Workload: "append sealed personal data", Concurrency: r.writers, Unit: "events/s", Strata: s, Raw: &p,
			RawLabel: "the same order.created appends, not sealed", Ratio: ratioOf(s, p), Target: ">= 0.9x not sealed", Met: met(ratioOf(s, p) >= 0.9)})
	}
	return results, nil
}

// createVariant is one way of creating orders (createRun) that a workload
// compares with others.
type createVariant struct {
	name string // in the progress lines
	reg  *event.Registry
	// store, when set, appends in place of the workload's store (a
	// wrapper of it).
	store eventstore.Store
	// guard, when set, completes each append request before it is sent
	// (the conditional workload's tags, read and condition).
	guard func(ctx context.Context, req *eventstore.AppendRequest) error
}

// createComparison is what compareCreates measured at one writer count:
// a summary per variant, in the variants' order.
type createComparison struct {
	writers   int
	summaries []Summary
}

// compareCreates measures createRun variants side by side at 8 and 32
// writers, in the same run: on a database of its own (name), through a
// store with the benchmark's group commit on a pool of one connection per
// writer, the variants alternating run after run so that drift on a
// shared machine hits them all. variants makes them for each pool.
func compareCreates(ctx context.Context, e *Env, name string,
	variants func(ctx context.Context, app *pgxpool.Pool, store *postgres.Store) ([]createVariant, error)) ([]createComparison, error) {
	url, err := e.newDatabase(ctx, name)
	if err != nil {
		return nil, err
	}
	groupCfg, _, err := benchGroupConfig()
	if err != nil {
		return nil, err
	}
	var out []createComparison
	for _, writers := range []int{8, 32} {
		app, err := db.OpenPool(ctx, url, db.PoolConfig{Role: db.RoleApp, MaxConns: int32(writers)})
		if err != nil {
			return nil, err
		}
		store := postgres.New(app, nil, postgres.WithGroupCommit(groupCfg))
		vs, err := variants(ctx, app, store)
		if err != nil {
			app.Close()
			return nil, err
		}
		runs := make([][]Run, len(vs))
		for i := 0; i < e.cfg.Runs; i++ {
			for j, v := range vs {
				var through eventstore.Store = store
				if v.store != nil {
					through = v.store
				}
				run := createRun(ctx, e, through, v.reg, writers, fmt.Sprintf("order-v%d-w%d-%d", j, writers, i), v.guard)
				runs[j] = append(runs[j], run)
				e.logf("%s writers=%-2d run %d: %.0f events/s p99 %.2f ms", v.name, writers, i+1, run.Throughput, run.P99ms)
			}
		}
		app.Close()
		c := createComparison{writers: writers}
		for _, r := range runs {
			c.summaries = append(c.summaries, summarize(r))
		}
		out = append(out, c)
	}
	return out, nil
}

// createRun appends one order.created per operation, each a new stream,
// for one of benchCustomers customers of one of benchTenants tenants,
// encoded (and sealed, when reg has a keyring) as the command handler does;
// guard, when not nil, completes each request before its append.
func createRun(ctx context.Context, e *Env, store eventstore.Store, reg *event.Registry, writers int, prefix string,
	guard func(ctx context.Context, req *eventstore.AppendRequest) error) Run {
	var seq [64]int
	return closedLoop(ctx, writers, e.cfg.Warmup, e.cfg.Duration, func(ctx context.Context, w int, rng *rand.Rand) error {
		seq[w]++
		tenant := fmt.Sprintf("tenant-%d", rng.IntN(benchTenants))
		id := fmt.Sprintf("%s-w%d-%d", prefix, w, seq[w])
		stream := order.StreamID(id)
		p := order.Created{OrderID: id, CustomerID: fmt.Sprintf("customer-%d", rng.IntN(benchCustomers)), Currency: "EUR", At: time.Now().UTC()}
		typ, sv, data, err := reg.Encode(p)
		if err != nil {
			return err
		}
		if data, err = reg.Seal(ctx, tenant, stream, typ, data, nil); err != nil {
			return err
		}
		req := eventstore.AppendRequest{Tenant: tenant, Stream: stream, Expected: eventstore.Exact(0),
			Events: []eventstore.NewEvent{{ID: uuid.NewString(), Type: typ, SchemaVersion: sv, Data: data, Metadata: benchMeta}}}
		if guard != nil {
			if err := guard(ctx, &req); err != nil {
				return err
			}
		}
		_, err = store.Append(ctx, req)
		return err
	})
}
