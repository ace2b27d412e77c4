package orderview_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/domain/money"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/orderview"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/projections/projectiontest"
)

// TestFoldMatchesApply folds the recorded history of TestGolden (with the
// sums past int64 of overflow.jsonl) through each projection's Fold, via
// Runner.FoldOn, and requires exactly the rows the runner leaves applying
// it event by event: once folding the whole log, once with a bound that
// makes FoldOn write part of the log's rows and leave the rest to the
// runner (CatchUpOn).
func TestFoldMatchesApply(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 2*time.Minute)
	evs := append(projectiontest.Load(t, recordedPath), projectiontest.Load(t, overflowPath)...)

	live := testdb.New(t, orderview.Migrations)
	liveStore := postgres.New(live.App, live.Projector)
	head, err := projectiontest.Append(ctx, liveStore, evs)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, p := range orderview.All() {
		r, err := projections.NewRunner(p, liveStore, live.Projector,
			projections.RunnerConfig{Registry: order.Registry, BatchSize: 7, PerEvent: true, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.CatchUp(ctx, head); err != nil {
			t.Fatalf("%s: %v", p.Name(), err)
		}
		want[p.Name()] = projectiontest.Dump(ctx, t, live.AdminURL, p.Tables()...)
	}
	if !strings.Contains(want[orderview.DailyRevenueName], "|27670116110564327421|") {
		t.Fatalf("the live daily revenue lacks overflow.jsonl's sum past int64:\n%s", want[orderview.DailyRevenueName])
	}

	for _, bound := range []int{math.MaxInt, 20} {
		t.Run(fmt.Sprintf("bound=%d", bound), func(t *testing.T) {
			d := testdb.New(t, orderview.Migrations)
			store := postgres.New(d.App, d.Projector)
			head, err := projectiontest.Append(ctx, store, evs) // this log's positions
			if err != nil {
				t.Fatal(err)
			}
			// COPY FROM is refused on a table with row-level security (a
			// rebuild enables it on its shadow tables after the fold).
			var stmts []string
			for _, p := range orderview.All() {
				for _, table := range p.Tables() {
					id := pgx.Identifier{db.Schema, table}.Sanitize()
					stmts = append(stmts, "ALTER TABLE "+id+" NO FORCE ROW LEVEL SECURITY", "ALTER TABLE "+id+" DISABLE ROW LEVEL SECURITY")
				}
			}
			projectiontest.Exec(ctx, t, d.AdminURL, stmts...)

			stoppedEarly := false
			for _, p := range orderview.All() {
				x, err := projections.AcquireExclusive(ctx, d.Projector, p.Name(), 10*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				r, err := projections.NewRunner(p, store, d.Projector,
					projections.RunnerConfig{Registry: order.Registry, BatchSize: 7, CatchUpBatch: 16, Logger: quietLogger()})
				if err != nil {
					t.Fatal(err)
				}
				folded, err := r.FoldOn(ctx, x, head, bound)
				if err != nil {
					t.Fatalf("%s: %v", p.Name(), err)
				}
				if folded.NotFolded != "" || folded.Rows == 0 {
					t.Fatalf("%s: folded %+v", p.Name(), folded)
				}
				if folded.Checkpoint != head {
					if folded.Rows <= int64(bound) {
						t.Errorf("%s: the fold stopped at %s (head %s) with %d rows, bound %d", p.Name(), folded.Checkpoint, head, folded.Rows, bound)
					}
					stoppedEarly = true
				}
				if err := r.CatchUpOn(ctx, x, head); err != nil {
					t.Fatalf("%s: catch up after the fold: %v", p.Name(), err)
				}
				x.Release()
				if cp := projectiontest.Checkpoint(ctx, t, d.AdminURL, p.Name()); cp.Position != head {
					t.Errorf("%s: checkpoint %s, want %s", p.Name(), cp.Position, head)
				}
				if got := projectiontest.Dump(ctx, t, d.AdminURL, p.Tables()...); got != want[p.Name()] {
					t.Errorf("%s: folded rows differ from event-by-event rows:\n%s", p.Name(), projectiontest.Diff(want[p.Name()], got))
				}
			}
			if bound != math.MaxInt && !stoppedEarly {
				t.Errorf("no fold stopped at the bound of %d rows", bound)
			}
		})
	}
}

// TestFoldMissingRow: an event for an order whose row does not exist
// fails the fold wherever Apply's statement fails with ErrMissingRow, and
// a payload a projection does not take fails it with ErrUnexpectedEvent
// (TestFoldEdgeCases checks the same against the SQL).
func TestFoldMissingRow(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	add := lineAdded("t-1", "o-1", 2, "p-1", 1, 100, "EUR")
	remove := lineRemoved("t-1", "o-1", 2, "p-1")
	place := placed("t-1", "o-1", 2, 100, at)
	pay := paid("t-1", "o-1", 2, 100, "EUR", at)
	cancel := cancelled("t-1", "o-1", 2, at)
	missing := map[string][]projections.Event{
		orderview.OrderDetailsName:    {add, remove, place, pay, cancel},
		orderview.OrderListName:       {place, pay, cancel},
		orderview.CustomerSummaryName: {pay, cancel},
	}
	for _, p := range orderview.All() {
		fp := p.(projections.Folder)
		for _, ev := range missing[p.Name()] {
			if err := fp.NewFold().Add(ev); !errors.Is(err, projections.ErrMissingRow) {
				t.Errorf("%s: %s without order.created: %v, want ErrMissingRow", p.Name(), ev.Type, err)
			}
		}
		// A payload the projection does not take, under one of its types.
		wrong := orderEvent("t-1", "o-1", 1, foreign{})
		wrong.Type = p.EventTypes()[0]
		if err := fp.NewFold().Add(wrong); !errors.Is(err, projections.ErrUnexpectedEvent) {
			t.Errorf("%s: a %T payload: %v, want ErrUnexpectedEvent", p.Name(), wrong.Payload, err)
		}
	}
	// daily_revenue's upsert needs no order row.
	if err := orderview.NewDailyRevenue(orderview.DailyRevenueTables{}).NewFold().Add(pay); err != nil {
		t.Errorf("daily_revenue: order.paid without order.created: %v", err)
	}
}

// TestFoldEdgeCases applies short histories made for the SQL's corners
// both ways, event by event, and requires the fold to fail exactly where
// Apply's statements fail (and at no other event), and to leave the same
// rows up to there: lines added twice (the line keeps its first unit
// price), removed and added again, removed when absent; status changes in
// any order; open orders below zero; sums past int64 (numeric) and bigint
// overflows (errors); CHECK constraints, missing rows, duplicates, texts
// PostgreSQL refuses, payloads of another order.
func TestFoldEdgeCases(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 2*time.Minute)
	minus3 := time.FixedZone("minus3", -3*3600)
	t0 := time.Date(2026, 5, 1, 22, 30, 0, 123456789, minus3) // 2026-05-02 UTC
	later := func(h int) time.Time { return t0.Add(time.Duration(h) * time.Hour) }
	const max = math.MaxInt64
	const (
		details  = orderview.OrderDetailsName
		list     = orderview.OrderListName
		customer = orderview.CustomerSummaryName
		revenue  = orderview.DailyRevenueName
	)
	tests := []struct {
		name  string
		evs   []projections.Event
		fails map[string]int // projection -> index of the event Apply fails at
	}{
		{name: "valid", evs: []projections.Event{
			created("t-a", "o-1", 1, "c-1", "EUR", t0),
			lineAdded("t-a", "o-1", 2, "p-1", 2, 100, "EUR"),
			lineAdded("t-a", "o-1", 3, "p-2", 1, 50, "EUR"),
			lineAdded("t-a", "o-1", 4, "p-1", 3, 120, "EUR"), // the line keeps 100
			lineRemoved("t-a", "o-1", 5, "p-2"),
			lineRemoved("t-a", "o-1", 6, "p-9"), // not on the order
			lineAdded("t-a", "o-1", 7, "p-2", 1, 70, "USD"),
			placed("t-a", "o-1", 8, 999, time.Time{}), // placed_at is not NULL
			lineAdded("t-a", "o-1", 9, "p-3", 4, -5, "EUR"),
			paid("t-a", "o-1", 10, 999, "EUR", later(1)),
			cancelled("t-a", "o-1", 11, later(2)),
			paid("t-a", "o-1", 12, -7, "EUR", later(3)),
			created("t-a", "o-2", 1, "c-1", "EUR", later(4)),
			cancelled("t-a", "o-2", 2, later(5)),
			created("t-a", "o-3", 1, "c-1", "GBP", later(6)),
			lineAdded("t-a", "o-3", 2, "p-1", 1, 10, "GBP"),
			lineRemoved("t-a", "o-3", 3, "p-1"),
			created("t-b", "o-1", 1, "c-2", "EUR", later(7)),
			paid("t-b", "o-1", 2, 0, "EUR", later(26)),
			created("t-b", "o-2", 1, "c-2", "EUR", later(8)),
			paid("t-b", "o-2", 2, max, "EUR", later(27)),
			paid("t-b", "o-2", 3, max, "EUR", later(27)),
			paid("t-b", "o-2", 4, math.MinInt64, "USD", later(28)),
			paid("t-b", "o-2", 5, math.MinInt64, "USD", later(28)),
		}},
		{name: "line total overflows", fails: map[string]int{details: 1}, evs: []projections.Event{
			created("t-a", "o-1", 1, "c-1", "EUR", t0),
			lineAdded("t-a", "o-1", 2, "p-1", 2, max, "EUR"),
		}},
		{name: "quantity overflows", fails: map[string]int{details: 2}, evs: []projections.Event{
			created("t-a", "o-1", 1, "c-1", "EUR", t0),
			lineAdded("t-a", "o-1", 2, "p-1", max, 0, "EUR"),
			lineAdded("t-a", "o-1", 3, "p-1", 1, 0, "EUR"),
		}},
		{name: "line total overflows at the line's unit price", fails: map[string]int{details: 2}, evs: []projections.Event{
			created("t-a", "o-1", 1, "c-1", "EUR", t0),
			lineAdded("t-a", "o-1", 2, "p-1", 1, 1<<62, "EUR"),
			lineAdded("t-a", "o-1", 3, "p-1", 1, 0, "EUR"),
		}},
		{name: "order total overflows", fails: map[string]int{details: 2}, evs: []projections.Event{
			created("t-a", "o-1", 1, "c-1", "EUR", t0),
			lineAdded("t-a", "o-1", 2, "p-1", 1, max, "EUR"),
			lineAdded("t-a", "o-1", 3, "p-2", 1, 1, "EUR"),
		}},
		{name: "removal overflows the total", fails: map[string]int{details: 4}, evs: []projections.Event{
			created("t-a", "o-1", 1, "c-1", "EUR", t0),
			lineAdded("t-a", "o-1", 2, "p-1", 1, 5, "EUR"),
			lineAdded("t-a", "o-1", 3, "p-2", 1, math.MinInt64, "EUR"),
			lineAdded("t-a", "o-1", 4, "p-3", 1, -5, "EUR"),
			lineRemoved("t-a", "o-1", 5, "p-1"),
		}},
		{name: "quantity zero", fails: map[string]int{details: 1}, evs: []projections.Event{
			created("t-a", "o-1", 1, "c-1", "EUR", t0),
			lineAdded("t-a", "o-1", 2, "p-1", 0, 5, "EUR"),
		}},
		{name: "negative quantity on an existing line", fails: map[string]int{details: 2}, evs: []projections.Event{
			created("t-a", "o-1", 1, "c-1", "EUR", t0),
			lineAdded("t-a", "o-1", 2, "p-1", 2, 5, "EUR"),
			lineAdded("t-a", "o-1", 3, "p-1", -1, 5, "EUR"),
		}},
		{name: "line of a missing order", fails: map[string]int{details: 0}, evs: []projections.Event{
			lineAdded("t-a", "o-1", 1, "p-1", 1, 5, "EUR"),
		}},
		{name: "removal from a missing order", fails: map[string]int{details: 0}, evs: []projections.Event{
			lineRemoved("t-a", "o-1", 1, "p-1"),
		}},
		{name: "placed without order", fails: map[string]int{details: 1, list: 1}, evs: []projections.Event{
			created("t-a", "o-1", 1, "c-1", "EUR", t0),
			placed("t-a", "o-2", 1, 5, t0),
		}},
		{name: "paid without order", fails: map[string]int{details: 0, list: 0, customer: 0}, evs: []projections.Event{
			paid("t-a", "o-1", 1, 5, "EUR", t0),
		}},
		{name: "cancelled without order", fails: map[string]int{details: 1, list: 1, customer: 1}, evs: []projections.Event{
			created("t-b", "o-1", 1, "c-1", "EUR", t0), // another tenant's
			cancelled("t-a", "o-1", 1, t0),
		}},
		{name: "created twice", fails: map[string]int{details: 1, list: 1, customer: 1}, evs: []projections.Event{
			created("t-a", "o-1", 1, "c-1", "EUR", t0),
			created("t-a", "o-1", 2, "c-2", "EUR", t0),
		}},
		{name: "version zero", fails: map[string]int{details: 0}, evs: []projections.Event{
			created("t-a", "o-1", 0, "c-1", "EUR", t0),
		}},
		{name: "version zero on update", fails: map[string]int{details: 1}, evs: []projections.Event{
			created("t-a", "o-1", 1, "c-1", "EUR", t0),
			paid("t-a", "o-1", 0, 5, "EUR", t0),
		}},
		{name: "payload of another order", fails: map[string]int{details: 1, list: 1, customer: 1, revenue: 1}, evs: []projections.Event{
			created("t-a", "o-1", 1, "c-1", "EUR", t0),
			withStream(paid("t-a", "o-2", 2, 5, "EUR", t0), order.StreamID("o-1")),
		}},
		{name: "not an order stream", fails: map[string]int{details: 0, list: 0, customer: 0, revenue: 0}, evs: []projections.Event{
			withStream(paid("t-a", "", 1, 5, "EUR", t0), "cart-1"),
		}},
		{name: "NUL in a product", fails: map[string]int{details: 1}, evs: []projections.Event{
			created("t-a", "o-1", 1, "c-1", "EUR", t0),
			lineAdded("t-a", "o-1", 2, "p\x00", 1, 5, "EUR"),
		}},
		{name: "invalid UTF-8 in a currency", fails: map[string]int{details: 0, list: 0}, evs: []projections.Event{
			created("t-a", "o-1", 1, "c-1", "E\xffR", t0),
		}},
		{name: "invalid UTF-8 in a paid currency", fails: map[string]int{customer: 1, revenue: 1}, evs: []projections.Event{
			created("t-a", "o-1", 1, "c-1", "EUR", t0),
			paid("t-a", "o-1", 1, 5, "E\xffR", t0),
		}},
		{name: "invalid tenant", fails: map[string]int{details: 0, list: 0, customer: 0, revenue: 1}, evs: []projections.Event{
			created("Bad", "o-1", 1, "c-1", "EUR", t0),
			paid("Bad", "o-1", 2, 5, "EUR", t0),
		}},
	}
	// The folds write into a second set of tables, without row-level
	// security (COPY FROM refuses it); every case starts from empty tables.
	d := testdb.New(t, orderview.Migrations)
	rename := map[string]string{}
	var create, truncate []string
	for _, p := range orderview.All() {
		for _, table := range p.Tables() {
			rename[table] = table + "__fold"
			from, to := pgx.Identifier{db.Schema, table}.Sanitize(), pgx.Identifier{db.Schema, rename[table]}.Sanitize()
			create = append(create, "CREATE TABLE "+to+" (LIKE "+from+" INCLUDING ALL)",
				"GRANT SELECT, INSERT ON "+to+" TO "+db.RoleProjector)
			truncate = append(truncate, "TRUNCATE "+from+", "+to)
		}
	}
	projectiontest.Exec(ctx, t, d.AdminURL, create...)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			projectiontest.Exec(ctx, t, d.AdminURL, truncate...)
			checkFold(ctx, t, d, rename, tc.evs, tc.fails)
		})
	}
}

