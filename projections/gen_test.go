package projections

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/domain/order"
	"github.com/strata-es/strata/eventstore"
)

// recorded is one event of a recorded stream (testdata/events.jsonl), in
// log order.
type recorded struct {
	Tenant        string          `json:"tenant"`
	Stream        string          `json:"stream"`
	Version       int64           `json:"version"`
	Type          string          `json:"type"`
	SchemaVersion int             `json:"schema_version"`
	Data          json.RawMessage `json:"data"`
}

// genConfig shapes generated histories.
type genConfig struct {
	Seed      uint64
	Tenants   int
	Orders    int           // in total, spread over the tenants
	Customers int           // per tenant
	Open      int           // orders in progress at once (interleaving)
	Start     time.Time     // creation time of the first order
	Spacing   time.Duration // between the creation of consecutive orders (default 17m)
}

// generate returns realistic, valid order histories, interleaved like
// concurrent traffic: every command is decided by the order aggregate, so
// the events are exactly what the write side would store. About 10% of
// line_added events are stored in their v1 schema (upcast on read). Order
// and customer IDs repeat across tenants on purpose.
func generate(cfg genConfig) []recorded {
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5eed))
	if cfg.Open == 0 {
		cfg.Open = 40
	}
	if cfg.Spacing == 0 {
		cfg.Spacing = 17 * time.Minute
	}
	type live struct {
		tenant, id string
		events     []recorded
		next       int
	}
	currencies := []string{"EUR", "USD", "GBP"}
	price := func(product int) int64 { return int64(100 + (product*7919)%9900) }
	plan := func(i int) *live {
		tenant := fmt.Sprintf("t-%d", i%cfg.Tenants+1)
		id := fmt.Sprintf("o-%d", i/cfg.Tenants+1)
		l := &live{tenant: tenant, id: id}
		o := &order.Order{}
		at := cfg.Start.Add(time.Duration(i) * cfg.Spacing).Add(time.Duration(rng.IntN(1_000_000_000)))
		step := func() time.Time {
			at = at.Add(time.Duration(1+rng.IntN(180)) * time.Minute).Add(time.Duration(rng.IntN(1000)) * time.Microsecond)
			return at
		}
		do := func(evs []event.Payload, err error) {
			if err != nil {
				panic(fmt.Sprintf("generator: %s/%s: %v", tenant, id, err))
			}
			for _, p := range evs {
				if err := o.Apply(p); err != nil {
					panic(err)
				}
				typ, sv, data, err := order.Registry.Encode(p)
				if err != nil {
					panic(err)
				}
				if la, ok := p.(order.LineAdded); ok && rng.IntN(10) == 0 {
					sv = 1
					data, _ = json.Marshal(map[string]any{"order_id": la.OrderID, "product_id": la.ProductID, "quantity": la.Quantity,
						"unit_price_minor": la.UnitPrice.Amount, "currency": la.UnitPrice.Currency, "at": la.At})
				}
				l.events = append(l.events, recorded{Tenant: tenant, Stream: order.StreamID(id), Version: o.Version,
					Type: typ, SchemaVersion: sv, Data: data})
			}
		}
		currency := currencies[rng.IntN(len(currencies))]
		do(o.Create(id, fmt.Sprintf("c-%d", rng.IntN(cfg.Customers)+1), currency, at))
		for n := 1 + rng.IntN(4); n > 0; n-- {
			p := rng.IntN(12) + 1
			do(o.AddLine(fmt.Sprintf("p-%d", p), int64(1+rng.IntN(5)), order.Money{Amount: price(p), Currency: currency}, step()))
		}
		if rng.IntN(6) == 0 {
			do(o.RemoveLine(o.Lines[rng.IntN(len(o.Lines))].ProductID, step()))
			p := rng.IntN(12) + 1
			do(o.AddLine(fmt.Sprintf("p-%d", p), int64(1+rng.IntN(5)), order.Money{Amount: price(p), Currency: currency}, step()))
		}
		switch r := rng.IntN(20); {
		case r < 2: // stays a draft
		case r < 4:
			do(o.Cancel("changed my mind", step()))
		default:
			do(o.Place(step()))
			switch r := rng.IntN(20); {
			case r < 13:
				do(o.Pay(fmt.Sprintf("pay-%s-%s", tenant, id), step()))
			case r < 16:
				do(o.Cancel("", step()))
			}
		}
		return l
	}
	var out []recorded
	var open []*live
	started := 0
	for started < cfg.Orders || len(open) > 0 {
		for len(open) < cfg.Open && started < cfg.Orders {
			open = append(open, plan(started))
			started++
		}
		k := rng.IntN(len(open))
		l := open[k]
		out = append(out, l.events[l.next])
		l.next++
		if l.next == len(l.events) {
			open = append(open[:k], open[k+1:]...)
		}
	}
	return out
}

// eventID gives the i-th seeded event a stable UUID.
func eventID(i int) string {
	return uuid.NewSHA1(uuid.NameSpaceOID, []byte(fmt.Sprintf("strata-test-event-%d", i))).String()
}

// seed inserts evs into the log as a superuser, chunk events per statement
// and transaction: fast, and the log's order is exactly evs' order.
func seed(ctx context.Context, t testing.TB, adminURL string, evs []recorded, chunk int) {
	t.Helper()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for lo := 0; lo < len(evs); lo += chunk {
		hi := min(lo+chunk, len(evs))
		n := hi - lo
		tenants, streams, ids, types, datas := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		versions, svs := make([]int64, n), make([]int32, n)
		for i, e := range evs[lo:hi] {
			tenants[i], streams[i], versions[i], ids[i], types[i], svs[i], datas[i] = e.Tenant, e.Stream, e.Version, eventID(lo+i), e.Type, int32(e.SchemaVersion), string(e.Data)
		}
		_, err := conn.Exec(ctx, `INSERT INTO strata.events (tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata)
SELECT tenant_id, stream_id, version, event_id::uuid, event_type, schema_version, data::jsonb, '{}'::jsonb
FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::int[], $7::text[])
    WITH ORDINALITY AS e(tenant_id, stream_id, version, event_id, event_type, schema_version, data, ord)
ORDER BY ord`, tenants, streams, versions, ids, types, svs, datas)
		if err != nil {
			t.Fatalf("seed events %d..%d: %v", lo, hi, err)
		}
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
