package projections

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/internal/ordergen"
)

// recorded is one event of a recorded stream (testdata/events.jsonl), in
// log order; the generator lives in internal/ordergen (benchmarks use it).
type recorded = ordergen.Event

type genConfig = ordergen.Config

func generate(cfg genConfig) []recorded { return ordergen.Generate(cfg) }

func eventID(i int) string { return ordergen.EventID(i) }

// seed inserts evs into the log as a superuser (see ordergen.Seed).
func seed(ctx context.Context, t testing.TB, adminURL string, evs []recorded, chunk int) {
	t.Helper()
	if err := ordergen.Seed(ctx, adminURL, evs, chunk); err != nil {
		t.Fatal(err)
	}
}

// appendRecorded appends evs through the store, as the write side would:
// consecutive events of one stream go in one append.
func appendRecorded(ctx context.Context, s eventstore.Store, evs []recorded) (event.Position, error) {
	var last event.Position
	for i := 0; i < len(evs); {
		j := i + 1
		for j < len(evs) && evs[j].Tenant == evs[i].Tenant && evs[j].Stream == evs[i].Stream {
			j++
		}
		req := eventstore.AppendRequest{Tenant: evs[i].Tenant, Stream: evs[i].Stream, Expected: eventstore.Exact(evs[i].Version - 1)}
		for _, e := range evs[i:j] {
			req.Events = append(req.Events, eventstore.NewEvent{ID: uuid.NewString(), Type: e.Type, SchemaVersion: e.SchemaVersion, Data: e.Data})
		}
		res, err := s.Append(ctx, req)
		if err != nil {
			return last, fmt.Errorf("append %s/%s v%d: %w", evs[i].Tenant, evs[i].Stream, evs[i].Version, err)
		}
		last = res.Position
		i = j
	}
	return last, nil
}

// dump renders the rows of the given read-model tables, read as a
// superuser (all tenants), one line per row in key order, preceded by a
// "## table" line per table.
func dump(ctx context.Context, t testing.TB, adminURL string, tables ...string) string {
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

// allTables lists every read-model table in dump order.
func allTables() []string {
	var out []string
	for _, p := range All() {
		out = append(out, p.Tables()...)
	}
	return out
}