// checkFold applies evs to each projection's live tables event by event
// (Apply, as the runner sends it) until one fails, folds them into the
// tables rename names, and compares the rows. fails names the event at
// which Apply fails, per projection (none when absent): the fold must
// fail there too, and not before.
func checkFold(ctx context.Context, t *testing.T, d *testdb.DB, rename map[string]string, evs []projections.Event, fails map[string]int) {
	for _, p := range orderview.All() {
		handles := map[string]bool{}
		for _, typ := range p.EventTypes() {
			handles[typ] = true
		}
		want, ok := fails[p.Name()]
		if !ok {
			want = -1
		}
		fold := p.(projections.Retargetable).WithTables(rename).(projections.Folder).NewFold()
		failed := -1
		for i, ev := range evs {
			if !handles[ev.Type] {
				continue
			}
			applyErr, foldErr := applyEvent(ctx, d.Projector, p, ev), fold.Add(ev)
			if (applyErr == nil) != (foldErr == nil) {
				t.Fatalf("%s: event %d (%s): Apply: %v; fold: %v", p.Name(), i, ev.Type, applyErr, foldErr)
			}
			for _, kind := range []error{projections.ErrMissingRow, projections.ErrUnexpectedEvent} {
				if errors.Is(applyErr, kind) && !errors.Is(foldErr, kind) {
					t.Errorf("%s: event %d (%s): Apply: %v; fold: %v, want %v", p.Name(), i, ev.Type, applyErr, foldErr, kind)
				}
			}
			if applyErr != nil {
				t.Logf("%s: event %d (%s) fails: Apply: %v; fold: %v", p.Name(), i, ev.Type, applyErr, foldErr)
				failed = i
				break
			}
		}
		if failed != want {
			t.Errorf("%s: Apply failed at event %d, the test expects %d", p.Name(), failed, want)
		}
		writeFold(ctx, t, d.Projector, fold)
		for _, table := range p.Tables() {
			live := projectiontest.Dump(ctx, t, d.AdminURL, table)
			folded := strings.Replace(projectiontest.Dump(ctx, t, d.AdminURL, rename[table]), rename[table], table, 1)
			if folded != live {
				t.Errorf("%s: folded rows differ from Apply's:\n%s", table, projectiontest.Diff(live, folded))
			}
		}
	}
}

