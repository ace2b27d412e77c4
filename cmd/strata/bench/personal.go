package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"

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
	url, err := e.newDatabase(ctx, "bench_personal")
	if err != nil {
		return nil, err
	}
	groupCfg, _, err := benchGroupConfig()
	if err != nil {
		return nil, err
	}
	plain := order.NewRegistry()
	var results []Result
	for _, writers := range []int{8, 32} {
		app, err := db.OpenPool(ctx, url, db.PoolConfig{Role: db.RoleApp, MaxConns: int32(writers)})
		if err != nil {
			return nil, err
		}
		store := postgres.New(app, nil, postgres.WithGroupCommit(groupCfg))
		sealed := plain.Protect(personal.NewKeyring(app, personal.DatabaseKEKs(ctx, app, nil), personal.Config{}))
		var sealedRuns, plainRuns []Run
		for i := 0; i < e.cfg.Runs; i++ {
			plainRuns = append(plainRuns, createRun(ctx, e, store, plain, writers, fmt.Sprintf("order-p%d-%d", writers, i)))
			e.logf("personal plain  writers=%-2d run %d: %.0f events/s p99 %.2f ms", writers, i+1, plainRuns[i].Throughput, plainRuns[i].P99ms)
			sealedRuns = append(sealedRuns, createRun(ctx, e, store, sealed, writers, fmt.Sprintf("order-s%d-%d", writers, i)))
			e.logf("personal sealed writers=%-2d run %d: %.0f events/s p99 %.2f ms", writers, i+1, sealedRuns[i].Throughput, sealedRuns[i].P99ms)
		}
		app.Close()
		s, p := summarize(sealedRuns), summarize(plainRuns)
		results = append(results, Result{Workload: "append sealed personal data", Concurrency: writers, Unit: "events/s", Strata: s, Raw: &p,
			RawLabel: "the same order.created appends, not sealed", Ratio: ratioOf(s, p), Target: ">= 0.9x not sealed", Met: met(ratioOf(s, p) >= 0.9)})
	}
	return results, nil
}

// createRun appends one order.created per operation, each a new stream,
// for one of benchCustomers customers of one of benchTenants tenants,
// encoded (and sealed, when reg has a keyring) as the command handler does.
func createRun(ctx context.Context, e *Env, store eventstore.Store, reg *event.Registry, writers int, prefix string) Run {
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
		_, err = store.Append(ctx, eventstore.AppendRequest{Tenant: tenant, Stream: stream, Expected: eventstore.Exact(0),
			Events: []eventstore.NewEvent{{ID: uuid.NewString(), Type: typ, SchemaVersion: sv, Data: data, Metadata: benchMeta}}})
		return err
	})
}
