package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"
)

// minimalLabel describes the baseline of the HTTP rows measured against
// the minimal handler (minimal.go).
const minimalLabel = "minimal net/http + pgx handler, a process of its own: HS256, set_config and the statement in one round trip, JSON (same load generator and database)"

// minimalTarget is issue 35's target for strata against the minimal handler.
const minimalTarget = ">= 0.9x minimal, p99 <= 1.5x its"

// benchAgainstMinimal measures creating orders and getting one by ID at 16
// and 64 clients, through strata serve and through the minimal handler,
// alternating run by run. known are paid orders to get (tenant, token, id).
func benchAgainstMinimal(ctx context.Context, e *Env, srv *server, url string, owner *pgxpool.Pool, known [][3]string) ([]Result, error) {
	if _, err := owner.Exec(ctx, `GRANT SELECT, INSERT ON public.raw_events TO strata_app`); err != nil {
		return nil, err
	}
	mini, err := e.startMinimal(ctx, url)
	if err != nil {
		return nil, err
	}
	defer mini.stop()
	var results []Result
	for _, w := range []struct {
		name string
		op   func(base string, hc *http.Client) func(ctx context.Context, w int, rng *rand.Rand) error
	}{
		{"create order", createOp},
		{"get order by id", func(base string, hc *http.Client) func(ctx context.Context, w int, rng *rand.Rand) error {
			return getOp(base, hc, known)
		}},
	} {
		for _, n := range []int{16, 64} {
			var strataRuns, miniRuns []Run
			for i := 0; i < e.cfg.Runs; i++ {
				miniRuns = append(miniRuns, closedLoop(ctx, n, e.cfg.Warmup, e.cfg.Duration, w.op(mini.base, httpClient(n))))
				strataRuns = append(strataRuns, closedLoop(ctx, n, e.cfg.Warmup, e.cfg.Duration, w.op(srv.base, httpClient(n))))
				e.logf("%s clients=%-2d run %d: strata %.0f req/s p99 %.2f ms, minimal handler %.0f req/s p99 %.2f ms", w.name, n, i+1,
					strataRuns[i].Throughput, strataRuns[i].P99ms, miniRuns[i].Throughput, miniRuns[i].P99ms)
			}
			s, m := summarize(strataRuns), summarize(miniRuns)
			for _, r := range append(strataRuns, miniRuns...) {
				if r.Errors > 0 {
					return nil, fmt.Errorf("%s at %d clients: %d requests failed", w.name, n, r.Errors)
				}
			}
			ratio := ratioOf(s, m)
			results = append(results, Result{Workload: w.name + " vs minimal handler", Concurrency: n, Unit: "requests/s", Strata: s, Raw: &m,
				RawLabel: minimalLabel, Ratio: ratio, Target: minimalTarget,
				Met:  met(ratio >= 0.9 && s.Median.P99ms <= 1.5*m.Median.P99ms),
				Note: fmt.Sprintf("p99 %.2f ms against %.2f ms (%.2fx)", s.Median.P99ms, m.Median.P99ms, s.Median.P99ms/max(m.Median.P99ms, 1e-9))})
		}
	}
	return results, nil
}

// createOp creates a new order per call (tenants t-0..t-3 by worker).
func createOp(base string, hc *http.Client) func(ctx context.Context, w int, rng *rand.Rand) error {
	var tokens [4]string
	for i := range tokens {
		tokens[i] = tokenFor(fmt.Sprintf("t-%d", i))
	}
	return func(ctx context.Context, w int, rng *rand.Rand) error {
		body := fmt.Sprintf(`{"order_id":"m-%d","customer_id":"c-%d","currency":"EUR"}`, orderSeq.Add(1), rng.IntN(500))
		return send(ctx, hc, http.MethodPost, base+"/v1/orders", tokens[w%4], body, http.StatusCreated)
	}
}

// getOp reads a random known order.
func getOp(base string, hc *http.Client, known [][3]string) func(ctx context.Context, w int, rng *rand.Rand) error {
	return func(ctx context.Context, w int, rng *rand.Rand) error {
		k := known[rng.IntN(len(known))]
		return send(ctx, hc, http.MethodGet, base+"/v1/orders/"+k[2], k[1], "", http.StatusOK)
	}
}