// applyEvent applies ev as the runner does, in a transaction of its own
// under the event's tenant: Apply's statements and their checks.
func applyEvent(ctx context.Context, pool *pgxpool.Pool, p projections.Projection, ev projections.Event) error {
	b := &pgx.Batch{}
	if err := p.Apply(b, ev); err != nil {
		return err
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, db.SetTenantSQL, ev.Tenant); err != nil {
		return err
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// writeFold COPYs the fold's rows, as FoldOn does, and checks Rows.
func writeFold(ctx context.Context, t *testing.T, pool *pgxpool.Pool, f projections.Fold) {
	t.Helper()
	rows := f.Rows()
	var n int64
	err := pool.AcquireFunc(ctx, func(c *pgxpool.Conn) error {
		for _, ft := range f.Tables() {
			k, err := c.Conn().CopyFrom(ctx, pgx.Identifier{ft.Table}, ft.Columns, ft.Rows)
			if err != nil {
				return fmt.Errorf("COPY into %s: %w", ft.Table, err)
			}
			n += k
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(rows) {
		t.Errorf("the fold holds %d rows, COPY wrote %d", rows, n)
	}
}

func orderEvent(tenant, id string, version int64, p event.Payload) projections.Event {
	return projections.Event{Record: event.Record{ID: uuid.NewString(), Tenant: tenant, Stream: order.StreamID(id),
		Version: version, Type: p.EventType()}, Payload: p}
}

// foreign is a payload no order projection takes.
type foreign struct{}

func (foreign) EventType() string { return "other.event" }

func withStream(ev projections.Event, stream string) projections.Event {
	ev.Stream = stream
	return ev
}

func created(tenant, id string, v int64, customer, currency string, at time.Time) projections.Event {
	return orderEvent(tenant, id, v, order.Created{OrderID: id, CustomerID: customer, Currency: currency, At: at})
}

func lineAdded(tenant, id string, v int64, product string, qty, unit int64, currency string) projections.Event {
	return orderEvent(tenant, id, v, order.LineAdded{OrderID: id, ProductID: product, Quantity: qty,
		UnitPrice: money.Money{Amount: unit, Currency: currency}})
}

func lineRemoved(tenant, id string, v int64, product string) projections.Event {
	return orderEvent(tenant, id, v, order.LineRemoved{OrderID: id, ProductID: product})
}

func placed(tenant, id string, v int64, total int64, at time.Time) projections.Event {
	return orderEvent(tenant, id, v, order.Placed{OrderID: id, Total: money.Money{Amount: total, Currency: "EUR"}, At: at})
}

func paid(tenant, id string, v int64, amount int64, currency string, at time.Time) projections.Event {
	return orderEvent(tenant, id, v, order.Paid{OrderID: id, Amount: money.Money{Amount: amount, Currency: currency}, At: at})
}

func cancelled(tenant, id string, v int64, at time.Time) projections.Event {
	return orderEvent(tenant, id, v, order.Cancelled{OrderID: id, At: at})
}
