package projectiontest

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/internal/testdb"
)

// TenantTables is what CheckTenantTables checks.
type TenantTables struct {
	// Lines are the migration lines whose tables are checked, with the
	// engine's (the module's own line; the engine's test passes every
	// module's).
	Lines []db.Line
	// Rows gives, by table, a valid row for a tenant-scoped table whose
	// columns the kit cannot fill from the catalog (a foreign key, a
	// pattern no ordinary value matches): column -> value, tenant_id set
	// by the kit. A table not named here gets a row made from its
	// columns' types and the literals of its CHECK constraints.
	Rows map[string]Row
}

// Row is one row of a table: column -> value.
type Row map[string]any

// engineRows are the rows of the engine's tables whose patterns no value
// the kit makes matches, so that no module's test has to give them.
var engineRows = map[string]Row{
	"subject_keys":     {"key_id": strings.Repeat("0", 32), "subject_hash": strings.Repeat("a", 64), "kek_id": "db-0000000000000000", "wrapped": []byte{1}},
	"subject_erasures": {"erasure_id": "00000000-0000-4000-8000-000000000000", "subject_hash": strings.Repeat("a", 64), "reason": "a test", "requested_by": "kit"},
}

// The two tenants of the isolation check.
const (
	tenantA = "t-iso-a"
	tenantB = "t-iso-b"
)

// CheckTenantTables migrates a fresh database with the engine's line and
// cfg.Lines and holds every table they declare to the engine's tenancy
// rules (ARCHITECTURE decisions 3 and 13), in two halves:
//
//   - the catalog: every table of the schema is declared, as what it is (a
//     tenant_id column if and only if tenant-scoped); every table with a
//     tenant_id has it NOT NULL and CHECKed, row-level security enabled and
//     FORCE'd, policies only on the tenant setting (USING and WITH CHECK)
//     for the engine's roles, no unique key without tenant_id, no TRUNCATE
//     for the serving roles; nothing owned by them, no SECURITY DEFINER
//     function, no view that is not security_invoker;
//   - at run time, on every tenant-scoped table: a row of tenant A and one
//     of tenant B (each table's own columns, see TenantTables.Rows); then,
//     as strata_app and as strata_projector under tenant B's setting, B
//     reads none of A's rows (and, for some role, its own), a transaction
//     without a tenant reads nothing, A's row cannot be written (the insert
//     is refused, 42501), A's rows are not reached by an update or a
//     delete, and B's row cannot be moved to A.
//
// A module's tests call it with the module's line, so that the module's
// tables get the checks the engine's tables get without a list to keep:
//
//	func TestTenancy(t *testing.T) {
//		projectiontest.CheckTenantTables(t, projectiontest.TenantTables{Lines: []db.Line{accountview.Migrations}})
//	}
func CheckTenantTables(t *testing.T, cfg TenantTables) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cls, err := db.Classify(cfg.Lines...)
	if err != nil {
		t.Fatal(err)
	}
	d := testdb.New(t, cfg.Lines...)
	conn := connect(ctx, t, d.AdminURL)
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "SET search_path = "+db.Schema); err != nil {
		t.Fatal(err)
	}
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
	for _, table := range cls.Tables() {
		if table.Class != db.ClassTenantScoped || slices.Contains(rep.Absent, table.Name) {
			continue
		}
		row, ok := cfg.Rows[table.Name]
		if !ok {
			row = engineRows[table.Name]
		}
		for _, p := range isolationProblems(ctx, conn, d.App, d.Projector, db.Schema, table.Name, row) {
			t.Error(p)
		}
	}
}

