package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/examples/orders/ordertest"
)

// smallTenant is the tenant whose work the tenant workload times.
const smallTenant = "t-small"

// benchTenantWork times one small tenant's commands (about 50 events)
// through the strata binary, as an operator runs them: `replay verify
// --tenant`, `replay rebuild --projection order_details --tenant` and
// `replay rebuild --all --tenant`, on a log of that tenant alone and on one
// where cfg.TenantOthers events of 1,000 other tenants come before it,
// every projection caught up in both. Their cost must follow the tenant's
// events, not the log's (issue 35 §4): the row's ratio is the time with the
// others over the time alone.
func benchTenantWork(ctx context.Context, e *Env) ([]Result, error) {
	if e.cfg.StrataPath == "" {
		return nil, fmt.Errorf("no strata binary to run (Config.StrataPath)")
	}
	alone, err := e.tenantLog(ctx, "bench_tenant_alone", 0)
	if err != nil {
		return nil, err
	}
	crowded, err := e.tenantLog(ctx, "bench_tenant_crowded", e.cfg.TenantOthers)
	if err != nil {
		return nil, err
	}
	commands := []struct {
		name string
		args []string
	}{
		{"replay verify --tenant", []string{"replay", "verify", "--tenant", smallTenant}},
		{"replay rebuild --projection order_details --tenant", []string{"replay", "rebuild", "--projection", "order_details", "--tenant", smallTenant}},
		{"replay rebuild --all --tenant", []string{"replay", "rebuild", "--all", "--tenant", smallTenant}},
	}
	var results []Result
	for _, c := range commands {
		var withOthers, without []Run
		for i := 0; i < e.cfg.Runs; i++ {
			for _, v := range []struct {
				url  string
				runs *[]Run
			}{{alone, &without}, {crowded, &withOthers}} {
				d, err := e.timeCommand(ctx, v.url, c.args)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", c.name, err)
				}
				*v.runs = append(*v.runs, Run{Ops: 1, Seconds: d.Seconds(), Throughput: d.Seconds()})
			}
			e.logf("%s run %d: %.3f s with %d other events, %.3f s alone", c.name, i+1, withOthers[i].Seconds, e.cfg.TenantOthers, without[i].Seconds)
		}
		s, a := summarize(withOthers), summarize(without)
		results = append(results, Result{Workload: c.name + " (" + smallTenant + ")", Concurrency: 1, Unit: "s (lower is better)",
			Strata: s, Raw: &a, RawLabel: "the same command on a log of the tenant alone", Ratio: ratioOf(s, a),
			Target: "<= 2 s beside 4M other events", Met: met(s.Median.Throughput <= 2),
			Note: fmt.Sprintf("the whole command as an operator runs it (process start included); %d events of %s after %d events of 1,000 other tenants; the ratio is time with them over time without",
				smallTenantEvents(), smallTenant, e.cfg.TenantOthers)})
	}
	return results, nil
}

// timeCommand runs the strata binary with args against url and returns
// how long it took; a failure is an error with its output.
func (e *Env) timeCommand(ctx context.Context, url string, args []string) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, e.cfg.StrataPath, args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+url, "STRATA_LOG_LEVEL=error")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	began := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("%v: %s", err, out.Bytes())
	}
	return time.Since(began), nil
}

// smallTenantHistory is the small tenant's log: ten orders' histories.
func smallTenantHistory() []ordertest.Event {
	evs := ordertest.Generate(ordertest.Config{Seed: 35, Tenants: 1, Orders: 10, Customers: 5, Open: 3,
		Start: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Spacing: time.Minute})
	for i := range evs {
		evs[i].Tenant = smallTenant
	}
	return evs
}

func smallTenantEvents() int { return len(smallTenantHistory()) }

// otherTenants is how many tenants the other events belong to.
const otherTenants = 1000

// tenantLog creates a database whose log holds others events of 1,000
// tenants (one generated history, seeded as o-0's and copied under the
// other 999 names in one statement) and then the small tenant's, and
// catches every projection up.
func (e *Env) tenantLog(ctx context.Context, name string, others int) (string, error) {
	url, err := e.newDatabase(ctx, name)
	if err != nil {
		return "", err
	}
	began := time.Now()
	if others > 0 {
		per := (others + otherTenants - 1) / otherTenants
		tpl := ordertest.Generate(ordertest.Config{Seed: 2035, Tenants: 1, Orders: per/5 + 1, Customers: 50, Open: 20,
			Start: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), Spacing: time.Minute})
		if len(tpl) > per {
			tpl = tpl[:per]
		}
		for i := range tpl {
			tpl[i].Tenant = "o-0"
		}
		if err := ordertest.Seed(ctx, url, tpl, 5000); err != nil {
			return "", err
		}
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return "", err
		}
		defer conn.Close(ctx)
		// The copies keep the template's order within each tenant (its
		// streams' versions ascend in the log), tenant after tenant.
		if _, err := conn.Exec(ctx, `INSERT INTO strata.events (tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata, recorded_at)
			SELECT 'o-' || g, stream_id, version, gen_random_uuid(), event_type, schema_version, data, metadata, recorded_at
			FROM strata.events, generate_series(1, $1::int) g WHERE tenant_id = 'o-0' ORDER BY g, tx_id, position`, otherTenants-1); err != nil {
			return "", fmt.Errorf("copy the other tenants' histories: %w", err)
		}
	}
	if err := ordertest.Seed(ctx, url, smallTenantHistory(), 5000); err != nil {
		return "", err
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "VACUUM ANALYZE strata.events"); err != nil {
		return "", err
	}
	var n int64
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM strata.events").Scan(&n); err != nil {
		return "", err
	}
	seeded := time.Since(began)
	if _, _, err := catchUpOnce(ctx, &logDB{url: url, events: int(n)}); err != nil {
		return "", err
	}
	e.logf("tenant log %s: %d events (seeded in %s), every projection caught up in %s", name, n,
		seeded.Round(time.Millisecond), (time.Since(began) - seeded).Round(time.Millisecond))
	return url, nil
}
