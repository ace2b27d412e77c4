package projections_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/ordertest"
	"github.com/strata-es/strata/examples/orders/orderview"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/projections/projectiontest"
)

// panicky is the order list with a module bug: its code panics on every
// event of one tenant's one stream, in both paths (and in a queued
// statement's callback when asked).
type panicky struct {
	*orderview.OrderList
	tenant, stream string
	inCallback     bool
}

func (p *panicky) hit(b *pgx.Batch, ev projections.Event) {
	if ev.Tenant != p.tenant || ev.Stream != p.stream {
		return
	}
	if p.inCallback {
		b.Queue(`SELECT 1`).QueryRow(func(pgx.Row) error { panic("module bug in a callback") })
		return
	}
	var m map[string]int
	m["boom"]++ // a nil map: the kind of bug that reaches production
}

func (p *panicky) Apply(b *pgx.Batch, ev projections.Event) error {
	p.hit(b, ev)
	return p.OrderList.Apply(b, ev)
}

func (p *panicky) ApplyBatch(b *pgx.Batch, evs []projections.Event) error {
	for _, ev := range evs {
		p.hit(b, ev)
	}
	return p.OrderList.ApplyBatch(b, evs)
}

// TestPanickingProjectionParksItsStream (issue 29, ARCHITECTURE decision
// 17): a projection's code that panics on one tenant's stream parks that
// stream, with the panic in the dead letter, and every other stream and
// tenant is applied; the runner (and the process it runs in) goes on.
// Before the runner recovered module panics, the first one ended the test
// binary.
func TestPanickingProjectionParksItsStream(t *testing.T) {
	t.Parallel()
	for _, inCallback := range []bool{false, true} {
		name := "in Apply"
		if inCallback {
			name = "in a queued callback"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t, time.Minute)
			d := testdb.New(t, orderview.Migrations)
			store := postgres.New(d.App, d.Projector)
			evs := ordertest.Generate(ordertest.Config{Seed: 11, Tenants: 3, Orders: 12, Customers: 3, Start: time.Now()})
			end, err := projectiontest.Append(ctx, store, evs)
			if err != nil {
				t.Fatal(err)
			}
			victim := evs[len(evs)/2]
			p := &panicky{OrderList: orderview.NewOrderList(orderview.OrderListTables{}), tenant: victim.Tenant, stream: victim.Stream, inCallback: inCallback}
			r, err := projections.NewRunner(p, store, d.Projector, projections.RunnerConfig{Registry: order.Registry, DeadLetters: true,
				Failures: projections.FailurePolicy{Attempts: 1}, PollInterval: 20 * time.Millisecond, Logger: quietLogger()})
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
			if cp.ParkedStreams != 1 || cp.Status != "running" {
				t.Errorf("checkpoint: %d parked streams, status %s; want 1 and running", cp.ParkedStreams, cp.Status)
			}
			var others []ordertest.Event
			for _, e := range evs {
				if e.Tenant != victim.Tenant || e.Stream != victim.Stream {
					others = append(others, e)
				}
			}
			want, err := ordertest.Expected(others)
			if err != nil {
				t.Fatal(err)
			}
			if got := ordertest.Dump(ctx, t, d.AdminURL, "order_list"); !containsTable(want, got) {
				t.Errorf("the other streams' rows differ from the oracle without the parked stream")
			}
			conn, err := pgx.Connect(ctx, d.AdminURL)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(context.Background())
			var stream, cause string
			if err := conn.QueryRow(ctx, `SELECT stream_id, error FROM strata.dead_letters WHERE projection = $1 AND tenant_id = $2 ORDER BY id LIMIT 1`,
				orderview.OrderListName, victim.Tenant).Scan(&stream, &cause); err != nil {
				t.Fatal(err)
			}
			if stream != victim.Stream || !strings.Contains(cause, "panicked") {
				t.Errorf("dead letter of %s: %q, want %s with the panic", stream, cause, victim.Stream)
			}
		})
	}
}
