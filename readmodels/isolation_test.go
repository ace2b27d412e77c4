package readmodels_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/domain/money"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/orderquery"
	"github.com/strata-es/strata/examples/orders/orderview"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/readmodels"
)

const tenantA, tenantB = "t-a", "t-b"

// The run-time isolation of every tenant-scoped table — a row of each of
// two tenants, read and written by strata_app and strata_projector under
// the other's setting — is projectiontest.CheckTenantTables' (run over the
// engine's and every module's line by catalog_test.go). The tests here
// follow real rows, written by the order module's projections, through the
// query side and through the connection pool.

// appTables are the tenant-scoped tables of the engine's and the example
// modules' lines that the application role may read (db.Classify and the
// role's privileges): no list to keep.
func appTables(ctx context.Context, t *testing.T, d *testdb.DB) []string {
	t.Helper()
	conn, err := pgx.Connect(ctx, d.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var out []string
	for _, table := range classification(t).Tables() {
		if table.Class != db.ClassTenantScoped {
			continue
		}
		var readable bool
		if err := conn.QueryRow(ctx, `SELECT has_table_privilege($1, $2, 'SELECT')`, db.RoleApp, db.Schema+"."+table.Name).Scan(&readable); err != nil {
			t.Fatal(err)
		}
		if readable {
			out = append(out, table.Name)
		}
	}
	return out
}

// populated are the tables holding rows of tenant (read as a superuser).
func populated(ctx context.Context, t *testing.T, d *testdb.DB, tables []string, tenant string) map[string]bool {
	t.Helper()
	conn, err := pgx.Connect(ctx, d.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	out := map[string]bool{}
	for _, table := range tables {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+db.Schema+`.`+table+` WHERE tenant_id = $1`, tenant).Scan(&n); err != nil {
			t.Fatal(err)
		}
		out[table] = n > 0
	}
	return out
}

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
			order.LineAdded{OrderID: "o-1", ProductID: "p-1", Quantity: 2, UnitPrice: money.Money{Amount: 500, Currency: "EUR"}, At: at},
			order.Placed{OrderID: "o-1", Total: money.Money{Amount: 1000, Currency: "EUR"}, At: at},
			order.Paid{OrderID: "o-1", PaymentReference: "ref", Amount: money.Money{Amount: 1000, Currency: "EUR"}, At: at},
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
// many of them belong to another tenant than tenant.
func counts(ctx context.Context, t *testing.T, tx pgx.Tx, tables []string, tenant string) (visible, foreign map[string]int) {
	t.Helper()
	visible, foreign = map[string]int{}, map[string]int{}
	for _, table := range tables {
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
	d := testdb.New(t, examples.All().Lines()...)
	populate(ctx, t, d)
	tables := appTables(ctx, t, d)
	filled := populated(ctx, t, d, tables, tenantB)
	// The order module's read models and the audit trail hold rows of
	// both tenants: the checks below see real rows there.
	for _, p := range orderview.All() {
		for _, table := range append(p.Tables(), "admin_audit") {
			if slices.Contains(tables, table) && !filled[table] {
				t.Fatalf("%s holds no row of tenant B after populate: the test would prove nothing", table)
			}
		}
	}

	t.Run("tenant B reads none of tenant A's rows", func(t *testing.T) {
		err := db.WithTenantTx(domain.NewContext(ctx, tenantB), d.App, func(tx pgx.Tx) error {
			visible, foreign := counts(ctx, t, tx, tables, tenantB)
			for _, table := range tables {
				if foreign[table] != 0 {
					t.Errorf("%s: tenant B sees %d rows of another tenant", table, foreign[table])
				}
				if filled[table] && visible[table] == 0 {
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
		visible, _ := counts(ctx, t, tx, tables, "")
		for _, table := range tables {
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
			visible, _ := counts(ctx, t, tx, tables, tenantA)
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
		visible, _ := counts(ctx, t, tx, tables, "")
		for _, table := range tables {
			if visible[table] != 0 {
				t.Errorf("%s: %d rows visible on the reused connection", table, visible[table])
			}
		}
	})
}
