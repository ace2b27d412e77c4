package harness

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
)

// tenantTable is a table of the strata schema that has a tenant_id column,
// as the catalog lists it.
type tenantTable struct {
	Name   string
	Text   []string // text columns other than tenant_id (IDs, codes, ...)
	Select bool     // the application role may SELECT it
}

// tenantTables reads every table (and view) of the schema with a tenant_id
// column from the catalog: a table added tomorrow is attacked too.
func tenantTables(ctx context.Context, conn *pgx.Conn) ([]tenantTable, error) {
	rows, err := conn.Query(ctx, `SELECT c.relname,
       array_agg(a.attname::text ORDER BY a.attnum) FILTER (WHERE a.atttypid IN ('text'::regtype, 'varchar'::regtype) AND a.attname <> 'tenant_id'),
       has_table_privilege($2, c.oid, 'SELECT')
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm')
  AND EXISTS (SELECT 1 FROM pg_attribute t WHERE t.attrelid = c.oid AND t.attname = 'tenant_id' AND NOT t.attisdropped)
GROUP BY c.relname, c.oid ORDER BY c.relname`, db.Schema, db.RoleApp)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []tenantTable
	for rows.Next() {
		var t tenantTable
		var text []string
		if err := rows.Scan(&t.Name, &text, &t.Select); err != nil {
			return nil, err
		}
		t.Text = text
		out = append(out, t)
	}
	return out, rows.Err()
}

// catalogFindings is the catalog guard: what would let the application
// role past row-level security.
func catalogFindings(ctx context.Context, conn *pgx.Conn) ([]string, error) {
	var out []string
	add := func(q string, args ...any) error {
		rows, err := conn.Query(ctx, q, args...)
		if err != nil {
			return err
		}
		found, err := pgx.CollectRows(rows, pgx.RowTo[string])
		out = append(out, found...)
		return err
	}
	if err := add(`SELECT 'table ' || c.relname || ': row-level security ' ||
       CASE WHEN NOT c.relrowsecurity THEN 'not enabled' WHEN NOT c.relforcerowsecurity THEN 'not forced' ELSE 'without a policy' END
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p')
  AND EXISTS (SELECT 1 FROM pg_attribute t WHERE t.attrelid = c.oid AND t.attname = 'tenant_id' AND NOT t.attisdropped)
  AND (NOT c.relrowsecurity OR NOT c.relforcerowsecurity OR NOT EXISTS (SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid))`, db.Schema); err != nil {
		return nil, err
	}
	if err := add(`SELECT 'role ' || rolname || ' is superuser or BYPASSRLS' FROM pg_roles
WHERE rolname = ANY($1) AND (rolsuper OR rolbypassrls)`, []string{db.RoleApp, db.RoleProjector}); err != nil {
		return nil, err
	}
	if err := add(`SELECT 'role ' || r.rolname || ' owns ' || c.relname FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_roles r ON r.oid = c.relowner
WHERE n.nspname = $1 AND (r.rolname = ANY($2) OR pg_has_role($3, c.relowner, 'MEMBER'))`,
		db.Schema, []string{db.RoleApp, db.RoleProjector}, db.RoleApp); err != nil {
		return nil, err
	}
	if err := add(`SELECT 'view ' || c.relname || ' runs with its owner''s rights (no security_invoker)' FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind IN ('v', 'm')
  AND NOT coalesce('security_invoker=true' = ANY(c.reloptions) OR 'security_invoker=on' = ANY(c.reloptions), false)`, db.Schema); err != nil {
		return nil, err
	}
	if err := add(`SELECT 'function ' || p.proname || ' is SECURITY DEFINER' FROM pg_proc p
JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 AND p.prosecdef`, db.Schema); err != nil {
		return nil, err
	}
	return out, nil
}

// sqlCase is one randomized query of R12: app runs as strata_app under
// tenant A; ref, run as the superuser, must return exactly the same rows
// (it spells out the tenant filter that row-level security must add).
type sqlCase struct {
	kind  string
	table string
	app   string
	ref   string
	args  []any
}

type r12Verdict struct {
	mu            sync.Mutex
	queries       int
	foreignRows   int
	differ        int
	denied        int
	errors        int
	pooled        int
	pooledLeaks   int
	writes        int
	writesAllowed int
	tables        map[string]int
	examples      []string
}

