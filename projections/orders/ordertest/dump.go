package ordertest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/projections/orders"
	"github.com/strata-es/strata/projections/projectiontest"
)

// Dump renders the rows of the given order read-model tables, read as a
// superuser (all tenants), one line per row in key order, preceded by a
// "## table" line per table: the format of the golden files and of
// Expected.
func Dump(ctx context.Context, t testing.TB, adminURL string, tables ...string) string {
	t.Helper()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var b strings.Builder
	for _, table := range tables {
		q, ok := dumpQueries[table]
		if !ok {
			t.Fatalf("no dump query for table %s", table)
		}
		rows, err := conn.Query(ctx, q)
		if err != nil {
			t.Fatalf("dump %s: %v", table, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("dump %s: %v", table, err)
		}
		writeTable(&b, table, lines)
	}
	return b.String()
}

// writeTable renders one table's rows sorted bytewise, independent of the
// database's collation.
func writeTable(b *strings.Builder, table string, lines []string) {
	sort.Strings(lines)
	fmt.Fprintf(b, "## %s\n", table)
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
}

// Timestamps are rendered in UTC with microseconds.
const tsFmt = `'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'`

func ts(col string) string {
	return fmt.Sprintf("coalesce(to_char(%s AT TIME ZONE 'UTC', %s), '-')", col, tsFmt)
}

var dumpQueries = map[string]string{
	"order_details": `SELECT concat_ws('|', tenant_id, order_id, customer_id, status, currency, total_amount, version, ` +
		ts("created_at") + `, ` + ts("placed_at") + `, ` + ts("paid_at") + `, ` + ts("cancelled_at") + `)
FROM strata.order_details ORDER BY tenant_id, order_id`,
	"order_detail_lines": `SELECT concat_ws('|', tenant_id, order_id, seq, product_id, quantity, unit_price, currency, line_total)
FROM strata.order_detail_lines ORDER BY tenant_id, order_id, seq`,
	"order_list": `SELECT concat_ws('|', tenant_id, order_id, customer_id, status, currency, coalesce(total_amount::text, '-'), ` +
		ts("created_at") + `, ` + ts("updated_at") + `)
FROM strata.order_list ORDER BY tenant_id, order_id`,
	"customer_summaries": `SELECT concat_ws('|', tenant_id, customer_id, orders, open_orders)
FROM strata.customer_summaries ORDER BY tenant_id, customer_id`,
	"customer_paid_totals": `SELECT concat_ws('|', tenant_id, customer_id, currency, amount)
FROM strata.customer_paid_totals ORDER BY tenant_id, customer_id, currency`,
	"customer_orders": `SELECT concat_ws('|', tenant_id, order_id, customer_id)
FROM strata.customer_orders ORDER BY tenant_id, order_id`,
	"daily_revenue": `SELECT concat_ws('|', tenant_id, to_char(day, 'YYYY-MM-DD'), currency, amount, orders)
FROM strata.daily_revenue ORDER BY tenant_id, day, currency`,
}

// Tables lists every order read-model table in dump order.
func Tables() []string {
	var out []string
	for _, p := range orders.All() {
		out = append(out, p.Tables()...)
	}
	return out
}

// Diff lists the lines only in want (-) and only in got (+)
// (projectiontest.Diff).
func Diff(want, got string) string { return projectiontest.Diff(want, got) }