// isolationProblems writes one row of tenantB and then one of tenantA into
// schema's table (as the superuser of conn; deleted at the end) and lists
// every way app or projector, under tenantB's setting or none, writes
// tenantA's row or reaches it.
func isolationProblems(ctx context.Context, conn *pgx.Conn, app, projector *pgxpool.Pool, schema, table string, given Row) []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, table+": "+fmt.Sprintf(format, args...)) }

	ident := pgx.Identifier{schema, table}.Sanitize()
	row, err := sampleRow(ctx, conn, ident, given)
	if err != nil {
		add("%v", err)
		return problems
	}
	seed := func(tenant string) bool {
		if err := row.insert(ctx, conn, ident, tenant); err != nil {
			add("cannot write tenant %s's row as a superuser: %v", tenant, err)
			return false
		}
		return true
	}
	if !seed(tenantB) {
		return problems
	}
	defer func() {
		_, _ = conn.Exec(context.Background(), `DELETE FROM `+ident+` WHERE tenant_id = ANY ($1)`, []string{tenantA, tenantB})
	}()

	crossRead, err := crossTenantReaders(ctx, conn, ident, table)
	if err != nil {
		add("%v", err)
		return problems
	}
	// in runs fn in a transaction of pool under tenant's setting ("": none),
	// rolled back.
	in := func(pool *pgxpool.Pool, tenant string, fn func(tx pgx.Tx) error) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.Background())
		if tenant != "" {
			if _, err := tx.Exec(ctx, db.SetTenantSQL, tenant); err != nil {
				return err
			}
		}
		return fn(tx)
	}
	exec := func(pool *pgxpool.Pool, tenant, sql string, args ...any) (int64, error) {
		var n int64
		err := in(pool, tenant, func(tx pgx.Tx) error {
			ct, err := tx.Exec(ctx, sql, args...)
			n = ct.RowsAffected()
			return err
		})
		return n, err
	}

	roles := []struct {
		role string
		pool *pgxpool.Pool
	}{{db.RoleApp, app}, {db.RoleProjector, projector}}
	// Tenant A's row written, and tenant B's moved to A, under tenant B's
	// setting before A has a row: only the tenant can refuse them, not a
	// key A's row would hold.
	cols, vals := row.values(tenantA)
	for _, r := range roles {
		if _, err := exec(r.pool, tenantB, row.insertSQL(ident, cols), vals...); db.SQLState(err) != "42501" {
			add("%s writing tenant A's row under tenant B's setting: %v, want it refused (42501: row-level security or no privilege)", r.role, errOrOK(err))
		}
		if n, err := exec(r.pool, tenantB, `UPDATE `+ident+` SET tenant_id = $1 WHERE tenant_id = $2`, tenantA, tenantB); reached(n, err) {
			add("%s moves tenant B's row to tenant A: %d row(s), %v", r.role, n, errOrOK(err))
		}
	}
	if !seed(tenantA) {
		return problems
	}
	ownSeen := false
	for _, r := range roles {
		var canRead bool
		if err := conn.QueryRow(ctx, `SELECT has_table_privilege($1, $2::regclass, 'SELECT')`, r.role, ident).Scan(&canRead); err != nil {
			add("%v", err)
			return problems
		}
		if canRead && !slices.Contains(crossRead, r.role) {
			var own, foreign int64
			err := in(r.pool, tenantB, func(tx pgx.Tx) error {
				return tx.QueryRow(ctx, `SELECT count(*) FILTER (WHERE tenant_id = $1), count(*) FILTER (WHERE tenant_id <> $1) FROM `+ident, tenantB).Scan(&own, &foreign)
			})
			switch {
			case err != nil:
				add("%s reading under tenant B's setting: %v", r.role, err)
			case foreign > 0:
				add("%s under tenant B's setting reads %d row(s) of another tenant", r.role, foreign)
			}
			ownSeen = ownSeen || own > 0
			var none int64
			err = in(r.pool, "", func(tx pgx.Tx) error {
				return tx.QueryRow(ctx, `SELECT count(*) FROM `+ident).Scan(&none)
			})
			if err == nil && none > 0 {
				add("%s reads %d row(s) in a transaction without a tenant", r.role, none)
			}
		}
		if n, err := exec(r.pool, tenantB, `UPDATE `+ident+` SET tenant_id = tenant_id WHERE tenant_id = $1`, tenantA); reached(n, err) {
			add("%s updates %d of tenant A's row(s) under tenant B's setting (%v)", r.role, n, errOrOK(err))
		}
		if n, err := exec(r.pool, tenantB, `DELETE FROM `+ident+` WHERE tenant_id = $1`, tenantA); reached(n, err) {
			add("%s deletes %d of tenant A's row(s) under tenant B's setting (%v)", r.role, n, errOrOK(err))
		}
	}
	if !ownSeen && len(crossRead) == 0 {
		add("neither %s nor %s reads tenant B's own row under its setting: the check proves nothing (a policy for reading is missing)", db.RoleApp, db.RoleProjector)
	}
	var left int64
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+ident+` WHERE tenant_id = $1`, tenantA).Scan(&left); err != nil || left != 1 {
		add("tenant A has %d row(s) after the checks (%v), want its one, untouched", left, err)
	}
	return problems
}