func (v *r12Verdict) fail(counter *int, format string, args ...any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	*counter++
	if len(v.examples) < 15 {
		v.examples = append(v.examples, fmt.Sprintf(format, args...))
	}
}

// runR12 queries the database as the application role with tenant A set,
// through a pool like strata's own, and checks every row.
func (e *env) runR12(ctx context.Context, r *Result, f *tenancyFixture) error {
	cfg := e.cfg.R12
	r.Title = "cross-tenant SQL as the application role, and escalation from the serving logins"
	admin, err := connectAdmin(ctx, f.url)
	if err != nil {
		return err
	}
	defer admin.Close(context.WithoutCancel(ctx))
	tables, err := tenantTables(ctx, admin)
	if err != nil {
		return err
	}
	findings, err := catalogFindings(ctx, admin)
	if err != nil {
		return err
	}
	r.zero("catalog findings (RLS off/unforced/no policy, privileged or owning app roles, definer views/functions)", len(findings))
	for _, fnd := range findings {
		r.note("CATALOG: %s", fnd)
	}
	// The application pool logs in as strata serve's does: as the login
	// `strata migrate up` provisioned, derived from DATABASE_URL.
	appURL, err := db.LoginURL(f.url, db.LoginApp)
	if err != nil {
		return err
	}
	app, err := db.OpenPool(ctx, appURL, db.PoolConfig{Role: db.RoleApp, MaxConns: int32(cfg.Workers), AppName: "chaos-r12"})
	if err != nil {
		return err
	}
	defer app.Close()
	projURL, err := db.LoginURL(f.url, db.LoginProjector)
	if err != nil {
		return err
	}
	proj, err := db.OpenPool(ctx, projURL, db.PoolConfig{Role: db.RoleProjector, MaxConns: 1, AppName: "chaos-r12"})
	if err != nil {
		return err
	}
	defer proj.Close()
	if err := f.escalations(ctx, r, admin, app, proj); err != nil {
		return err
	}
	refPool, err := pgxpool.New(ctx, f.url+"&search_path="+db.Schema)
	if err != nil {
		return err
	}
	defer refPool.Close()

	rng := e.rng(R12, "queries")
	values := f.probeValues()
	cases := make([]sqlCase, 0, cfg.Queries)
	for len(cases) < cfg.Queries {
		cases = append(cases, f.sqlCase(rng, tables, values))
	}
	v := &r12Verdict{tables: map[string]int{}}
	ctxA := domain.NewContext(ctx, domain.TenantID(f.a))
	began := time.Now()
	work := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < cfg.Workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				c := cases[i]
				switch {
				case i%50 == 7:
					f.pooledReuse(ctx, app, tables, v, i)
				case i%50 == 23:
					f.crossTenantWrite(ctxA, app, i, v)
				default:
					f.runSQLCase(ctxA, app, refPool, c, v)
				}
			}
		}()
	}
	for i := range cases {
		work <- i
	}
	close(work)
	wg.Wait()
	e.logf("R12: %d queries (%d pooled-connection reuses, %d cross-tenant writes) in %s", v.queries+v.pooled+v.writes, v.pooled, v.writes, time.Since(began).Round(time.Millisecond))

	total := v.queries + v.pooled + v.writes
	r.check("randomized queries as strata_app with tenant A set", fmt.Sprintf(">= %d", cfg.Queries), total, total >= cfg.Queries)
	r.zero("rows of another tenant (tenant_id or B's canary markers)", v.foreignRows)
	r.zero("results differing from an explicit tenant filter", v.differ)
	r.zero("pooled connection without a tenant returning rows", v.pooledLeaks)
	r.zero("cross-tenant writes accepted", v.writesAllowed)
	r.zero("unexpected errors", v.errors)
	var missing []string
	for _, t := range tables {
		if v.tables[t.Name] == 0 {
			missing = append(missing, t.Name)
		}
	}
	r.check("tenant tables from the catalog covered", fmt.Sprintf("%d/%d", len(tables), len(tables)),
		fmt.Sprintf("%d/%d", len(tables)-len(missing), len(tables)), len(missing) == 0 && len(tables) > 0)
	var names []string
	for _, t := range tables {
		mark := ""
		if !t.Select {
			mark = " (no SELECT grant: permission denied)"
		}
		names = append(names, fmt.Sprintf("%s %d%s", t.Name, v.tables[t.Name], mark))
	}
	r.note("queries per table: %s", strings.Join(names, ", "))
	r.note("%d queries refused with permission denied (tables the role may not read; never rows)", v.denied)
	for _, ex := range v.examples {
		r.note("%s", ex)
	}
	return nil
}

