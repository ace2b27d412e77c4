package readmodels_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/examples"
	"github.com/strata-es/strata/internal/pgtest"
	"github.com/strata-es/strata/internal/testdb"
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

// crossTenantPolicies are the policies allowed not to filter by tenant:
// the projector's read of the whole log (read-only, projector only).
var crossTenantPolicies = map[string]struct{ table, cmd, role string }{
	"events_projector_read_all": {"events", "r", db.RoleProjector},
}

// tenantExpr is the only tenant condition a policy may use.
var tenantExpr = regexp.MustCompile(`^\(tenant_id = current_setting\('app\.tenant_id'::text, true\)\)$`)

// catalogProblems inspects schema in pg_catalog and lists every table in
// no classification of cls or contradicting its declaration (ARCHITECTURE
// decision 13), every breach of decision 3 for every table that has a
// tenant_id column (so tables added later are covered without touching
// this test), plus the rules on ownership, roles, functions and views.
func catalogProblems(ctx context.Context, conn *pgx.Conn, schema string, cls *db.Classification) ([]string, error) {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	rep, err := cls.Inspect(ctx, conn, schema)
	if err != nil {
		return nil, err
	}
	for _, name := range rep.Unclassified {
		add("%s is in no classification: declare it with its migration line (tenant-scoped, tenant-referencing with its erase mode, or global with the reason)", name)
	}
	for _, m := range rep.Mismatched {
		add("%s", m)
	}

	type table struct {
		oid                     uint32
		name                    string
		rls, force              bool
		tenantAttnum            int16
		tenantNotNull, hasCheck bool
	}
	rows, err := conn.Query(ctx, `
SELECT c.oid, c.relname, c.relrowsecurity, c.relforcerowsecurity,
       coalesce(a.attnum, 0), coalesce(a.attnotnull, false),
       EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conrelid = c.oid AND k.contype = 'c' AND a.attnum = ANY (k.conkey))
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p')
ORDER BY c.relname`, schema)
	if err != nil {
		return nil, err
	}
	tables, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (table, error) {
		var t table
		err := r.Scan(&t.oid, &t.name, &t.rls, &t.force, &t.tenantAttnum, &t.tenantNotNull, &t.hasCheck)
		return t, err
	})
	if err != nil {
		return nil, err
	}
	if len(tables) == 0 {
		add("schema %s has no tables", schema)
	}
	for _, t := range tables {
		if t.tenantAttnum == 0 {
			continue // classified above: a tenant-scoped one without tenant_id is a mismatch
		}
		if !t.tenantNotNull {
			add("%s.tenant_id is nullable", t.name)
		}
		if !t.hasCheck {
			add("%s.tenant_id has no CHECK constraint", t.name)
		}
		if !t.rls {
			add("%s: row-level security is not enabled", t.name)
		}
		if !t.force {
			add("%s: row-level security is not FORCE'd (the owner would bypass it)", t.name)
		}

		prows, err := conn.Query(ctx, `
SELECT p.polname, p.polcmd::text, p.polpermissive,
       ARRAY(SELECT CASE WHEN r = 0 THEN 'public' ELSE pg_get_userbyid(r) END FROM unnest(p.polroles) r ORDER BY 1),
       coalesce(pg_get_expr(p.polqual, p.polrelid), ''), coalesce(pg_get_expr(p.polwithcheck, p.polrelid), '')
FROM pg_policy p WHERE p.polrelid = $1 ORDER BY p.polname`, t.oid)
		if err != nil {
			return nil, err
		}
		fullPolicy := false
		for prows.Next() {
			var name, cmd, using, check string
			var permissive bool
			var roles []string
			if err := prows.Scan(&name, &cmd, &permissive, &roles, &using, &check); err != nil {
				prows.Close()
				return nil, err
			}
			for _, r := range roles {
				if r != db.RoleApp && r != db.RoleProjector && r != db.RoleEraser {
					add("%s: policy %s applies to role %s (only %s, %s and %s may have policies)", t.name, name, r, db.RoleApp, db.RoleProjector, db.RoleEraser)
				}
			}
			if x, ok := crossTenantPolicies[name]; ok {
				if x.table != t.name || cmd != x.cmd || !slices.Equal(roles, []string{x.role}) || check != "" {
					add("%s: cross-tenant policy %s is not the read-only %s policy it is allowed to be", t.name, name, x.role)
				}
				continue
			}
			if !tenantExpr.MatchString(using) {
				add("%s: policy %s USING %q does not restrict to the transaction's tenant", t.name, name, using)
			}
			if check != "" && !tenantExpr.MatchString(check) {
				add("%s: policy %s WITH CHECK %q does not restrict to the transaction's tenant", t.name, name, check)
			}
			if using != "" && check != "" && tenantExpr.MatchString(using) && tenantExpr.MatchString(check) {
				fullPolicy = true
			}
		}
		prows.Close()
		if err := prows.Err(); err != nil {
			return nil, err
		}
		if !fullPolicy {
			add("%s has no policy with both USING and WITH CHECK on the tenant", t.name)
		}

		irows, err := conn.Query(ctx, `
SELECT c.relname, $2::int2 = ANY (i.indkey::int2[])
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = $1 AND i.indisunique`, t.oid, t.tenantAttnum)
		if err != nil {
			return nil, err
		}
		for irows.Next() {
			var index string
			var hasTenant bool
			if err := irows.Scan(&index, &hasTenant); err != nil {
				irows.Close()
				return nil, err
			}
			if !hasTenant {
				add("%s: unique index %s does not include tenant_id (an existence oracle across tenants)", t.name, index)
			}
		}
		irows.Close()
		if err := irows.Err(); err != nil {
			return nil, err
		}

		for _, role := range []string{db.RoleApp, db.RoleProjector} {
			var truncate bool
			if err := conn.QueryRow(ctx, `SELECT has_table_privilege($1, $2::oid, 'TRUNCATE')`, role, t.oid).Scan(&truncate); err != nil {
				return nil, err
			}
			if truncate {
				add("%s: %s may TRUNCATE it (TRUNCATE ignores row-level security)", t.name, role)
			}
		}
	}

	// Nothing in the schema belongs to the roles the code runs as.
	orows, err := conn.Query(ctx, `
SELECT c.relname, pg_get_userbyid(c.relowner) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND pg_get_userbyid(c.relowner) = ANY ($2)
UNION ALL
SELECT p.proname, pg_get_userbyid(p.proowner) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = $1 AND pg_get_userbyid(p.proowner) = ANY ($2)`, schema, []string{db.RoleApp, db.RoleProjector})
	if err != nil {
		return nil, err
	}
	for orows.Next() {
		var name, owner string
		if err := orows.Scan(&name, &owner); err != nil {
			orows.Close()
			return nil, err
		}
		add("%s is owned by %s (owners bypass row-level security)", name, owner)
	}
	orows.Close()

	// The roles themselves.
	for _, role := range []string{db.RoleApp, db.RoleProjector} {
		var super, bypass, member bool
		err := conn.QueryRow(ctx, `SELECT rolsuper, rolbypassrls, pg_has_role(oid, $2, 'MEMBER') FROM pg_roles WHERE rolname = $1`,
			role, db.RoleOwner).Scan(&super, &bypass, &member)
		if err != nil {
			return nil, fmt.Errorf("role %s: %w", role, err)
		}
		if super {
			add("role %s is a superuser", role)
		}
		if bypass {
			add("role %s has BYPASSRLS", role)
		}
		if member {
			add("role %s is a member of %s", role, db.RoleOwner)
		}
	}

	// SECURITY DEFINER functions run with their owner's rights.
	frows, err := conn.Query(ctx, `SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = $1 AND p.prosecdef`, schema)
	if err != nil {
		return nil, err
	}
	for frows.Next() {
		var name string
		if err := frows.Scan(&name); err != nil {
			frows.Close()
			return nil, err
		}
		add("function %s is SECURITY DEFINER", name)
	}
	frows.Close()

	// Views see tables with their owner's rights unless security_invoker;
	// materialized views copy rows out of reach of row-level security.
	vrows, err := conn.Query(ctx, `SELECT c.relname, c.relkind::text, coalesce(c.reloptions, '{}') FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind IN ('v', 'm')`, schema)
	if err != nil {
		return nil, err
	}
	for vrows.Next() {
		var name, kind string
		var opts []string
		if err := vrows.Scan(&name, &kind, &opts); err != nil {
			vrows.Close()
			return nil, err
		}
		switch {
		case kind == "m":
			add("materialized view %s copies rows out of row-level security", name)
		case !slices.Contains(opts, "security_invoker=true") && !slices.Contains(opts, "security_invoker=on"):
			add("view %s is not security_invoker", name)
		}
	}
	vrows.Close()
	return problems, nil
}

// TestCatalogEnforcesTenancy, on the schema of the engine's line and every
// example module's line, fails when a table is in no classification or
// contradicts its declaration (a tenant-scoped table without tenant_id, a
// tenant_id in a table declared otherwise), when a declared table is not
// in the schema, when any strata table holding tenant_id lacks FORCE'd
// row-level security, a tenant policy with USING and WITH CHECK, or has a
// unique key without tenant_id; or when the application roles could
// bypass row-level security some other way. An invalid declaration (a
// tenant-referencing table without an erase mode, a global one without its
// reason) fails db.Classify first.
func TestCatalogEnforcesTenancy(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	d := testdb.New(t, examples.All().Lines()...)
	conn, err := pgx.Connect(ctx, d.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	cls := classification(t)
	problems, err := catalogProblems(ctx, conn, db.Schema, cls)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
	rep, err := cls.Inspect(ctx, conn, db.Schema)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range rep.Absent {
		t.Errorf("table %s is declared by line %s but not in the migrated schema", name, cls.Line(name))
	}
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

// TestCatalogCheckCatchesBreaches proves the check bites: a schema with
// one mistake per table must yield a problem naming each table.
func TestCatalogCheckCatchesBreaches(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	d := testdb.New(t, examples.All().Lines()...)
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
