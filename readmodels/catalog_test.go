package readmodels_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/examples"
	"github.com/strata-es/strata/internal/pgtest"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/projections/projectiontest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// classification is every table the engine's line and the example
// modules' lines declare (db.Classify): the one source of which tables are
// tenant-scoped, tenant-referencing (and how an erasure deals with them)
// or global (and why). It replaced a list of global tables kept here.
func classification(t *testing.T) *db.Classification {
	t.Helper()
	c, err := db.Classify(examples.All().Lines()...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCatalogEnforcesTenancy holds the schema of the engine's line and
// every example module's line to the tenancy rules, in the catalog and at
// run time, with a row of two tenants in every tenant-scoped table
// (projectiontest.CheckTenantTables, which each module's own tests can run
// on its line): a table in no classification or contradicting its
// declaration, a declared table not in the schema, a tenant table without
// FORCE'd row-level security, a tenant policy with USING and WITH CHECK, or
// with a unique key without tenant_id, the application roles able to bypass
// row-level security some other way, or one tenant's row that another
// tenant's transaction reads or writes, fails it. An invalid declaration
// (a tenant-referencing table without an erase mode, a global one without
// its reason) fails db.Classify first. The kit's own test proves each
// check bites.
func TestCatalogEnforcesTenancy(t *testing.T) {
	t.Parallel()
	projectiontest.CheckTenantTables(t, projectiontest.TenantTables{Lines: examples.All().Lines()})
}

// TestProjectionsWriteTenantTables: every table a module's projection
// writes is a tenant table of the schema, declared tenant-scoped by its
// module's line.
func TestProjectionsWriteTenantTables(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	d := testdb.New(t, examples.All().Lines()...)
	conn, err := pgx.Connect(ctx, d.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	cls := classification(t)
	var tenantTables int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'strata' AND c.relkind = 'r' AND a.attname = 'tenant_id'`).Scan(&tenantTables); err != nil {
		t.Fatal(err)
	}
	if tenantTables < 10 {
		t.Errorf("only %d tenant tables inspected", tenantTables)
	}
	// Every module's tables were among them: a module's migration line is
	// covered by this test without a list to keep.
	for _, p := range examples.All().Projections() {
		for _, table := range p.Tables() {
			var hasTenant bool
			if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'strata' AND c.relname = $1 AND a.attname = 'tenant_id')`, table).Scan(&hasTenant); err != nil {
				t.Fatal(err)
			}
			if !hasTenant {
				t.Errorf("projection %s writes table %s, which is not a tenant table of the schema", p.Name(), table)
			}
			if d, ok := cls.Lookup(table); !ok || d.Class != db.ClassTenantScoped {
				t.Errorf("projection %s writes table %s, which its module's line does not declare tenant-scoped (%+v)", p.Name(), table, d)
			}
		}
	}
}