// probeValues are the values queries look for: A's and B's IDs, shared
// IDs, IDs that exist nowhere, and B's canary marker.
func (f *tenancyFixture) probeValues() []string {
	vals := append([]string{}, f.shared...)
	vals = append(vals, f.aOrders...)
	vals = append(vals, f.aCustomers...)
	vals = append(vals, f.aProducts...)
	vals = append(vals, f.bPathOrders...)
	vals = append(vals, f.bBodyOrders...)
	vals = append(vals, f.bCustomers...)
	vals = append(vals, f.bProducts...)
	vals = append(vals, f.twin(f.bPathOrders[0]), "nowhere", f.a, f.b)
	return vals
}

// sqlCase makes one randomized query: by ID, aggregates, joins, subqueries,
// set operations, explicit asks for tenant B, text search for B's canary.
func (f *tenancyFixture) sqlCase(rng *rand.Rand, tables []tenantTable, values []string) sqlCase {
	t := tables[rng.IntN(len(tables))]
	id := func(name string) string { return pgx.Identifier{name}.Sanitize() }
	tn := id(t.Name)
	col := func(tt tenantTable) string {
		if len(tt.Text) == 0 {
			return "tenant_id"
		}
		return id(tt.Text[rng.IntN(len(tt.Text))])
	}
	val := values[rng.IntN(len(values))]
	fa := "tenant_id = '" + f.a + "'" // the explicit filter RLS must be equivalent to
	wrap := func(inner string) string { return "SELECT to_jsonb(q)::text FROM (" + inner + ") q" }
	mk := func(kind, app, ref string, args ...any) sqlCase {
		return sqlCase{kind: kind, table: t.Name, app: wrap(app), ref: wrap(ref), args: args}
	}
	switch rng.IntN(11) {
	case 0:
		return mk("scan", "SELECT * FROM "+tn, "SELECT * FROM "+tn+" WHERE "+fa)
	case 1:
		c := col(t)
		return mk("by-id", "SELECT * FROM "+tn+" WHERE "+c+" = $1", "SELECT * FROM "+tn+" WHERE "+c+" = $1 AND "+fa, val)
	case 2:
		return mk("ask-for-b", "SELECT * FROM "+tn+" WHERE tenant_id = $1", "SELECT * FROM "+tn+" WHERE tenant_id = $1 AND "+fa, f.b)
	case 3:
		return mk("not-a", "SELECT * FROM "+tn+" WHERE tenant_id <> $1 OR tenant_id IS NULL", "SELECT * FROM "+tn+" WHERE (tenant_id <> $1 OR tenant_id IS NULL) AND "+fa, f.a)
	case 4:
		return mk("aggregate", "SELECT tenant_id, count(*) AS n FROM "+tn+" GROUP BY tenant_id",
			"SELECT tenant_id, count(*) AS n FROM "+tn+" WHERE "+fa+" GROUP BY tenant_id")
	case 5:
		c := col(t)
		return mk("aggregate-by-id", "SELECT count(*) AS n, min(tenant_id) AS tenant_min, max(tenant_id) AS tenant_max FROM "+tn+" WHERE "+c+" = $1",
			"SELECT count(*) AS n, min(tenant_id) AS tenant_min, max(tenant_id) AS tenant_max FROM "+tn+" WHERE "+c+" = $1 AND "+fa, val)
	case 6:
		// A join on a shared column but not on tenant_id: without RLS it
		// pairs A's rows with B's (the same order IDs exist in both).
		u, c := joinPartner(rng, tables, t)
		un := id(u.Name)
		return mk("join", "SELECT a.tenant_id AS tenant_a, b.tenant_id AS tenant_b, a."+c+" AS k FROM "+tn+" a JOIN "+un+" b USING ("+c+")",
			"SELECT a.tenant_id AS tenant_a, b.tenant_id AS tenant_b, a."+c+" AS k FROM "+tn+" a JOIN "+un+" b USING ("+c+") WHERE a."+fa+" AND b."+fa)
	case 7:
		u, c := joinPartner(rng, tables, t)
		un := id(u.Name)
		return mk("subquery-for-b", "SELECT * FROM "+tn+" WHERE "+c+" IN (SELECT "+c+" FROM "+un+" WHERE tenant_id = $1)",
			"SELECT * FROM "+tn+" WHERE "+fa+" AND "+c+" IN (SELECT "+c+" FROM "+un+" WHERE tenant_id = $1 AND "+fa+")", f.b)
	case 8:
		return mk("text-search-canary", "SELECT * FROM "+tn+" x WHERE x::text LIKE '%' || $1 || '%'",
			"SELECT * FROM "+tn+" x WHERE x::text LIKE '%' || $1 || '%' AND x."+fa, f.marker)
	case 9:
		u := tables[rng.IntN(len(tables))]
		un := id(u.Name)
		return mk("union", "SELECT tenant_id, 't' AS src FROM "+tn+" UNION ALL SELECT tenant_id, 'u' FROM "+un,
			"SELECT tenant_id, 't' AS src FROM "+tn+" WHERE "+fa+" UNION ALL SELECT tenant_id, 'u' FROM "+un+" WHERE "+fa)
	default:
		return mk("window-cte", "WITH x AS (SELECT tenant_id, row_number() OVER () AS rn FROM "+tn+") SELECT tenant_id, count(*) AS n FROM x GROUP BY tenant_id",
			"WITH x AS (SELECT tenant_id, row_number() OVER () AS rn FROM "+tn+" WHERE "+fa+") SELECT tenant_id, count(*) AS n FROM x GROUP BY tenant_id")
	}
}

