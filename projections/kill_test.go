package projections_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/strata-es/strata/examples/orders/orderview"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/ordertest"
	"github.com/strata-es/strata/internal/failpoint"
	"github.com/strata-es/strata/internal/pgsession"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/projections/projectiontest"
)

// childURLEnv hands the database to the child projector process;
// childGroupEnv makes it run the projections as one group.
const (
	childURLEnv   = "STRATA_TEST_KILL_CHILD_URL"
	childGroupEnv = "STRATA_TEST_KILL_CHILD_GROUP"
)

// TestExactlyOnceUnderKill kills a projector process 100 times in a row
// with SIGKILL between its read-model writes and its commit (the
// projector.before-commit failpoint, armed for a varying hit so that each
// child commits a few batches first), then lets a last projector finish.
// Every counter must then equal the events behind it: the oracle's rows
// for every table, and direct counts against the log. The projector runs
// its projections on a runner session each, and then (40 kills) as one
// group, whose transaction carries every member's batch.
func TestExactlyOnceUnderKill(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		group bool
		kills int
	}{{"runners", false, 100}, {"group", true, 40}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			exactlyOnceUnderKill(t, c.group, c.kills)
		})
	}
}

func exactlyOnceUnderKill(t *testing.T, group bool, kills int) {
	ctx := testCtx(t, 5*time.Minute)
	d := testdb.NewPrivate(t, nil, orderview.Migrations).DB
	evs := ordertest.Generate(ordertest.Config{Seed: 77, Tenants: 4, Orders: 800, Customers: 30, Open: 60, Start: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)})
	projectiontest.MustSeed(ctx, t, d.AdminURL, evs, 2000)

	killed := 0
	for i := 0; killed < kills; i++ {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestKillChild$", "-test.count=1")
		cmd.Env = append(os.Environ(),
			childURLEnv+"="+d.AdminURL, childGroupEnv+"="+strconv.FormatBool(group),
			failpoint.EnvVar+"="+projections.FailpointBeforeCommit+"="+strconv.Itoa(1+i%4))
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signaled() && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL:
			killed++
		case err != nil:
			t.Fatalf("child %d failed: %v\n%s", i, err, out)
		default:
			t.Fatalf("child %d caught up without reaching its failpoint after %d kills: seed more events", i, killed)
		}
	}

	// A last projector, without failpoints, finishes the job.
	store := postgres.New(d.App, d.Projector)
	head := projectiontest.Head(ctx, t, store)
	for _, p := range orderview.All() {
		r, err := projections.NewRunner(p, store, d.Projector, projections.RunnerConfig{Registry: order.Registry, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		if err := catchUpRetrying(ctx, r, head); err != nil {
			t.Fatal(err)
		}
	}
	want, err := ordertest.Expected(evs)
	if err != nil {
		t.Fatal(err)
	}
	if got := ordertest.Dump(ctx, t, d.AdminURL, ordertest.Tables()...); got != want {
		t.Errorf("rows after %d kills differ from the events:\n%s", killed, ordertest.Diff(want, got))
	}

	// The counters against the log itself, in SQL.
	conn, err := pgx.Connect(ctx, d.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, c := range []struct{ what, counter, events string }{
		{"orders", `SELECT sum(orders) FROM strata.customer_summaries`, `SELECT count(*) FROM strata.events WHERE event_type = 'order.created'`},
		{"open orders", `SELECT sum(open_orders) FROM strata.customer_summaries`,
			`SELECT count(*) FILTER (WHERE event_type = 'order.created') - count(*) FILTER (WHERE event_type IN ('order.paid', 'order.cancelled')) FROM strata.events`},
		{"paid total", `SELECT sum(amount) FROM strata.customer_paid_totals`, `SELECT sum((data->'amount'->>'amount')::bigint) FROM strata.events WHERE event_type = 'order.paid'`},
		{"daily revenue orders", `SELECT sum(orders) FROM strata.daily_revenue`, `SELECT count(*) FROM strata.events WHERE event_type = 'order.paid'`},
		{"daily revenue amount", `SELECT sum(amount) FROM strata.daily_revenue`, `SELECT sum((data->'amount'->>'amount')::bigint) FROM strata.events WHERE event_type = 'order.paid'`},
		{"order versions", `SELECT sum(version) FROM strata.order_details`, `SELECT sum(m) FROM (SELECT max(version) AS m FROM strata.events GROUP BY tenant_id, stream_id) s`},
	} {
		var counter, events int64
		if err := conn.QueryRow(ctx, c.counter).Scan(&counter); err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRow(ctx, c.events).Scan(&events); err != nil {
			t.Fatal(err)
		}
		if counter != events {
			t.Errorf("%s: read model %d, events %d", c.what, counter, events)
		}
	}
	t.Logf("killed the projector %d times before commit; %d events, every counter matches", killed, len(evs))
}

// TestKillChild is the projector process of TestExactlyOnceUnderKill: all
// projections catch up concurrently until the armed failpoint kills it.
// Run on its own (no child URL) it does nothing.
func TestKillChild(t *testing.T) {
	url := os.Getenv(childURLEnv)
	if url == "" {
		return
	}
	ctx := testCtx(t, time.Minute)
	pool, err := db.OpenPool(ctx, url, db.PoolConfig{Role: db.RoleProjector, MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store := postgres.New(nil, pool)
	if os.Getenv(childGroupEnv) == "true" {
		// One group: every batch is one transaction for all four (and one
		// hit of the failpoint), so batches stay small for the log to last
		// the kills.
		var rs []*projections.Runner
		for _, p := range orderview.All() {
			r, err := projections.NewRunner(p, store, pool, projections.RunnerConfig{Registry: order.Registry, BatchSize: 16, CatchUpBatch: 16, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			rs = append(rs, r)
		}
		g, err := projections.NewGroup(rs)
		if err != nil {
			t.Fatal(err)
		}
		for {
			err := g.CatchUp(ctx, event.Position{})
			if !errors.Is(err, projections.ErrLeaseHeld) {
				if err != nil {
					t.Error(err)
				}
				return
			}
			if !pgsession.Sleep(ctx, 5*time.Millisecond) {
				return
			}
		}
	}
	shared := projections.NewSharedReads(store, order.Registry, 4)
	var wg sync.WaitGroup
	for _, p := range orderview.All() {
		r, err := projections.NewRunner(p, store, pool, projections.RunnerConfig{Registry: order.Registry, BatchSize: 16, Shared: shared, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := catchUpRetrying(ctx, r, event.Position{}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
}

// catchUpRetrying is CatchUp, waiting while the session of a projector
// that was just killed still holds the lease (PostgreSQL notices the dead
// connection a moment later).
func catchUpRetrying(ctx context.Context, r *projections.Runner, until event.Position) error {
	for {
		err := r.CatchUp(ctx, until)
		if !errors.Is(err, projections.ErrLeaseHeld) {
			return err
		}
		if !pgsession.Sleep(ctx, 5*time.Millisecond) {
			return ctx.Err()
		}
	}
}