// crossTenantReaders are the roles an allowed cross-tenant policy lets
// read every tenant's rows of table (the projector's read of the log);
// ident is the table's qualified name.
func crossTenantReaders(ctx context.Context, conn *pgx.Conn, ident, table string) ([]string, error) {
	var out []string
	for name, x := range crossTenantPolicies {
		if x.table != table || x.cmd != "r" {
			continue
		}
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_policy WHERE polname = $1 AND polrelid = $2::regclass)`,
			name, ident).Scan(&exists); err != nil {
			return nil, err
		}
		if exists {
			out = append(out, x.role)
		}
	}
	return out, nil
}

// reached reports a write that another tenant's row did not stop: it
// changed rows, or failed for another reason than the tenant (42501:
// row-level security or no privilege), which would hide whether the tenant
// would have.
func reached(n int64, err error) bool {
	if err != nil {
		return db.SQLState(err) != "42501"
	}
	return n > 0
}

func errOrOK(err error) string {
	if err == nil {
		return "accepted"
	}
	return err.Error()
}

// sample is a valid row of a table for any tenant: the columns the kit
// fills (with the index of the value chosen among each one's candidates)
// and the ones the test gave.
type sample struct {
	cols  []*sampleCol
	given Row
}

type sampleCol struct {
	name, typ  string
	candidates []string
	pick       int
}

// values returns the row's columns and values for tenant.
func (s *sample) values(tenant string) ([]string, []any) {
	cols := []string{"tenant_id"}
	vals := []any{tenant}
	for _, c := range s.cols {
		cols = append(cols, c.name)
		vals = append(vals, c.candidates[c.pick])
	}
	for _, name := range sortedKeys(s.given) {
		cols = append(cols, name)
		vals = append(vals, s.given[name])
	}
	return cols, vals
}

// insertSQL inserts the row's columns into the table ident (its quoted
// name); the kit's values are text cast to the column's type, the given
// ones are left to pgx.
func (s *sample) insertSQL(ident string, cols []string) string {
	var names, params []string
	for i, c := range cols {
		names = append(names, pgx.Identifier{c}.Sanitize())
		p := fmt.Sprintf("$%d", i+1)
		if i > 0 && i <= len(s.cols) {
			p += "::text::" + s.cols[i-1].typ
		}
		params = append(params, p)
	}
	return `INSERT INTO ` + ident + ` (` + strings.Join(names, ", ") + `) VALUES (` + strings.Join(params, ", ") + `)`
}

func (s *sample) insert(ctx context.Context, q interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, ident, tenant string) error {
	cols, vals := s.values(tenant)
	_, err := q.Exec(ctx, s.insertSQL(ident, cols), vals...)
	return err
}

var quoted = regexp.MustCompile(`'((?:[^']|'')*)'`)