// joinPartner picks a table sharing a text column with t.
func joinPartner(rng *rand.Rand, tables []tenantTable, t tenantTable) (tenantTable, string) {
	type pair struct {
		u tenantTable
		c string
	}
	var ps []pair
	for _, u := range tables {
		for _, c := range t.Text {
			if slices.Contains(u.Text, c) {
				ps = append(ps, pair{u, c})
			}
		}
	}
	if len(ps) == 0 {
		return t, "tenant_id"
	}
	p := ps[rng.IntN(len(ps))]
	return p.u, pgx.Identifier{p.c}.Sanitize()
}

// tenantKeys are the JSON keys whose values name a row's tenant.
var tenantKeys = []string{`"tenant_id": `, `"tenant_a": `, `"tenant_b": `, `"tenant_min": `, `"tenant_max": `}

// foreignRow reports a row that is not tenant A's.
func (f *tenancyFixture) foreignRow(row string) bool {
	if f.leakedMarker(row, "") != "" {
		return true
	}
	for _, k := range tenantKeys {
		rest := row
		for {
			i := strings.Index(rest, k)
			if i < 0 {
				break
			}
			rest = rest[i+len(k):]
			if !strings.HasPrefix(rest, `"`+f.a+`"`) && !strings.HasPrefix(rest, "null") {
				return true
			}
		}
	}
	return false
}

func collectRows(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, sql string, args ...any) ([]string, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	sort.Strings(out)
	return out, err
}

func (f *tenancyFixture) runSQLCase(ctxA context.Context, app, ref *pgxpool.Pool, c sqlCase, v *r12Verdict) {
	var got []string
	err := db.WithTenantTx(ctxA, app, func(tx pgx.Tx) error {
		var err error
		got, err = collectRows(ctxA, tx, c.app, c.args...)
		return err
	})
	v.mu.Lock()
	v.queries++
	v.tables[c.table]++
	v.mu.Unlock()
	if err != nil {
		if isPermissionDenied(err) {
			v.mu.Lock()
			v.denied++
			v.mu.Unlock()
			return
		}
		v.fail(&v.errors, "%s on %s: %v", c.kind, c.table, err)
		return
	}
	for _, row := range got {
		if f.foreignRow(row) {
			v.fail(&v.foreignRows, "FOREIGN ROW: %s on %s: %s", c.kind, c.table, oneLine(row, 200))
			break
		}
	}
	want, err := collectRows(ctxA, ref, c.ref, c.args...)
	if err != nil {
		v.fail(&v.errors, "reference %s on %s: %v", c.kind, c.table, err)
		return
	}
	if !slices.Equal(got, want) {
		v.fail(&v.differ, "%s on %s: %d rows as strata_app, %d with the explicit filter", c.kind, c.table, len(got), len(want))
	}
}

