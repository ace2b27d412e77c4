package projectiontest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/internal/pgtest"
	"github.com/strata-es/strata/internal/testdb"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestCatalogCheckCatchesBreaches proves the check bites: a schema with
// one mistake per table must yield a problem naming each table.
func TestCatalogCheckCatchesBreaches(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	d := testdb.New(t)
	conn, err := pgx.Connect(ctx, d.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	const ok = `tenant_id text NOT NULL CHECK (tenant_id <> ''), k text NOT NULL`
	const pol = `USING (tenant_id = current_setting('app.tenant_id', true)) WITH CHECK (tenant_id = current_setting('app.tenant_id', true))`
	setup := []string{
		`CREATE SCHEMA probe`,
		`CREATE TABLE probe.good (` + ok + `, PRIMARY KEY (tenant_id, k))`,
		`ALTER TABLE probe.good ENABLE ROW LEVEL SECURITY`, `ALTER TABLE probe.good FORCE ROW LEVEL SECURITY`,
		`CREATE POLICY good_p ON probe.good TO strata_projector ` + pol,
		`CREATE TABLE probe.no_rls (` + ok + `)`,
		`CREATE TABLE probe.no_force (` + ok + `)`,
		`ALTER TABLE probe.no_force ENABLE ROW LEVEL SECURITY`,
		`CREATE POLICY no_force_p ON probe.no_force TO strata_projector ` + pol,
		`CREATE TABLE probe.using_only (` + ok + `)`,
		`ALTER TABLE probe.using_only ENABLE ROW LEVEL SECURITY`, `ALTER TABLE probe.using_only FORCE ROW LEVEL SECURITY`,
		`CREATE POLICY using_only_p ON probe.using_only FOR SELECT TO strata_app USING (tenant_id = current_setting('app.tenant_id', true))`,
		`CREATE TABLE probe.loose (` + ok + `)`,
		`ALTER TABLE probe.loose ENABLE ROW LEVEL SECURITY`, `ALTER TABLE probe.loose FORCE ROW LEVEL SECURITY`,
		`CREATE POLICY loose_p ON probe.loose TO strata_projector USING (tenant_id = current_setting('app.tenant_id', true) OR k = 'x') WITH CHECK (true)`,
		`CREATE TABLE probe.oracle (` + ok + `, CONSTRAINT oracle_k UNIQUE (k))`,
		`ALTER TABLE probe.oracle ENABLE ROW LEVEL SECURITY`, `ALTER TABLE probe.oracle FORCE ROW LEVEL SECURITY`,
		`CREATE POLICY oracle_p ON probe.oracle TO strata_projector ` + pol,
		`CREATE TABLE probe.nullable (tenant_id text CHECK (tenant_id <> ''), k text)`,
		`ALTER TABLE probe.nullable ENABLE ROW LEVEL SECURITY`, `ALTER TABLE probe.nullable FORCE ROW LEVEL SECURITY`,
		`CREATE POLICY nullable_p ON probe.nullable TO strata_projector ` + pol,
		`CREATE TABLE probe.public_policy (` + ok + `)`,
		`ALTER TABLE probe.public_policy ENABLE ROW LEVEL SECURITY`, `ALTER TABLE probe.public_policy FORCE ROW LEVEL SECURITY`,
		`CREATE POLICY public_policy_p ON probe.public_policy ` + pol,
		`CREATE TABLE probe.truncatable (` + ok + `)`,
		`ALTER TABLE probe.truncatable ENABLE ROW LEVEL SECURITY`, `ALTER TABLE probe.truncatable FORCE ROW LEVEL SECURITY`,
		`CREATE POLICY truncatable_p ON probe.truncatable TO strata_projector ` + pol,
		`GRANT TRUNCATE ON probe.truncatable TO strata_projector`,
		`CREATE TABLE probe.no_tenant (k text)`,
		`CREATE TABLE probe.scoped_no_tenant (k text)`,
		`CREATE TABLE probe.global_with_tenant (` + ok + `)`,
		`ALTER TABLE probe.global_with_tenant ENABLE ROW LEVEL SECURITY`, `ALTER TABLE probe.global_with_tenant FORCE ROW LEVEL SECURITY`,
		`CREATE POLICY global_with_tenant_p ON probe.global_with_tenant TO strata_projector ` + pol,
		`CREATE TABLE probe.app_owned (` + ok + `)`,
		`ALTER TABLE probe.app_owned OWNER TO strata_app`,
		`CREATE FUNCTION probe.definer() RETURNS int LANGUAGE sql SECURITY DEFINER AS 'SELECT 1'`,
		`CREATE VIEW probe.owner_view AS SELECT * FROM probe.good`,
	}
	for _, s := range setup {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	// The probe's line declares every table but no_tenant; two of them
	// against what the schema has.
	probe := db.Line{Name: "probe", Tables: []db.Table{db.TenantTable("scoped_no_tenant"), db.GlobalTable("global_with_tenant", "a probe")}}
	for _, name := range []string{"good", "no_rls", "no_force", "using_only", "loose", "oracle", "nullable", "public_policy", "truncatable", "app_owned"} {
		probe.Tables = append(probe.Tables, db.TenantTable(name))
	}
	cls, err := db.Classify(probe)
	if err != nil {
		t.Fatal(err)
	}
	problems, err := catalogProblems(ctx, conn, "probe", cls)
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(problems, "\n")
	for _, want := range []string{"no_rls: row-level security is not enabled", "no_force: row-level security is not FORCE'd",
		"using_only has no policy with both USING", "loose: policy loose_p USING", "loose: policy loose_p WITH CHECK",
		"oracle: unique index oracle_k", "nullable.tenant_id is nullable", "public_policy: policy public_policy_p applies to role public",
		"truncatable: strata_projector may TRUNCATE", "no_tenant is in no classification", "app_owned is owned by strata_app",
		"scoped_no_tenant is declared tenant-scoped but has no tenant_id column", "global_with_tenant has a tenant_id column but is declared global",
		"function definer is SECURITY DEFINER", "view owner_view is not security_invoker"} {
		if !strings.Contains(all, want) {
			t.Errorf("no problem reported like %q; got:\n%s", want, all)
		}
	}
	for _, p := range problems {
		if strings.HasPrefix(p, "good") {
			t.Errorf("false alarm on the good table: %s", p)
		}
	}
}

// TestIsolationCheckCatchesBreaches proves the run-time half bites: in a
// schema of tables with one hole each in their policies, each hole is
// reported for its table, a table whose rows no role reads is reported as
// proving nothing, and a well-kept table (whose row the kit makes from a
// status list, a JSON object and a two-column CHECK) is not. A table the
// kit cannot fill (a foreign key) is reported until the test gives a row.
func TestIsolationCheckCatchesBreaches(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	d := testdb.New(t)
	conn, err := pgx.Connect(ctx, d.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	const cols = `tenant_id text NOT NULL CHECK (tenant_id ~ '^[a-z0-9-]{1,63}$'), k text NOT NULL DEFAULT 'k',
status text NOT NULL CHECK (status IN ('draft', 'placed')), doc jsonb NOT NULL CHECK (jsonb_typeof(doc) = 'object'),
lo integer NOT NULL, hi integer NOT NULL, CHECK (lo < hi)`
	const tenant = `tenant_id = current_setting('app.tenant_id', true)`
	table := func(name string, policies ...string) []string {
		out := []string{
			`CREATE TABLE iso.` + name + ` (` + cols + `, PRIMARY KEY (tenant_id, k))`,
			`ALTER TABLE iso.` + name + ` ENABLE ROW LEVEL SECURITY`, `ALTER TABLE iso.` + name + ` FORCE ROW LEVEL SECURITY`,
			`GRANT SELECT ON iso.` + name + ` TO strata_app`,
			`GRANT SELECT, INSERT, UPDATE, DELETE ON iso.` + name + ` TO strata_projector`,
		}
		for i, p := range policies {
			out = append(out, fmt.Sprintf(`CREATE POLICY %s_%d ON iso.%s %s`, name, i, name, p))
		}
		return out
	}
	app := `FOR SELECT TO strata_app USING (` + tenant + `)`
	projector := `TO strata_projector USING (` + tenant + `) WITH CHECK (` + tenant + `)`
	setup := [][]string{
		{`CREATE SCHEMA iso`, `GRANT USAGE ON SCHEMA iso TO strata_app, strata_projector`},
		table("good", app, projector),
		table("leaky_read", `FOR SELECT TO strata_app USING (true)`, projector),
		table("leaky_write", app, `TO strata_projector USING (`+tenant+`) WITH CHECK (true)`),
		// A loose USING reaches other tenants' rows (the WITH CHECK on
		// the tenant still keeps an update from writing one).
		table("loose_using", app, `TO strata_projector USING (true) WITH CHECK (`+tenant+`)`),
		table("open", app, `TO strata_projector USING (true) WITH CHECK (true)`),
		table("unread"),
		{`CREATE TABLE iso.parent (id text PRIMARY KEY)`, `INSERT INTO iso.parent VALUES ('p-1')`,
			`CREATE TABLE iso.child (tenant_id text NOT NULL, parent text NOT NULL REFERENCES iso.parent (id), PRIMARY KEY (tenant_id, parent))`,
			`ALTER TABLE iso.child ENABLE ROW LEVEL SECURITY`, `ALTER TABLE iso.child FORCE ROW LEVEL SECURITY`,
			`GRANT SELECT, INSERT, UPDATE, DELETE ON iso.child TO strata_projector`,
			`CREATE POLICY child_p ON iso.child ` + projector},
	}
	for _, group := range setup {
		for _, s := range group {
			if _, err := conn.Exec(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
	}
	for _, tt := range []struct {
		table string
		given Row
		want  []string // every one reported; none: nothing reported
	}{
		{table: "good"},
		{table: "leaky_read", want: []string{"strata_app under tenant B's setting reads 1 row(s) of another tenant",
			"strata_app reads 2 row(s) in a transaction without a tenant"}},
		// (Moving B's row to A is refused all the same: the new row of an
		// UPDATE must pass the SELECT policies' USING too.)
		{table: "leaky_write", want: []string{"strata_projector writing tenant A's row under tenant B's setting: accepted"}},
		{table: "loose_using", want: []string{"strata_projector under tenant B's setting reads 1 row(s) of another tenant",
			"strata_projector deletes 1 of tenant A's row(s)"}},
		{table: "open", want: []string{"strata_projector writing tenant A's row under tenant B's setting: accepted",
			"strata_projector moves tenant B's row to tenant A: 1 row(s)", "strata_projector under tenant B's setting reads 1 row(s) of another tenant",
			"strata_projector updates 1 of tenant A's row(s)", "strata_projector deletes 1 of tenant A's row(s)"}},
		{table: "unread", want: []string{"neither strata_app nor strata_projector reads tenant B's own row"}},
		{table: "child", want: []string{"no row the kit can make is accepted"}},
		{table: "child", given: Row{"parent": "p-1"}},
	} {
		problems := isolationProblems(ctx, conn, d.App, d.Projector, "iso", tt.table, tt.given)
		all := strings.Join(problems, "\n")
		if len(tt.want) == 0 && len(problems) > 0 {
			t.Errorf("%s (row %v): false alarm:\n%s", tt.table, tt.given, all)
		}
		for _, w := range tt.want {
			if !strings.Contains(all, tt.table+": "+w) {
				t.Errorf("%s: no problem reported like %q; got:\n%s", tt.table, w, all)
			}
		}
	}
}
