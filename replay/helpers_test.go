package replay_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/domain/money"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/orderview"
	"github.com/strata-es/strata/internal/pgtest"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/replay"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// bundle is a migrated database, its store and a replay service on it.
type bundle struct {
	d     *testdb.DB
	store *postgres.Store
	svc   *replay.Service
}

func newBundle(t testing.TB, d *testdb.DB, ps ...projections.Projection) *bundle {
	t.Helper()
	store := postgres.New(d.App, d.Projector)
	if ps == nil {
		ps = orderview.All()
	}
	svc, err := replay.New(replay.Config{Registry: order.Registry, Pool: d.Projector, App: d.App, Log: store, Projections: ps, Logger: quiet(),
		Runner:       projections.RunnerConfig{Registry: order.Registry, BatchSize: 500, Failures: projections.FailurePolicy{Attempts: 3, InitialDelay: 20 * time.Millisecond, MaxDelay: 50 * time.Millisecond}},
		YieldTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{d: d, store: store, svc: svc}
}

// history is one order's events, as payloads in stream order.
type history struct {
	tenant, id string
	events     []event.Payload
}

// genHistories makes valid order histories: created, some lines (one
// removed now and then), then placed and paid or cancelled, or left open.
func genHistories(seed uint64, tenants []string, orders int, start time.Time) []history {
	rng := rand.New(rand.NewPCG(seed, seed^0xabc))
	out := make([]history, 0, orders)
	at := start
	for i := range orders {
		tenant := tenants[i%len(tenants)]
		id := fmt.Sprintf("o%05d", i)
		customer := fmt.Sprintf("c-%d", rng.IntN(20))
		cur := []string{"EUR", "USD"}[rng.IntN(2)]
		at = at.Add(time.Duration(rng.IntN(90)+1) * time.Minute)
		h := history{tenant: tenant, id: id, events: []event.Payload{order.Created{OrderID: id, CustomerID: customer, Currency: cur, At: at}}}
		total := int64(0)
		lines := map[string]int64{}
		for l := range rng.IntN(4) + 1 {
			product := fmt.Sprintf("p-%d", l+rng.IntN(3))
			qty, unit := int64(rng.IntN(3)+1), int64(100*(rng.IntN(9)+1))
			if u, ok := lines[product]; ok {
				unit = u
			}
			lines[product] = unit
			at = at.Add(time.Minute)
			h.events = append(h.events, order.LineAdded{OrderID: id, ProductID: product, Quantity: qty, UnitPrice: money.Money{Amount: unit, Currency: cur}, At: at})
			total += qty * unit
		}
		var qtys = map[string]int64{}
		for _, e := range h.events {
			if la, ok := e.(order.LineAdded); ok {
				qtys[la.ProductID] += la.Quantity
			}
		}
		if rng.IntN(5) == 0 {
			for p := range qtys {
				at = at.Add(time.Minute)
				h.events = append(h.events, order.LineRemoved{OrderID: id, ProductID: p, At: at})
				total -= qtys[p] * lines[p]
				delete(qtys, p)
				break
			}
		}
		switch r := rng.IntN(10); {
		case r < 6 && total > 0:
			at = at.Add(time.Minute)
			h.events = append(h.events, order.Placed{OrderID: id, Total: money.Money{Amount: total, Currency: cur}, At: at})
			if r < 4 {
				at = at.Add(time.Minute)
				h.events = append(h.events, order.Paid{OrderID: id, Amount: money.Money{Amount: total, Currency: cur}, At: at})
			} else if r == 4 {
				at = at.Add(time.Minute)
				h.events = append(h.events, order.Cancelled{OrderID: id, Reason: "changed mind", At: at})
			}
		case r < 8:
			at = at.Add(time.Minute)
			h.events = append(h.events, order.Cancelled{OrderID: id, Reason: "changed mind", At: at})
		}
		out = append(out, h)
	}
	return out
}

// appendAll appends the histories interleaved, a few events per append.
func appendAll(ctx context.Context, t testing.TB, s eventstore.Store, hs []history) event.Position {
	t.Helper()
	var last event.Position
	next := make([]int, len(hs))
	for left := true; left; {
		left = false
		for i := range hs {
			h := &hs[i]
			if next[i] >= len(h.events) {
				continue
			}
			left = true
			n := min(len(h.events)-next[i], 1+i%3)
			pos := appendEvents(ctx, t, s, h.tenant, order.StreamID(h.id), int64(next[i]), h.events[next[i]:next[i]+n]...)
			if last.Less(pos) {
				last = pos
			}
			next[i] += n
		}
	}
	return last
}

// appendEvents appends order payloads to a stream at an expected version.
func appendEvents(ctx context.Context, t testing.TB, s eventstore.Store, tenant, stream string, expected int64, ps ...event.Payload) event.Position {
	t.Helper()
	return appendWith(ctx, t, s, order.Registry, tenant, stream, expected, ps...)
}

// appendWith appends payloads encoded by reg to a stream at an expected
// version.
func appendWith(ctx context.Context, t testing.TB, s eventstore.Store, reg *event.Registry, tenant, stream string, expected int64, ps ...event.Payload) event.Position {
	t.Helper()
	req := eventstore.AppendRequest{Tenant: tenant, Stream: stream, Expected: eventstore.Exact(expected)}
	for _, p := range ps {
		typ, sv, data, err := reg.Encode(p)
		if err != nil {
			t.Fatal(err)
		}
		req.Events = append(req.Events, eventstore.NewEvent{ID: uuid.NewString(), Type: typ, SchemaVersion: sv, Data: data})
	}
	res, err := s.Append(ctx, req)
	if err != nil {
		t.Fatalf("append %s/%s: %v", tenant, stream, err)
	}
	return res.Position
}

// adminConn connects as the superuser (which bypasses row-level security).
func adminConn(ctx context.Context, t testing.TB, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, "SET search_path = strata"); err != nil {
		t.Fatal(err)
	}
	return conn
}

func adminExec(ctx context.Context, t testing.TB, url string, sqls ...string) {
	t.Helper()
	conn := adminConn(ctx, t, url)
	for _, s := range sqls {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// dumpTables renders every row of the tables (as JSON, sorted), table by
// table, under the given names.
func dumpTables(ctx context.Context, t testing.TB, url string, tables map[string]string) string {
	t.Helper()
	conn := adminConn(ctx, t, url)
	var names []string
	for name := range tables {
		names = append(names, name)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, name := range names {
		rows, err := conn.Query(ctx, `SELECT to_jsonb(t)::text FROM `+pgx.Identifier{"strata", tables[name]}.Sanitize()+` t`)
		if err != nil {
			t.Fatalf("dump %s: %v", tables[name], err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		sort.Strings(lines)
		fmt.Fprintf(&b, "## %s (%d rows)\n%s\n", name, len(lines), strings.Join(lines, "\n"))
	}
	return b.String()
}

// liveTables maps every table of ps to itself.
func liveTables(ps ...projections.Projection) map[string]string {
	out := map[string]string{}
	for _, p := range ps {
		for _, t := range p.Tables() {
			out[t] = t
		}
	}
	return out
}

// freshRebuild applies the log up to until into fresh copies of the
// projections' tables (<table>_fresh, made by the superuser, without
// row-level security) under checkpoints <name>_fresh, and returns their
// tables by live name: what a rebuild from scratch at until produces.
func freshRebuild(ctx context.Context, t testing.TB, b *bundle, until event.Position, ps ...projections.Projection) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range ps {
		rename := map[string]string{}
		for _, table := range p.Tables() {
			fresh := table + "_fresh"
			adminExec(ctx, t, b.d.AdminURL, `DROP TABLE IF EXISTS strata.`+fresh,
				`CREATE TABLE strata.`+fresh+` (LIKE strata.`+table+` INCLUDING ALL)`,
				`GRANT SELECT, INSERT, UPDATE, DELETE ON strata.`+fresh+` TO strata_projector`)
			rename[table], out[table] = fresh, fresh
		}
		adminExec(ctx, t, b.d.AdminURL, `DELETE FROM strata.projection_checkpoints WHERE projection = '`+p.Name()+`_fresh'`)
		r, err := projections.NewRunner(p.(projections.Retargetable).WithTables(rename), b.store, b.d.Projector,
			projections.RunnerConfig{Registry: order.Registry, BatchSize: 1000, Checkpoint: p.Name() + "_fresh", Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.CatchUp(ctx, until); err != nil {
			t.Fatalf("fresh rebuild of %s: %v", p.Name(), err)
		}
		if cp := checkpoint(ctx, t, b, p.Name()+"_fresh"); cp.Position != until {
			t.Fatalf("fresh rebuild of %s stopped at %s, want %s", p.Name(), cp.Position, until)
		}
	}
	return out
}

// waitFor polls cond every 20ms until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkpoint reads a checkpoint row.
func checkpoint(ctx context.Context, t testing.TB, b *bundle, key string) projections.Checkpoint {
	t.Helper()
	cps, err := projections.ReadCheckpoints(ctx, b.d.Projector, key)
	if err != nil {
		t.Fatal(err)
	}
	return cps[key]
}

// runLive runs a live runner for p until the test ends.
func runLive(t testing.TB, b *bundle, p projections.Projection, cfg projections.RunnerConfig) *projections.Runner {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet()
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 50 * time.Millisecond
	}
	if cfg.LeaseRetry == 0 {
		cfg.LeaseRetry = 50 * time.Millisecond
	}
	r, err := projections.NewRunner(p, b.store, b.d.Projector, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

func splitLines(s string) []string { return strings.Split(s, "\n") }
func joinLines(l []string) string  { return strings.Join(l, "\n") }

// seedSQL inserts the histories into the log as the superuser,
// interleaved like live traffic (about 200 orders in progress at once, a
// few events of each in turn, each order's events in order), 2,000 events
// per statement: fast, and the same rows appends would write.
func seedSQL(ctx context.Context, t testing.TB, url string, hs []history) {
	t.Helper()
	type row struct {
		tenant, stream, typ, data string
		version                   int64
		sv                        int32
	}
	const window = 200
	var rows []row
	next := make([]int, len(hs))
	var open []int
	opened := 0
	for len(open) > 0 || opened < len(hs) {
		for len(open) < window && opened < len(hs) {
			open = append(open, opened)
			opened++
		}
		keep := open[:0]
		for _, i := range open {
			h := &hs[i]
			for k := 0; k < 1+i%3 && next[i] < len(h.events); k++ {
				typ, sv, data, err := order.Registry.Encode(h.events[next[i]])
				if err != nil {
					t.Fatal(err)
				}
				next[i]++
				rows = append(rows, row{h.tenant, order.StreamID(h.id), typ, string(data), int64(next[i]), int32(sv)})
			}
			if next[i] < len(h.events) {
				keep = append(keep, i)
			}
		}
		open = keep
	}
	conn := adminConn(ctx, t, url)
	for lo := 0; lo < len(rows); lo += 2000 {
		chunk := rows[lo:min(lo+2000, len(rows))]
		var tenants, streams, types, datas []string
		var versions []int64
		var svs []int32
		for _, r := range chunk {
			tenants, streams, types, datas = append(tenants, r.tenant), append(streams, r.stream), append(types, r.typ), append(datas, r.data)
			versions, svs = append(versions, r.version), append(svs, r.sv)
		}
		if _, err := conn.Exec(ctx, `INSERT INTO strata.events (tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata)
SELECT tenant_id, stream_id, version, gen_random_uuid(), event_type, schema_version, data::jsonb, '{}'::jsonb
FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::int[], $6::text[])
    WITH ORDINALITY AS e(tenant_id, stream_id, version, event_type, schema_version, data, ord)
ORDER BY ord`, tenants, streams, versions, types, svs, datas); err != nil {
			t.Fatalf("seed: %v", err)
		}
	}
}

// catalogShape describes the tables' shape as the catalog has it: columns,
// constraints, indexes, storage parameters, row-level security, policies
// and grants, so that a rebuild's swap can be checked to leave exactly the
// same tables behind.
func catalogShape(ctx context.Context, t testing.TB, url string, tables []string) string {
	t.Helper()
	conn := adminConn(ctx, t, url)
	var b strings.Builder
	for _, table := range tables {
		var out string
		err := conn.QueryRow(ctx, `SELECT concat_ws(E'\n',
  (SELECT string_agg(format('col %s %s %s %s %s', a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
       coalesce((SELECT collname FROM pg_collation WHERE oid = a.attcollation), '-'), coalesce(pg_get_expr(d.adbin, d.adrelid), '-')), E'\n' ORDER BY a.attnum)
   FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
   WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped),
  (SELECT string_agg(format('con %s %s', conname, pg_get_constraintdef(oid)), E'\n' ORDER BY conname) FROM pg_constraint WHERE conrelid = c.oid),
  (SELECT string_agg(format('idx %s', pg_get_indexdef(indexrelid)), E'\n' ORDER BY pg_get_indexdef(indexrelid)) FROM pg_index WHERE indrelid = c.oid),
  format('rls %s %s opts %s owner %s acl %s', c.relrowsecurity, c.relforcerowsecurity, c.reloptions, pg_get_userbyid(c.relowner),
    (SELECT array_agg(x::text ORDER BY x::text) FROM unnest(c.relacl) x)), -- the grants, not the order they were made in
  (SELECT string_agg(format('pol %s %s %s %s %s', polname, polcmd, polroles::regrole[], pg_get_expr(polqual, polrelid), pg_get_expr(polwithcheck, polrelid)), E'\n' ORDER BY polname)
   FROM pg_policy WHERE polrelid = c.oid))
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'strata' AND c.relname = $1`, table).Scan(&out)
		if err != nil {
			t.Fatalf("shape of %s: %v", table, err)
		}
		fmt.Fprintf(&b, "## %s\n%s\n", table, out)
	}
	return b.String()
}