// pooledReuse runs a transaction with a tenant on a pooled connection,
// then queries on the same connection with no tenant set: the setting was
// transaction-local, so nothing may come back (no rows, or an error).
func (f *tenancyFixture) pooledReuse(ctx context.Context, app *pgxpool.Pool, tables []tenantTable, v *r12Verdict, i int) {
	var readable []tenantTable
	for _, t := range tables {
		if t.Select {
			readable = append(readable, t)
		}
	}
	v.mu.Lock()
	v.pooled++
	tenant := []string{f.a, f.b}[i%2]
	t := readable[(i/50)%len(readable)]
	v.tables[t.Name]++
	v.mu.Unlock()
	conn, err := app.Acquire(ctx)
	if err != nil {
		v.fail(&v.errors, "acquire: %v", err)
		return
	}
	defer conn.Release()
	err = db.WithTenantTx(domain.NewContext(ctx, domain.TenantID(tenant)), conn, func(tx pgx.Tx) error {
		_, err := collectRows(ctx, tx, "SELECT tenant_id FROM "+pgx.Identifier{t.Name}.Sanitize())
		return err
	})
	if err != nil {
		v.fail(&v.errors, "pooled reuse, tenant transaction on %s: %v", t.Name, err)
		return
	}
	var setting *string
	if err := conn.QueryRow(ctx, "SELECT current_setting('"+db.TenantSetting+"', true)").Scan(&setting); err != nil {
		v.fail(&v.errors, "pooled reuse: %v", err)
		return
	}
	if setting != nil && *setting != "" {
		v.fail(&v.pooledLeaks, "POOLED CONNECTION KEEPS TENANT %q after its transaction", *setting)
	}
	for _, q := range []string{"SELECT tenant_id FROM " + pgx.Identifier{t.Name}.Sanitize(), "SELECT count(*)::text FROM " + pgx.Identifier{t.Name}.Sanitize() + " WHERE tenant_id IS NOT NULL HAVING count(*) > 0"} {
		rows, err := collectRows(ctx, conn, q)
		if err != nil && !isPermissionDenied(err) {
			v.fail(&v.errors, "pooled reuse on %s: %v", t.Name, err)
		}
		if len(rows) > 0 {
			v.fail(&v.pooledLeaks, "POOLED CONNECTION WITHOUT A TENANT read %d rows of %s", len(rows), t.Name)
		}
	}
}

// crossTenantWrite tries to write tenant B's rows with tenant A set; every
// attempt must fail (WITH CHECK, or no privilege). Nothing is kept.
func (f *tenancyFixture) crossTenantWrite(ctxA context.Context, app *pgxpool.Pool, i int, v *r12Verdict) {
	stmts := []string{
		`INSERT INTO admin_audit (tenant_id, subject, action, target) VALUES ('` + f.b + `', 'chaos', 'write', 'r12')`,
		`INSERT INTO events (tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata)
         VALUES ('` + f.b + `', 'order-r12', 1, gen_random_uuid(), 'order.created', 1, '{}', '{}')`,
		`INSERT INTO idempotency_keys (tenant_id, key, request_hash, response) VALUES ('` + f.b + `', 'r12', 'x', '\x00')`,
		`UPDATE order_details SET status = 'paid' WHERE tenant_id = '` + f.b + `'`,
		`DELETE FROM order_list WHERE tenant_id = '` + f.b + `'`,
		`UPDATE events SET tenant_id = '` + f.b + `'`,
		`TRUNCATE order_details`,
	}
	stmt := stmts[(i/50)%len(stmts)]
	v.mu.Lock()
	v.writes++
	v.mu.Unlock()
	errRollback := errors.New("rollback")
	var n int64
	err := db.WithTenantTx(ctxA, app, func(tx pgx.Tx) error {
		ct, err := tx.Exec(ctxA, stmt)
		if err != nil {
			return err
		}
		n = ct.RowsAffected()
		return errRollback
	})
	if errors.Is(err, errRollback) {
		if n > 0 || strings.HasPrefix(stmt, "INSERT") || strings.HasPrefix(stmt, "TRUNCATE") {
			v.fail(&v.writesAllowed, "CROSS-TENANT WRITE ACCEPTED (%d rows, rolled back): %s", n, oneLine(stmt, 120))
		}
	}
}

