package projectiontest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
)

// Dump renders the rows of tables (in the strata schema), read as a
// superuser (all tenants): a "## table" line per table, then one line per
// row, its columns in the catalog's order joined by "|" (NULL as "-",
// timestamps in UTC with microseconds), sorted bytewise. The columns come
// from the catalog, so a module's tables need no dump queries of their own.
func Dump(ctx context.Context, t testing.TB, adminURL string, tables ...string) string {
	t.Helper()
	conn := connect(ctx, t, adminURL)
	defer conn.Close(context.Background())
	var b strings.Builder
	for _, table := range tables {
		q, err := dumpQuery(ctx, conn, table)
		if err != nil {
			t.Fatalf("dump %s: %v", table, err)
		}
		rows, err := conn.Query(ctx, q)
		if err != nil {
			t.Fatalf("dump %s: %v", table, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("dump %s: %v", table, err)
		}
		b.WriteString(Table(table, lines))
	}
	return b.String()
}

// Table renders one table's rows in Dump's format (the lines sorted
// bytewise): what an oracle computing the rows itself compares with.
func Table(name string, lines []string) string {
	lines = append([]string(nil), lines...)
	sort.Strings(lines)
	var b strings.Builder
	fmt.Fprintf(&b, "## %s\n", name)
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

// dumpQuery builds the SELECT rendering table's rows from its columns in
// the catalog.
func dumpQuery(ctx context.Context, conn *pgx.Conn, table string) (string, error) {
	rows, err := conn.Query(ctx, `SELECT a.attname, format_type(a.atttypid, a.atttypmod)
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`, db.Schema, table)
	if err != nil {
		return "", err
	}
	type column struct{ name, typ string }
	cols, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (column, error) {
		var c column
		return c, r.Scan(&c.name, &c.typ)
	})
	if err != nil {
		return "", err
	}
	if len(cols) == 0 {
		return "", fmt.Errorf("no table %s.%s", db.Schema, table)
	}
	parts := make([]string, len(cols))
	for i, c := range cols {
		col := pgx.Identifier{c.name}.Sanitize()
		switch {
		case strings.HasPrefix(c.typ, "timestamp"):
			col = fmt.Sprintf(`to_char(%s AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`, col)
		case c.typ == "date":
			col = fmt.Sprintf(`to_char(%s, 'YYYY-MM-DD')`, col)
		default:
			col += "::text"
		}
		parts[i] = fmt.Sprintf("coalesce(%s, '-')", col)
	}
	return `SELECT concat_ws('|', ` + strings.Join(parts, ", ") + `) FROM ` + pgx.Identifier{db.Schema, table}.Sanitize(), nil
}