// sampleRow finds a row of the table ident (its quoted name) that its
// constraints accept: tenant_id, the columns given, every NOT NULL column
// without a default (a value of its type, the literals of its CHECK
// constraints first) and, when a CHECK constraint refuses the row for a
// column left to its default or NULL, that column too. It tries rows in a
// savepoint as a superuser, changing the columns the failing constraint
// names, until one is accepted.
func sampleRow(ctx context.Context, conn *pgx.Conn, ident string, given Row) (*sample, error) {
	type column struct {
		name, typ, base, category string
		enum                      uint32
		notNull, defaulted, fixed bool
	}
	rows, err := conn.Query(ctx, `
SELECT a.attname, format_type(a.atttypid, a.atttypmod),
       CASE WHEN t.typtype = 'd' THEN bt.typname ELSE t.typname END,
       CASE WHEN t.typtype = 'd' THEN bt.typcategory ELSE t.typcategory END::text,
       CASE WHEN t.typtype = 'e' THEN t.oid ELSE 0 END,
       a.attnotnull, a.atthasdef, a.attidentity <> '' OR a.attgenerated <> ''
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_type bt ON bt.oid = t.typbasetype
WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum`, ident)
	if err != nil {
		return nil, fmt.Errorf("read its columns: %w", err)
	}
	columns, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (column, error) {
		var c column
		err := r.Scan(&c.name, &c.typ, &c.base, &c.category, &c.enum, &c.notNull, &c.defaulted, &c.fixed)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("read its columns: %w", err)
	}
	// Each CHECK constraint's columns and literals.
	type check struct {
		cols     []string
		literals []string
	}
	checks := map[string]check{}
	rows, err = conn.Query(ctx, `SELECT k.conname, pg_get_constraintdef(k.oid),
       ARRAY(SELECT a.attname::text FROM unnest(k.conkey) u(n) JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.n)
FROM pg_constraint k WHERE k.conrelid = $1::regclass AND k.contype = 'c'`, ident)
	if err != nil {
		return nil, fmt.Errorf("read its constraints: %w", err)
	}
	for rows.Next() {
		var name, def string
		var cols []string
		if err := rows.Scan(&name, &def, &cols); err != nil {
			rows.Close()
			return nil, err
		}
		c := check{cols: cols}
		for _, m := range quoted.FindAllStringSubmatch(def, -1) {
			c.literals = append(c.literals, strings.ReplaceAll(m[1], "''", "'"))
		}
		checks[name] = c
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}

	s := &sample{given: given}
	byName := map[string]column{}
	for _, c := range columns {
		byName[c.name] = c
	}
	for name := range given {
		if _, ok := byName[name]; !ok || name == "tenant_id" {
			return nil, fmt.Errorf("the row given names column %q, which it has not (or which the kit sets)", name)
		}
	}
	// include makes column name one the kit fills.
	include := func(name string) error {
		c := byName[name]
		// A CHECK's string literals are candidates for its text and enum
		// columns (status IN ('draft', ...)), not for its others.
		var candidates []string
		for _, k := range checks {
			if slices.Contains(k.cols, name) && (c.category == "S" || c.enum != 0) {
				candidates = append(candidates, k.literals...)
			}
		}
		generic, err := candidatesOf(ctx, conn, c.base, c.category, c.enum)
		if err != nil {
			return err
		}
		if len(generic) == 0 && len(candidates) == 0 {
			return fmt.Errorf("no value of type %s for column %s: give a row (TenantTables.Rows)", c.typ, name)
		}
		s.cols = append(s.cols, &sampleCol{name: name, typ: c.typ, candidates: append(candidates, generic...)})
		return nil
	}
	filled := func(name string) bool {
		_, g := given[name]
		return g || name == "tenant_id" || slices.ContainsFunc(s.cols, func(c *sampleCol) bool { return c.name == name })
	}
	for _, c := range columns {
		if c.notNull && !c.defaulted && !c.fixed && !filled(c.name) {
			if err := include(c.name); err != nil {
				return nil, err
			}
		}
	}

	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.Background())
	var last error
	for attempt := 0; attempt < 500; attempt++ {
		sp, err := tx.Begin(ctx)
		if err != nil {
			return nil, err
		}
		last = s.insert(ctx, sp, ident, tenantA)
		_ = sp.Rollback(ctx)
		if last == nil {
			return s, nil
		}
		var pe *pgconn.PgError
		if !errors.As(last, &pe) || pe.Code != "23514" {
			break
		}
		k, ok := checks[pe.ConstraintName]
		if !ok {
			break
		}
		// Columns of the constraint left to their default or NULL: fill
		// them, then try the combinations of the constraint's columns.
		grew := false
		for _, name := range k.cols {
			if c, ok := byName[name]; ok && !c.fixed && !filled(name) {
				if err := include(name); err != nil {
					return nil, err
				}
				grew = true
			}
		}
		if grew {
			continue
		}
		if !s.next(k.cols) {
			break
		}
	}
	return nil, fmt.Errorf("no row the kit can make is accepted (last: %v): give a row (TenantTables.Rows)", last)
}

// next moves to the next combination of the candidates of cols (an
// odometer over them); false when every combination was tried.
func (s *sample) next(cols []string) bool {
	for _, c := range s.cols {
		if !slices.Contains(cols, c.name) {
			continue
		}
		if c.pick+1 < len(c.candidates) {
			c.pick++
			return true
		}
		c.pick = 0
	}
	return false
}

// candidatesOf are the ordinary values of a type (by its base type's name
// and category), as text.
func candidatesOf(ctx context.Context, conn *pgx.Conn, base, category string, enum uint32) ([]string, error) {
	switch {
	case enum != 0:
		rows, err := conn.Query(ctx, `SELECT enumlabel::text FROM pg_enum WHERE enumtypid = $1 ORDER BY enumsortorder`, enum)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, pgx.RowTo[string])
	case category == "S":
		return []string{"x", "EUR", "x-1", "X", "1", "x@example.com"}, nil
	case category == "N":
		return []string{"1", "0", "2", "100"}, nil
	case category == "B":
		return []string{"false", "true"}, nil
	case category == "A":
		return []string{"{}"}, nil
	case category == "I":
		return []string{"127.0.0.1"}, nil
	case category == "T":
		return []string{"1 day"}, nil
	}
	switch base {
	case "date":
		return []string{"2026-01-01"}, nil
	case "timestamp", "timestamptz":
		return []string{"2026-01-01 00:00:00+00"}, nil
	case "time", "timetz":
		return []string{"00:00:00"}, nil
	case "uuid":
		return []string{"00000000-0000-4000-8000-000000000001"}, nil
	case "json", "jsonb":
		return []string{"{}", "[]", `"x"`, "1"}, nil
	case "bytea":
		// One byte, and a SHA-256's 32.
		return []string{`\x00`, `\x` + strings.Repeat("00", 32)}, nil
	case "xid8", "xid":
		return []string{"1"}, nil
	}
	return nil, nil
}

func sortedKeys(r Row) []string {
	keys := make([]string, 0, len(r))
	for k := range r {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