func isPermissionDenied(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42501"
}

// escalationAttempts are what a session running arbitrary SQL tries to
// leave its serving role (other is the other serving role). SET ROLE to
// every role of the cluster is added at run time.
func (f *tenancyFixture) escalationAttempts(other string) []string {
	return []string{
		"RESET ROLE",
		"SET ROLE " + db.RoleOwner,
		"SET ROLE postgres",
		"SET ROLE " + other,
		"SET SESSION AUTHORIZATION postgres",
		"SET SESSION AUTHORIZATION " + db.RoleOwner,
		"RESET SESSION AUTHORIZATION",
		"GRANT " + db.RoleOwner + " TO SESSION_USER",
		"ALTER ROLE SESSION_USER BYPASSRLS",
		"ALTER ROLE CURRENT_USER SUPERUSER",
		"ALTER TABLE order_details DISABLE ROW LEVEL SECURITY",
		"ALTER TABLE events NO FORCE ROW LEVEL SECURITY",
		"SET row_security = off",
		"ALTER ROLE SESSION_USER SET app.tenant_id = '" + f.b + "'",
		"SELECT set_config('" + db.TenantSetting + "', '" + f.b + "', false)",
		"SELECT set_config('" + db.TenantSetting + "', '" + f.a + "'' OR true OR ''', false)",
		"CREATE EXTENSION dblink",
		"SELECT pg_read_file('global/pg_control')",
	}
}

// escalations runs R12's escalation half (ARCHITECTURE decision 11). On
// sessions of the serving logins strata serve logs in as, every attempt
// above runs as a subverted request would run it (on the session, then
// inside a transaction of tenant A); after each the session must still be
// its serving role or the bare login, neither superuser, BYPASSRLS nor a
// member of strata_owner, and see no row outside the tenant its
// app.tenant_id names (none without one). set_config of tenant B is
// allowed by design
// (the setting is how a transaction names its tenant; the API's boundary
// is the verified token -> setting path): what this proves is that the
// serving logins cannot gain BYPASSRLS, ownership or superuser, so the
// policies always apply. It also checks that every session the running
// serve process holds logs in as an unprivileged login.
func (f *tenancyFixture) escalations(ctx context.Context, r *Result, admin *pgx.Conn, app, proj *pgxpool.Pool) error {
	var sessions, privileged int
	if err := admin.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE r.rolsuper OR r.rolbypassrls OR pg_has_role(a.usesysid, $2::regrole, 'MEMBER'))
