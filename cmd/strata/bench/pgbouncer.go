package bench

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/internal/pgbouncer"
)

// pgbouncerPoolSize is PgBouncer's server connections for the app login:
// strata's own default pool size, so that the two variants differ by the
// proxy hop and the pooler-safe exec mode, not by connection count.
const pgbouncerPoolSize = 8

// benchPgBouncer measures the command API at 16 clients with the app
// login through PgBouncer in transaction mode (STRATA_APP_DATABASE_POOLER
// =transaction; the projector direct) against the same API with direct
// connections, alternating the two in the same run on one database
// (docs/pgbouncer.md).
func benchPgBouncer(ctx context.Context, e *Env) (Result, error) {
	url, err := e.newDatabase(ctx, "bench_http_pgbouncer")
	if err != nil {
		return Result{}, err
	}
	appURL, err := db.LoginURL(url, db.LoginApp)
	if err != nil {
		return Result{}, err
	}
	// What `strata migrate up` does with the setting: the app login's
	// role defaults.
	if err := db.EnsureLogins(ctx, url, []db.Login{{Role: db.RoleApp, URL: appURL, Pooled: true}}, nil); err != nil {
		return Result{}, err
	}
	bouncer, err := pgbouncer.Start(ctx, pgbouncer.Config{Port: e.Server.Port(), PoolMode: "transaction", PoolSize: pgbouncerPoolSize,
		Users: []string{"bench_console", db.LoginApp}})
	if err != nil {
		return Result{}, fmt.Errorf("PgBouncer for the bench: %w", err)
	}
	defer bouncer.Stop() //nolint:errcheck
	pooledEnv := []string{"STRATA_APP_DATABASE_URL=" + bouncer.URL(db.LoginApp, "bench_http_pgbouncer"), "STRATA_APP_DATABASE_POOLER=transaction"}

	const n = 16
	var direct, pooled []Run
	measure := func(i int, env ...string) (Run, error) {
		srv, err := e.startServe(ctx, url, env...)
		if err != nil {
			return Run{}, err
		}
		defer srv.stop()
		clients := newClients(n, srv.base)
		return closedLoop(ctx, n, e.cfg.Warmup, e.cfg.Duration, func(ctx context.Context, w int, rng *rand.Rand) error {
			return clients[w].next(ctx, rng)
		}), nil
	}
	for i := 0; i < e.cfg.Runs; i++ {
		d, err := measure(i)
		if err != nil {
			return Result{}, err
		}
		p, err := measure(i, pooledEnv...)
		if err != nil {
			return Result{}, fmt.Errorf("serve through PgBouncer: %w", err)
		}
		direct, pooled = append(direct, d), append(pooled, p)
		e.logf("command API clients=%d run %d: through PgBouncer %.0f req/s p99 %.2f ms, direct %.0f req/s p99 %.2f ms",
			n, i+1, p.Throughput, p.P99ms, d.Throughput, d.P99ms)
	}
	s, r := summarize(pooled), summarize(direct)
	return Result{Workload: "command API through PgBouncer (transaction mode)", Concurrency: n, Unit: "requests/s", Strata: s, Raw: &r,
		RawLabel: "the same command API with direct connections, same run", Ratio: ratioOf(s, r),
		Note: fmt.Sprintf("app login through PgBouncer %s, pool_mode=transaction, default_pool_size=%d, unnamed statements (pgx CacheDescribe); projector direct", pgbouncerVersion(), pgbouncerPoolSize)}, nil
}

func pgbouncerVersion() string {
	v, err := pgbouncer.Version()
	if err != nil {
		return "?"
	}
	return v
}
