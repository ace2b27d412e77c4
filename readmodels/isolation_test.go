package readmodels_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/strata-es/strata/examples/orders/orderquery"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/orderview"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/readmodels"
)

const tenantA, tenantB = "t-a", "t-b"

// appTables are the read-model tables the application role reads.
var appTables = []string{"order_details", "order_detail_lines", "order_list", "customer_summaries", "customer_paid_totals", "daily_revenue", "admin_audit"}

// populate writes one paid order for each of tenants A and B (same order
// and customer IDs on purpose) through the store and the projections, and
// an audit row for each tenant.
func populate(ctx context.Context, t *testing.T, d *testdb.DB) {
	t.Helper()
	store := postgres.New(d.App, d.Projector)
	at := time.Date(2026, 4, 1, 9, 0, 0, 0, time.UTC)
	var last event.Position
	for _, tenant := range []string{tenantA, tenantB} {
		var evs []eventstore.NewEvent
		for _, p := range []event.Payload{
			order.Created{OrderID: "o-1", CustomerID: "c-1", Currency: "EUR", At: at},
			order.LineAdded{OrderID: "o-1", ProductID: "p-1", Quantity: 2, UnitPrice: order.Money{Amount: 500, Currency: "EUR"}, At: at},
			order.Placed{OrderID: "o-1", Total: order.Money{Amount: 1000, Currency: "EUR"}, At: at},
			order.Paid{OrderID: "o-1", PaymentReference: "ref", Amount: order.Money{Amount: 1000, Currency: "EUR"}, At: at},
		} {
			typ, sv, data, err := order.Registry.Encode(p)
			if err != nil {
				t.Fatal(err)
			}
			evs = append(evs, eventstore.NewEvent{ID: uuid.NewString(), Type: typ, SchemaVersion: sv, Data: data})
		}
		res, err := store.Append(ctx, eventstore.AppendRequest{Tenant: tenant, Stream: order.StreamID("o-1"), Expected: eventstore.NoStream, Events: evs})
		if err != nil {
			t.Fatal(err)
		}
		last = res.Position
		reader := readmodels.NewDB(d.App)
		if err := reader.RecordAudit(domain.NewContext(ctx, domain.TenantID(tenant)), readmodels.AuditEntry{Subject: "s", Action: "read", Target: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range orderview.All() {
		r, err := projections.NewRunner(p, store, d.Projector, projections.RunnerConfig{Registry: order.Registry})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.CatchUp(ctx, last); err != nil {
			t.Fatal(err)
		}
	}
}

// counts returns, per table, the rows visible in the transaction, and how
// many of them belong to tenant.
func counts(ctx context.Context, t *testing.T, tx pgx.Tx, tenant string) (visible, foreign map[string]int) {
	t.Helper()
	visible, foreign = map[string]int{}, map[string]int{}
	for _, table := range appTables {
		var all, other int
		err := tx.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE tenant_id <> $1) FROM `+table, tenant).Scan(&all, &other)
		if err != nil {
			t.Fatalf("%s: %v", table, err)
		}
		visible[table], foreign[table] = all, other
	}
	return
}

// TestTenantIsolationAsApplicationRole runs as the application role (the
// pools of testdb switch to it) and proves that row-level security, not
// the code, keeps tenants apart.
func TestTenantIsolationAsApplicationRole(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	d := testdb.New(t, orderview.Migrations)
	populate(ctx, t, d)

	t.Run("tenant B reads none of tenant A's rows", func(t *testing.T) {
		err := db.WithTenantTx(domain.NewContext(ctx, tenantB), d.App, func(tx pgx.Tx) error {
			visible, foreign := counts(ctx, t, tx, tenantB)
			for _, table := range appTables {
				if foreign[table] != 0 {
					t.Errorf("%s: tenant B sees %d rows of another tenant", table, foreign[table])
				}
				if visible[table] == 0 {
					t.Errorf("%s: tenant B sees none of its own rows (the test proves nothing)", table)
				}
			}
			// Even asking for tenant A's rows by name finds nothing.
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM order_details WHERE tenant_id = $1`, tenantA).Scan(&n); err != nil {
				return err
			}
			if n != 0 {
				t.Errorf("tenant B reads %d of tenant A's orders by naming the tenant", n)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// And through the query side.
		_, err = orderquery.NewReader(readmodels.NewDB(d.App)).Order(domain.NewContext(ctx, "t-nobody"), "o-1")
		if !errors.Is(err, orderquery.ErrOrderNotFound) {
			t.Errorf("another tenant's order: %v, want not found", err)
		}
	})

	t.Run("a transaction without a tenant reads nothing", func(t *testing.T) {
		tx, err := d.App.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		visible, _ := counts(ctx, t, tx, "")
		for _, table := range appTables {
			if visible[table] != 0 {
				t.Errorf("%s: %d rows visible without a tenant", table, visible[table])
			}
		}
		if _, err := orderquery.NewReader(readmodels.NewDB(d.App)).Order(ctx, "o-1"); !errors.Is(err, db.ErrNoTenant) {
			t.Errorf("a query without a tenant: %v, want %v", err, db.ErrNoTenant)
		}
	})

	t.Run("a pooled connection reused after tenant A carries nothing", func(t *testing.T) {
		// One connection, so the second transaction surely reuses it.
		pool, err := db.OpenPool(ctx, d.AdminURL, db.PoolConfig{Role: db.RoleApp, MaxConns: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		var pidA, pidNext int
		err = db.WithTenantTx(domain.NewContext(ctx, tenantA), pool, func(tx pgx.Tx) error {
			visible, _ := counts(ctx, t, tx, tenantA)
			if visible["order_details"] != 1 {
				t.Errorf("tenant A sees %d orders, want 1", visible["order_details"])
			}
			return tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pidA)
		})
		if err != nil {
			t.Fatal(err)
		}
		// The reader's pipelined path, then a bare transaction.
		if _, err := orderquery.NewReader(readmodels.NewDB(pool)).Order(domain.NewContext(ctx, tenantA), "o-1"); err != nil {
			t.Fatal(err)
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		var setting *string
		if err := tx.QueryRow(ctx, `SELECT pg_backend_pid(), current_setting('app.tenant_id', true)`).Scan(&pidNext, &setting); err != nil {
			t.Fatal(err)
		}
		if pidNext != pidA {
			t.Fatalf("the pool used another connection (%d, then %d)", pidA, pidNext)
		}
		if setting != nil && *setting != "" {
			t.Errorf("the reused connection still has tenant %q set", *setting)
		}
		visible, _ := counts(ctx, t, tx, "")
		for _, table := range appTables {
			if visible[table] != 0 {
				t.Errorf("%s: %d rows visible on the reused connection", table, visible[table])
			}
		}
	})

	t.Run("a write for tenant A under tenant B's setting is refused", func(t *testing.T) {
		day := time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)
		writes := []struct {
			table, sql string
			args       []any
		}{
			{"order_details", `INSERT INTO order_details (tenant_id, order_id, customer_id, status, currency, version, created_at) VALUES ($1, 'o-x', 'c-1', 'draft', 'EUR', 1, now())`, nil},
			{"order_detail_lines", `INSERT INTO order_detail_lines (tenant_id, order_id, product_id, seq, quantity, unit_price, currency, line_total) VALUES ($1, 'o-x', 'p', 1, 1, 1, 'EUR', 1)`, nil},
			{"order_list", `INSERT INTO order_list (tenant_id, order_id, customer_id, status, currency, created_at, updated_at) VALUES ($1, 'o-x', 'c-1', 'draft', 'EUR', now(), now())`, nil},
			{"customer_summaries", `INSERT INTO customer_summaries (tenant_id, customer_id, orders, open_orders) VALUES ($1, 'c-x', 1, 1)`, nil},
			{"customer_paid_totals", `INSERT INTO customer_paid_totals (tenant_id, customer_id, currency, amount) VALUES ($1, 'c-x', 'EUR', 1)`, nil},
			{"customer_orders", `INSERT INTO customer_orders (tenant_id, order_id, customer_id) VALUES ($1, 'o-x', 'c-x')`, nil},
			{"daily_revenue", `INSERT INTO daily_revenue (tenant_id, day, currency, amount, orders) VALUES ($1, $2, 'EUR', 1, 1)`, []any{day}},
		}
		try := func(pool interface {
			Begin(context.Context) (pgx.Tx, error)
		}, sql string, args []any) error {
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, db.SetTenantSQL, tenantB); err != nil {
				t.Fatal(err)
			}
			_, err = tx.Exec(ctx, sql, append([]any{tenantA}, args...)...)
			return err
		}
		for _, w := range writes {
			// The projector, the only writer of read models: RLS refuses.
			if err := try(d.Projector, w.sql, w.args); db.SQLState(err) != "42501" {
				t.Errorf("%s: projector writing tenant A's row under tenant B: %v, want an RLS violation (42501)", w.table, err)
			}
			// The application role may not write read models at all.
			if err := try(d.App, w.sql, w.args); db.SQLState(err) != "42501" {
				t.Errorf("%s: application role writing: %v, want permission denied (42501)", w.table, err)
			}
		}
		if err := try(d.App, `INSERT INTO admin_audit (tenant_id, subject, action, target) VALUES ($1, 's', 'read', 'x')`, nil); db.SQLState(err) != "42501" {
			t.Errorf("admin_audit: an audit row for tenant A under tenant B: %v, want an RLS violation", err)
		}
		// Updates cannot reach tenant A's rows either.
		tx, err := d.Projector.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, db.SetTenantSQL, tenantB); err != nil {
			t.Fatal(err)
		}
		ct, err := tx.Exec(ctx, `UPDATE order_details SET status = 'cancelled' WHERE tenant_id = $1`, tenantA)
		if err != nil || ct.RowsAffected() != 0 {
			t.Errorf("projector updating tenant A's order under tenant B: %v rows, %v", ct.RowsAffected(), err)
		}
		if _, err := tx.Exec(ctx, `UPDATE order_details SET tenant_id = $1 WHERE tenant_id = $2`, tenantA, tenantB); db.SQLState(err) != "42501" {
			t.Errorf("moving tenant B's row to tenant A: %v, want an RLS violation", err)
		}
	})
}