FROM pg_stat_activity a JOIN pg_roles r ON r.oid = a.usesysid
WHERE a.datname = $1 AND a.application_name IN ('strata', 'strata-projector')`, f.db, db.RoleOwner).Scan(&sessions, &privileged); err != nil {
		return err
	}
	r.check("sessions of the running serve process seen", ">= 1", sessions, sessions > 0)
	r.zero("of them logged in as superuser, BYPASSRLS or a strata_owner member", privileged)
	var catalog []string
	for _, s := range []struct {
		pool *pgxpool.Pool
		role string
	}{{app, db.RoleApp}, {proj, db.RoleProjector}} {
		var esc *db.EscalationError
		if err := db.CheckServing(ctx, s.pool, s.role); errors.As(err, &esc) {
			catalog = append(catalog, esc.Error())
		} else if err != nil {
			return err
		}
	}
	r.zero("serving logins that can escalate (db.CheckServing)", len(catalog))
	for _, c := range catalog {
		r.note("LOGIN: %s", c)
	}
	roles, err := collectRows(ctx, admin, `SELECT quote_ident(rolname) FROM pg_roles`)
	if err != nil {
		return err
	}
	var attempts, escaped int
	var examples []string
	fail := func(format string, args ...any) {
		escaped++
		if len(examples) < 10 {
			examples = append(examples, fmt.Sprintf(format, args...))
		}
	}
	for _, s := range []struct {
		pool        *pgxpool.Pool
		role, other string
	}{{app, db.RoleApp, db.RoleProjector}, {proj, db.RoleProjector, db.RoleApp}} {
		// Tables the role reads across tenants by design (a policy of the
		// role USING (true): the projector's read of the log) are left out
		// of the foreign-row count.
		// Qualified: the bare login (after RESET ROLE) has no USAGE on the
		// schema, which a search_path lookup would skip silently.
		tables, err := collectRows(ctx, admin, `SELECT quote_ident(n.nspname) || '.' || quote_ident(c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p')
  AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped)
  AND NOT EXISTS (SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid AND $2::regrole = ANY (p.polroles) AND pg_get_expr(p.polqual, p.polrelid) = 'true')`, db.Schema, s.role)
		if err != nil {
			return err
		}
		list := f.escalationAttempts(s.other)
		for _, role := range roles {
			list = append(list, "SET ROLE "+role)
		}
		for _, attempt := range list {
			for _, inTx := range []bool{false, true} {
				attempts++
				if err := f.attempt(ctx, s.pool, s.role, attempt, inTx, tables, fail); err != nil {
					return err
				}
			}
		}
	}
	r.check("escalation attempts from serving login sessions (on the session and in a transaction)", ">= 60", attempts, attempts >= 60)
	r.zero("attempts that left the serving role or saw rows outside app.tenant_id's tenant", escaped)
	for _, ex := range examples {
		r.note("ESCALATION: %s", ex)
	}
	return nil
}

// execQuerier is a connection or a transaction.
type execQuerier interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	QueryRow(context.Context, string, ...any) pgx.Row
}

// attempt runs one escalation attempt on a fresh session of pool and
// checks the session afterwards; the session is closed, not pooled.
func (f *tenancyFixture) attempt(ctx context.Context, pool *pgxpool.Pool, role, attempt string, inTx bool, tables []string, fail func(string, ...any)) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	defer conn.Conn().Close(context.WithoutCancel(ctx)) //nolint:errcheck
	where := "on the session"
	var q execQuerier = conn
	if inTx {
		where = "in a transaction of tenant A"
		tx, err := conn.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
		if err := db.SetTenant(ctx, tx, f.a); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "SAVEPOINT attempt"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, attempt); err != nil {
			_, err = tx.Exec(ctx, "ROLLBACK TO SAVEPOINT attempt")
			return err // refused: the transaction is as it was, checked on the session already
		}
		q = tx
	} else {
		_, _ = conn.Exec(ctx, attempt) // refused or not, the session is checked
	}
	var current, session string
	var privileged bool
	if err := q.QueryRow(ctx, `SELECT current_user::text, session_user::text,
       bool_or(r.rolsuper OR r.rolbypassrls) OR pg_has_role(current_user, $1, 'MEMBER') OR pg_has_role(session_user, $1, 'MEMBER')
FROM pg_roles r WHERE r.rolname IN (current_user, session_user)`, db.RoleOwner).Scan(&current, &session, &privileged); err != nil {
		return fmt.Errorf("%s: identity: %w", attempt, err)
	}
	if privileged || (current != role && current != session) {
		fail("%s %s: the session is now %s (session user %s), privileged %v", attempt, where, current, session, privileged)
	}
	// Every tenant table keys its rows by tenant_id, which the policies
	// compare with the setting: a row whose tenant_id is not the setting's
	// is a row past row-level security. (B's canary markers are no test
	// here: after R11, A's own orders carry B's IDs in their bodies.)
	probe := func(sql string, args ...any) (int, error) {
		if inTx {
			if _, err := q.Exec(ctx, "SAVEPOINT probe"); err != nil {
				return 0, err
			}
			defer q.Exec(ctx, "ROLLBACK TO SAVEPOINT probe") //nolint:errcheck
		}
		var n int
		if err := q.QueryRow(ctx, sql, args...).Scan(&n); err != nil && !isPermissionDenied(err) {
			return 0, fmt.Errorf("%s: %w", attempt, err)
		}
		return n, nil
	}
	for _, t := range tables {
		n, err := probe(`SELECT count(*) FROM ` + t + ` WHERE tenant_id IS DISTINCT FROM nullif(current_setting('` + db.TenantSetting + `', true), '')`)
		if err != nil {
			return err
		}
		if n > 0 {
			fail("%s %s: as %s, %d rows of %s outside the tenant in %s", attempt, where, current, n, t, db.TenantSetting)
		}
	}
	return nil
}
