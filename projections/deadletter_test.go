package projections_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-es/strata/examples/orders/orderview"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/ordertest"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/projections/projectiontest"
)

func TestFailurePolicyDelays(t *testing.T) {
	t.Parallel()
	p := projections.FailurePolicy{Attempts: 5, InitialDelay: 200 * time.Millisecond, MaxDelay: time.Second, Jitter: -1}
	for attempt, want := range map[int]time.Duration{1: 200 * time.Millisecond, 2: 400 * time.Millisecond, 3: 800 * time.Millisecond, 4: time.Second, 9: time.Second} {
		if got := p.Delay(attempt); got != want {
			t.Errorf("Delay(%d) = %s, want %s", attempt, got, want)
		}
	}
	p.Jitter = 0.2
	for range 100 {
		if d := p.Delay(2); d < 320*time.Millisecond || d > 480*time.Millisecond {
			t.Fatalf("jittered Delay(2) = %s, want 400ms ± 20%%", d)
		}
	}
	var bad projections.FailurePolicy
	bad.SetDefaults()
	bad.Attempts, bad.MaxDelay = 0, time.Millisecond
	if err := bad.Validate(); err == nil {
		t.Error("Validate accepted 0 attempts and a max delay below the initial one")
	}
}

func TestIsPoison(t *testing.T) {
	t.Parallel()
	pg := func(code string) error { return fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: code}) }
	for _, c := range []struct {
		err  error
		want bool
	}{
		{projections.ErrMissingRow, true}, {projections.ErrUnexpectedEvent, true}, {errors.New("decode: bad json"), true},
		{pg("22012"), true}, {pg("23505"), true}, {pg("P0001"), true},
		{pg("40001"), false}, {pg("40P01"), false}, {pg("42P01"), false}, {pg("42703"), false}, {pg("42501"), false},
		{pg("53100"), false}, {pg("57014"), false}, {pg("08006"), false},
		{context.DeadlineExceeded, false}, {fmt.Errorf("x: %w", context.Canceled), false},
	} {
		if got := projections.IsPoison(c.err); got != c.want {
			t.Errorf("projections.IsPoison(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// flaky fails its first n batches with SQL errors of the given code.
type flaky struct {
	*orderview.OrderList
	code  string
	fails atomic.Int32
}

func (p *flaky) raise(b *pgx.Batch) bool {
	if p.fails.Add(-1) < 0 {
		return false
	}
	b.Queue(`DO $$BEGIN RAISE EXCEPTION 'injected' USING ERRCODE = '` + p.code + `'; END$$`)
	return true
}

func (p *flaky) Apply(b *pgx.Batch, ev projections.Event) error {
	if p.raise(b) {
		return nil
	}
	return p.OrderList.Apply(b, ev)
}

func (p *flaky) ApplyBatch(b *pgx.Batch, evs []projections.Event) error {
	if p.raise(b) {
		return nil
	}
	return p.OrderList.ApplyBatch(b, evs)
}

// TestFailuresThatParkNothing: a serialization failure and a missing
// table are failures of the environment, not of an event: the runner
// retries without counting attempts, parks nothing, and applies every
// event once they pass.
func TestFailuresThatParkNothing(t *testing.T) {
	t.Parallel()
	for _, code := range []string{"40001", "42P01"} {
		t.Run(code, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t, time.Minute)
			d := testdb.New(t, orderview.Migrations)
			store := postgres.New(d.App, d.Projector)
			evs := ordertest.Generate(ordertest.Config{Seed: 3, Tenants: 2, Orders: 20, Customers: 3, Start: time.Now()})
			end, err := projectiontest.Append(ctx, store, evs)
			if err != nil {
				t.Fatal(err)
			}
			p := &flaky{OrderList: orderview.NewOrderList(orderview.OrderListTables{}), code: code}
			p.fails.Store(6)
			r, err := projections.NewRunner(p, store, d.Projector, projections.RunnerConfig{Registry: order.Registry, DeadLetters: true, Failures: projections.FailurePolicy{Attempts: 1, InitialDelay: 10 * time.Millisecond},
				MinErrorBackoff: 10 * time.Millisecond, MaxErrorBackoff: 20 * time.Millisecond, PollInterval: 20 * time.Millisecond, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			rctx, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); r.Run(rctx) }()
			defer func() { stop(); <-done }()
			waitFor(t, 30*time.Second, "the projection to reach the end", func() bool {
				return !projectiontest.Checkpoint(ctx, t, d.AdminURL, orderview.OrderListName).Position.Less(end)
			})
			cp := projectiontest.Checkpoint(ctx, t, d.AdminURL, orderview.OrderListName)
			if cp.ParkedStreams != 0 || cp.ParkedLetters != 0 {
				t.Errorf("parked %d streams, %d letters on %s, want none", cp.ParkedStreams, cp.ParkedLetters, code)
			}
			want, err := ordertest.Expected(evs)
			if err != nil {
				t.Fatal(err)
			}
			if got := ordertest.Dump(ctx, t, d.AdminURL, "order_list"); !containsTable(want, got) {
				t.Errorf("rows differ from the oracle after %s failures", code)
			}
		})
	}
}

// containsTable reports whether got (one table's dump) is that table's
// section of want (a dump of every table).
func containsTable(want, got string) bool {
	head, _, _ := strings.Cut(got, "\n")
	i := strings.Index(want, head+"\n")
	if i < 0 {
		return false
	}
	section := want[i:]
	if j := strings.Index(section[len(head):], "\n## "); j >= 0 {
		section = section[:len(head)+j+1]
	}
	return section == got
}

// TestExclusivePausesTheRunner: a tool taking a projection's lease makes
// its runner yield (state paused, also on the monitor), events appended
// meanwhile wait, and the runner applies them once the tool lets go.
func TestExclusivePausesTheRunner(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, time.Minute)
	d := testdb.New(t, orderview.Migrations)
	store := postgres.New(d.App, d.Projector)
	evs := ordertest.Generate(ordertest.Config{Seed: 5, Tenants: 1, Orders: 10, Customers: 2, Start: time.Now()})
	first, err := projectiontest.Append(ctx, store, evs[:20])
	if err != nil {
		t.Fatal(err)
	}
	r, err := projections.NewRunner(orderview.NewOrderList(orderview.OrderListTables{}), store, d.Projector, projections.RunnerConfig{Registry: order.Registry, DeadLetters: true,
		PollInterval: 50 * time.Millisecond, LeaseRetry: 50 * time.Millisecond, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); r.Run(rctx) }()
	defer func() { stop(); <-done }()
	waitFor(t, 20*time.Second, "the runner to apply the first events", func() bool {
		return !projectiontest.Checkpoint(ctx, t, d.AdminURL, orderview.OrderListName).Position.Less(first)
	})

	x, err := projections.AcquireExclusive(ctx, d.Projector, orderview.OrderListName, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the runner to pause", func() bool { return r.Status().State == projections.StatePaused })
	if _, err := projections.AcquireExclusive(ctx, d.Projector, orderview.OrderListName, time.Second); !errors.Is(err, projections.ErrBusy) {
		t.Errorf("a second tool: %v, want projections.ErrBusy", err)
	}
	mon := projections.NewMonitor(projections.MonitorConfig{App: d.App, Log: store, Names: []string{orderview.OrderListName}})
	st, err := mon.All(ctx)
	if err != nil || st[0].State != projections.StatePaused {
		t.Errorf("monitor says %v (%v), want paused", st, err)
	}
	end, err := projectiontest.Append(ctx, store, evs[20:])
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if cp := projectiontest.Checkpoint(ctx, t, d.AdminURL, orderview.OrderListName); !cp.Position.Less(end) {
		t.Fatal("the paused runner applied events")
	}
	x.Release()
	waitFor(t, 10*time.Second, "the runner to resume and apply the rest", func() bool {
		return !projectiontest.Checkpoint(ctx, t, d.AdminURL, orderview.OrderListName).Position.Less(end)
	})
}
