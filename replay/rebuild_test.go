package replay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/mux"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/commands"
	"github.com/strata-es/strata/commands/commandapi"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/domain/money"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/ordercmd"
	"github.com/strata-es/strata/examples/orders/orderquery"
	"github.com/strata-es/strata/examples/orders/orderview"
	"github.com/strata-es/strata/httpapi"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/readmodels"
	"github.com/strata-es/strata/readmodels/queryapi"
	"github.com/strata-es/strata/replay"
)

var secret = []byte("replay-test-secret-0123456789abcdef0123")

// liveSide runs the projections' live runners and the command and query
// APIs over one database, as a serve process would.
type liveSide struct {
	*bundle
	url      string
	store    *postgres.Store // with the append hook
	router   *mux.Router
	api      *mux.Router
	progress *projections.Progress
	runners  []*projections.Runner
}

func newLiveSide(t testing.TB, d *testdb.DB, ps ...projections.Projection) *liveSide {
	t.Helper()
	b := newBundle(t, d, ps...)
	if ps == nil {
		ps = orderview.All()
	}
	wake, progress := projections.NewSignal(), projections.NewProgress()
	store := postgres.New(d.App, d.Projector, postgres.WithAppendHook(wake.Fire))
	ls := &liveSide{bundle: b, store: store, progress: progress}
	for _, p := range ps {
		ls.runners = append(ls.runners, runLive(t, b, p, projections.RunnerConfig{Registry: order.Registry, DeadLetters: true, Wake: wake.C, Progress: progress,
			Failures: projections.FailurePolicy{Attempts: 3, InitialDelay: 20 * time.Millisecond, MaxDelay: 50 * time.Millisecond}}))
	}
	verifier, err := auth.NewVerifier(secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	ls.router = mux.NewRouter().UseEncodedPath() // as httpapi.NewRouter: routes match the escaped path
	httpapi.SetMisses(ls.router, nil)
	ls.api = ls.router.NewRoute().Subrouter()
	ls.api.Use(httpapi.Authenticate(verifier))
	if err := ordercmd.Commands(ls.api, commandapi.Deps{Store: store, Idempotency: store, Config: commands.Config{Registry: order.Registry}}); err != nil {
		t.Fatal(err)
	}
	monitor := projections.NewMonitor(projections.MonitorConfig{App: d.App, Log: store, Names: projections.Names(ps)})
	qa := queryapi.New(readmodels.NewDB(d.App), projections.NewConsistency(d.App, progress), monitor, queryapi.Config{})
	qa.RegisterAdmin(ls.api)
	qa.Register(ls.api, orderquery.Queries(readmodels.NewDB(d.App))...)
	srv := httptest.NewServer(httpapi.WithRequestID(httpapi.Recover(ls.router)))
	t.Cleanup(srv.Close)
	ls.url = srv.URL
	return ls
}

func token(t testing.TB, tenant string, scopes []string, crossTenant bool) string {
	t.Helper()
	tok, err := auth.Sign(secret, auth.Claims{Subject: "tester-" + tenant, Tenant: domain.TenantID(tenant), Scopes: scopes, CrossTenant: crossTenant}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// call sends a request and returns the status and body.
func call(t testing.TB, url, tok, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, path, err)
		return 0, nil
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	return res.StatusCode, out
}

// waitLive waits until every live runner has applied the log's head.
func (ls *liveSide) waitLive(ctx context.Context, t testing.TB) event.Position {
	t.Helper()
	head := lastPosition(ctx, t, ls.bundle)
	for _, r := range ls.runners {
		waitFor(t, 60*time.Second, r.Name()+" to reach the head", func() bool {
			return !checkpoint(ctx, t, ls.bundle, r.Name()).Position.Less(head)
		})
	}
	return head
}

// TestRebuildUnderLoad rebuilds every projection while commands keep
// arriving through the command API and queries keep being answered: no
// query fails, and the rebuilt read model equals a fresh rebuild at the
// same position.
func TestRebuildUnderLoad(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 3*time.Minute)
	d := testdb.New(t, orderview.Migrations)
	tenants := []string{"acme", "beta", "gamma"}
	seedSQL(ctx, t, d.AdminURL, genHistories(7, tenants, 4000, time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)))
	ls := newLiveSide(t, d)
	ls.waitLive(ctx, t)
	before, err := projections.ReadCheckpoints(ctx, d.Projector, projections.Names(orderview.All())...)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for _, p := range orderview.All() {
		tables = append(tables, p.Tables()...)
	}
	shape := catalogShape(ctx, t, d.AdminURL, tables)

	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var commandsOK, queries, failures atomic.Int64
	var failMu sync.Mutex
	var failed []string
	fail := func(s string) {
		failures.Add(1)
		failMu.Lock()
		if len(failed) < 10 {
			failed = append(failed, s)
		}
		failMu.Unlock()
	}
	for w, tenant := range tenants {
		tok := token(t, tenant, nil, false)
		wg.Add(2)
		go func() { // commands: whole order lifecycles
			defer wg.Done()
			for i := 0; loadCtx.Err() == nil; i++ {
				id := fmt.Sprintf("live-%d-%d", w, i)
				steps := []struct {
					path string
					body any
				}{
					{"/v1/orders", map[string]any{"order_id": id, "customer_id": "c-live", "currency": "EUR"}},
					{"/v1/orders/" + id + "/lines", map[string]any{"product_id": "p-1", "quantity": 2, "unit_price": map[string]any{"amount": 250, "currency": "EUR"}}},
					{"/v1/orders/" + id + "/place", map[string]any{}},
					{"/v1/orders/" + id + "/pay", map[string]any{"payment_reference": "ref"}},
				}
				for _, s := range steps {
					status, body := call(t, ls.url, tok, http.MethodPost, s.path, s.body)
					if status >= 300 {
						fail(fmt.Sprintf("POST %s: %d %s", s.path, status, body))
						return
					}
					commandsOK.Add(1)
				}
			}
		}()
		go func() { // queries on every route
			defer wg.Done()
			paths := []string{"/v1/orders?limit=20", "/v1/orders/o00003", "/v1/customers/c-1/summary", "/v1/revenue/daily?from=2025-01-01&to=2025-12-31"}
			for i := 0; loadCtx.Err() == nil; i++ {
				path := paths[i%len(paths)]
				status, body := call(t, ls.url, tok, http.MethodGet, path, nil)
				queries.Add(1)
				if status >= 500 || status == 0 {
					fail(fmt.Sprintf("GET %s: %d %s", path, status, body))
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	var phases sync.Map
	res, err := ls.svc.Rebuild(ctx, replay.RebuildOptions{Actor: "test", Progress: func(p replay.Progress) { phases.Store(p.Phase, true) }})
	if err != nil {
		stopLoad()
		wg.Wait()
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // traffic after the swap, too
	stopLoad()
	wg.Wait()
	t.Logf("rebuilt %d projections over %d events in %s; meanwhile %d commands and %d queries", len(res.Projections), res.Events,
		res.Elapsed.Round(time.Millisecond), commandsOK.Load(), queries.Load())
	if n := failures.Load(); n > 0 {
		t.Fatalf("%d requests failed during the rebuild: %s", n, strings.Join(failed, "; "))
	}
	if commandsOK.Load() == 0 || queries.Load() == 0 {
		t.Fatal("no load ran during the rebuild")
	}
	for _, ph := range []replay.Phase{replay.PhaseBuild, replay.PhaseIndexes, replay.PhaseSwap, replay.PhaseDone} {
		if _, ok := phases.Load(ph); !ok {
			t.Errorf("no progress reported in phase %s", ph)
		}
	}
	if len(res.Projections) != 4 {
		t.Fatalf("rebuilt %+v", res.Projections)
	}
	head := ls.waitLive(ctx, t)
	after, err := projections.ReadCheckpoints(ctx, d.Projector)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range orderview.All() {
		if after[p.Name()].Generation == before[p.Name()].Generation {
			t.Errorf("%s kept its generation: not swapped", p.Name())
		}
		if _, ok := after[p.Name()+"__rebuild"]; ok {
			t.Errorf("the rebuild checkpoint of %s is still there", p.Name())
		}
	}
	assertNoShadowTables(ctx, t, d.AdminURL)
	if after := catalogShape(ctx, t, d.AdminURL, tables); after != shape {
		t.Errorf("the swapped tables' shape differs from the originals':\n%s", diffLines(shape, after))
	}
	want := dumpTables(ctx, t, d.AdminURL, freshRebuild(ctx, t, ls.bundle, head, orderview.All()...))
	got := dumpTables(ctx, t, d.AdminURL, liveTables(orderview.All()...))
	if got != want {
		t.Fatalf("rebuilt read model differs from a fresh rebuild at %s:\n%s", head, diffLines(want, got))
	}
}

// assertNoShadowTables checks that no shadow or replaced table is left.
func assertNoShadowTables(ctx context.Context, t testing.TB, url string) {
	t.Helper()
	var left []string
	rows, err := adminConn(ctx, t, url).Query(ctx, `SELECT relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'strata' AND (relname LIKE '%\_\_rebuild%' OR relname LIKE '%\_\_replaced%')`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		left = append(left, n)
	}
	if len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// TestRebuildResumes interrupts a rebuild mid-way, checks that its shadow
// and checkpoint survive, and runs it again to the same result as a fresh
// rebuild.
func TestRebuildResumes(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 2*time.Minute)
	d := testdb.New(t, orderview.Migrations)
	seedSQL(ctx, t, d.AdminURL, genHistories(11, []string{"acme", "beta"}, 1500, time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)))
	b := newBundle(t, d)
	svc, err := replay.New(replay.Config{Registry: order.Registry, Projections: orderview.All(), Pool: d.Projector, Log: b.store, Logger: quiet(), Runner: projections.RunnerConfig{BatchSize: 100, CatchUpBatch: 400},
		FoldRows: -1}) // the fifth progress report well before the end of the log; applied, not folded (whose resume TestRebuildFoldKilled shows)
	if err != nil {
		t.Fatal(err)
	}
	list := []string{orderview.OrderDetailsName}
	rctx, cancel := context.WithCancel(ctx)
	var batches atomic.Int64
	_, err = svc.Rebuild(rctx, replay.RebuildOptions{Projections: list, ProgressEvery: time.Nanosecond, Progress: func(p replay.Progress) {
		if p.Done > 0 && batches.Add(1) == 5 {
			cancel()
		}
	}})
	if err == nil || rctx.Err() == nil {
		t.Fatalf("interrupted rebuild returned %v", err)
	}
	key := orderview.OrderDetailsName + "__rebuild"
	cp := checkpoint(ctx, t, b, key)
	if cp.Position.IsZero() || cp.Rebuild == nil {
		t.Fatalf("interrupted rebuild left checkpoint %+v", cp)
	}
	st, err := svc.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r := st[0].Rebuild; r == nil || r.Active || r.LagEvents == 0 || r.Scope != "all" {
		t.Fatalf("status of the interrupted rebuild: %+v", r)
	}
	// Another scope must not take the interrupted shadow over.
	if _, err := svc.Rebuild(ctx, replay.RebuildOptions{Projections: list, Tenant: "acme"}); !errors.Is(err, replay.ErrInvalid) {
		t.Fatalf("a tenant rebuild over an interrupted full one: %v, want ErrInvalid", err)
	}
	res, err := svc.Rebuild(ctx, replay.RebuildOptions{Projections: list})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Projections[0].Resumed {
		t.Error("the second run did not resume")
	}
	head := lastPosition(ctx, t, b)
	p := orderview.NewOrderDetails(orderview.OrderDetailsTables{})
	want := dumpTables(ctx, t, d.AdminURL, freshRebuild(ctx, t, b, head, p))
	if got := dumpTables(ctx, t, d.AdminURL, liveTables(p)); got != want {
		t.Fatalf("resumed rebuild differs from a fresh rebuild:\n%s", diffLines(want, got))
	}
	assertNoShadowTables(ctx, t, d.AdminURL)
}

// TestRebuildTenant damages two tenants' rows, rebuilds one tenant, and
// checks that exactly that tenant's rows are repaired.
func TestRebuildTenant(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 2*time.Minute)
	d := testdb.New(t, orderview.Migrations)
	seedSQL(ctx, t, d.AdminURL, genHistories(13, []string{"acme", "beta"}, 600, time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)))
	ls := newLiveSide(t, d)
	ls.waitLive(ctx, t)
	adminExec(ctx, t, d.AdminURL,
		`UPDATE order_list SET total_amount = -1`,
		`UPDATE customer_summaries SET orders = orders + 100`,
		`DELETE FROM daily_revenue WHERE tenant_id = 'acme' AND day < '2025-02-01'`)
	damaged := dumpTables(ctx, t, d.AdminURL, liveTables(orderview.All()...))

	plan, err := ls.svc.Plan(ctx, replay.RebuildOptions{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if plan.Projections[0].TenantEvents == 0 || plan.Projections[0].TenantEvents >= plan.Projections[0].Events {
		t.Errorf("plan counts %d events of acme among %d", plan.Projections[0].TenantEvents, plan.Projections[0].Events)
	}
	if got := dumpTables(ctx, t, d.AdminURL, liveTables(orderview.All()...)); got != damaged {
		t.Fatal("the plan changed rows")
	}
	// The rebuild reads acme's events through the log's index by tenant
	// (eventstore.TenantLog): not one of beta's events is read.
	counting := &othersCounter{Store: ls.bundle.store, tenant: "acme"}
	svc, err := replay.New(replay.Config{Registry: order.Registry, Pool: d.Projector, App: d.App, Log: counting, Projections: orderview.All(),
		Logger: quiet(), Runner: projections.RunnerConfig{Registry: order.Registry, BatchSize: 500}, YieldTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var last replay.Progress
	var mu sync.Mutex
	if _, err := svc.Rebuild(ctx, replay.RebuildOptions{Tenant: "acme", Actor: "test", ProgressEvery: time.Nanosecond,
		Progress: func(p replay.Progress) { mu.Lock(); last = p; mu.Unlock() }}); err != nil {
		t.Fatal(err)
	}
	var tenantEvents int64 // progress reports the projection with the most work
	for _, pl := range plan.Projections {
		tenantEvents = max(tenantEvents, pl.TenantEvents)
	}
	if last.Total != tenantEvents || last.Done != last.Total {
		t.Errorf("progress at the end: %d of %d events, want acme's %d of %d (the work is the tenant's, not the log's)",
			last.Done, last.Total, tenantEvents, tenantEvents)
	}
	if n := counting.others.Load(); n != 0 {
		t.Errorf("the rebuild of acme read %d events of other tenants from the global log", n)
	}
	head := ls.waitLive(ctx, t)
	fresh := dumpTables(ctx, t, d.AdminURL, freshRebuild(ctx, t, ls.bundle, head, orderview.All()...))
	got := dumpTables(ctx, t, d.AdminURL, liveTables(orderview.All()...))
	tenantLines := func(s, tenant string) string {
		var out []string
		for _, l := range strings.Split(s, "\n") {
			if strings.Contains(l, `"tenant_id": "`+tenant+`"`) {
				out = append(out, l)
			}
		}
		return strings.Join(out, "\n")
	}
	if w, g := tenantLines(fresh, "acme"), tenantLines(got, "acme"); w != g {
		t.Errorf("acme's rows differ from a fresh rebuild:\n%s", diffLines(w, g))
	}
	if w, g := tenantLines(damaged, "beta"), tenantLines(got, "beta"); w != g {
		t.Errorf("beta's rows changed:\n%s", diffLines(w, g))
	}
	if tenantLines(fresh, "beta") == tenantLines(got, "beta") {
		t.Error("beta's damage is gone: the rebuild touched another tenant")
	}
	assertNoShadowTables(ctx, t, d.AdminURL)
}

// TestRebuildDryRunChangesNothing plans every kind of rebuild and checks
// that no table, row or checkpoint changed.
func TestRebuildDryRunChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, time.Minute)
	d := testdb.New(t, orderview.Migrations)
	seedSQL(ctx, t, d.AdminURL, genHistories(17, []string{"acme"}, 200, time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)))
	b := newBundle(t, d)
	head := lastPosition(ctx, t, b)
	for _, p := range orderview.All() {
		r, err := projections.NewRunner(p, b.store, d.Projector, projections.RunnerConfig{Registry: order.Registry, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.CatchUp(ctx, head); err != nil {
			t.Fatal(err)
		}
	}
	snapshot := func() string {
		conn := adminConn(ctx, t, d.AdminURL)
		var catalog, cps string
		if err := conn.QueryRow(ctx, `SELECT string_agg(relname, ',' ORDER BY relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'strata'`).Scan(&catalog); err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRow(ctx, `SELECT string_agg(to_jsonb(c)::text, ',' ORDER BY projection) FROM projection_checkpoints c`).Scan(&cps); err != nil {
			t.Fatal(err)
		}
		return catalog + "\n" + cps + "\n" + dumpTables(ctx, t, d.AdminURL, liveTables(orderview.All()...))
	}
	before := snapshot()
	from := event.Position{}
	for _, o := range []replay.RebuildOptions{{}, {Tenant: "acme"}, {Projections: []string{"order_list"}, From: &from}} {
		plan, err := b.svc.Plan(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		if len(plan.Projections) == 0 || plan.Projections[0].Events == 0 {
			t.Errorf("plan %+v counts no events", plan)
		}
	}
	if after := snapshot(); after != before {
		t.Fatalf("a dry run changed the database:\n%s", diffLines(before, after))
	}
}

// TestRebuildFrom re-derives the streams touched since a token in place,
// and refuses projections whose rows add up several streams.
func TestRebuildFrom(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, time.Minute)
	d := testdb.New(t, orderview.Migrations)
	hs := genHistories(19, []string{"acme", "beta"}, 300, time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	seedSQL(ctx, t, d.AdminURL, hs[:200])
	b := newBundle(t, d)
	token := lastPosition(ctx, t, b)
	seedSQL(ctx, t, d.AdminURL, hs[200:])
	head := lastPosition(ctx, t, b)
	for _, p := range orderview.All() {
		r, err := projections.NewRunner(p, b.store, d.Projector, projections.RunnerConfig{Registry: order.Registry, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.CatchUp(ctx, head); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.svc.Rebuild(ctx, replay.RebuildOptions{From: &token}); !errors.Is(err, replay.ErrInvalid) ||
		!strings.Contains(err.Error(), orderview.CustomerSummaryName) {
		t.Fatalf("--from over every projection: %v, want a refusal naming customer_summary", err)
	}
	// Damage an order touched after the token and one that was not.
	adminExec(ctx, t, d.AdminURL, `UPDATE order_list SET customer_id = 'damaged' WHERE order_id IN ('o00250', 'o00010')`)
	res, err := b.svc.Rebuild(ctx, replay.RebuildOptions{Projections: []string{orderview.OrderListName, orderview.OrderDetailsName}, From: &token})
	if err != nil {
		t.Fatal(err)
	}
	if res.Projections[0].Streams != 100 {
		t.Errorf("re-derived %d streams, want the 100 orders seeded after the token", res.Projections[0].Streams)
	}
	p := orderview.NewOrderList(orderview.OrderListTables{})
	fresh := dumpTables(ctx, t, d.AdminURL, freshRebuild(ctx, t, b, head, p))
	got := dumpTables(ctx, t, d.AdminURL, liveTables(p))
	d1 := diffLines(fresh, got)
	if !strings.Contains(d1, `"o00010"`) || strings.Contains(d1, `"o00250"`) {
		t.Fatalf("want only o00010 (untouched since the token) still damaged; diff:\n%s", d1)
	}
}

// TestNewProjectionBackfills registers a projection that never ran (the
// order list's code under a name and tables of its own) while appends
// keep coming: it starts from the first event, catches up and ends equal
// to a fresh rebuild.
func TestNewProjectionBackfills(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 2*time.Minute)
	d := testdb.New(t, orderview.Migrations)
	seedSQL(ctx, t, d.AdminURL, genHistories(23, []string{"acme", "beta"}, 1500, time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)))
	ls := newLiveSide(t, d, orderview.NewOrderList(orderview.OrderListTables{}))
	adminExec(ctx, t, d.AdminURL, `CREATE TABLE strata.order_list_v2 (LIKE strata.order_list INCLUDING ALL)`,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON strata.order_list_v2 TO strata_projector`)
	loadCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; loadCtx.Err() == nil; i++ {
			id := fmt.Sprintf("new-%d", i)
			at := time.Date(2026, 1, 1, 0, 0, i, 0, time.UTC)
			appendEvents(ctx, t, ls.store, "acme", order.StreamID(id), 0, order.Created{OrderID: id, CustomerID: "c-new", Currency: "EUR", At: at},
				order.LineAdded{OrderID: id, ProductID: "p-1", Quantity: 1, UnitPrice: money.Money{Amount: 100, Currency: "EUR"}, At: at})
			time.Sleep(5 * time.Millisecond)
		}
	}()
	v2 := orderview.NewOrderList(orderview.OrderListTables{}).WithTables(map[string]string{"order_list": "order_list_v2"})
	r := runLive(t, ls.bundle, v2, projections.RunnerConfig{Registry: order.Registry, Checkpoint: "order_list_v2", DeadLetters: true})
	waitFor(t, 60*time.Second, "the new projection to start", func() bool { return !checkpoint(ctx, t, ls.bundle, "order_list_v2").Position.IsZero() })
	time.Sleep(500 * time.Millisecond)
	stop()
	<-done
	head := ls.waitLive(ctx, t)
	waitFor(t, 60*time.Second, "the new projection to reach the head", func() bool {
		return !checkpoint(ctx, t, ls.bundle, r.Name()).Position.Less(head)
	})
	p := orderview.NewOrderList(orderview.OrderListTables{})
	want := dumpTables(ctx, t, d.AdminURL, freshRebuild(ctx, t, ls.bundle, head, p))
	if got := dumpTables(ctx, t, d.AdminURL, map[string]string{"order_list": "order_list_v2"}); got != want {
		t.Fatalf("the backfilled projection differs from a fresh rebuild:\n%s", diffLines(want, got))
	}
}

// TestRebuildTenantSlots interrupts one tenant's rebuild and checks that
// it blocks neither another tenant's rebuild nor the operator's (each has
// a slot of its own), that status shows it without naming the tenant, and
// that it then resumes to the same rows as a fresh rebuild.
func TestRebuildTenantSlots(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 2*time.Minute)
	d := testdb.New(t, orderview.Migrations)
	seedSQL(ctx, t, d.AdminURL, genHistories(19, []string{"acme", "beta"}, 1500, time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)))
	b := newBundle(t, d)
	svc, err := replay.New(replay.Config{Registry: order.Registry, Projections: orderview.All(), Pool: d.Projector, Log: b.store, Logger: quiet(), Runner: projections.RunnerConfig{BatchSize: 100}})
	if err != nil {
		t.Fatal(err)
	}
	list := []string{orderview.OrderDetailsName}
	rctx, cancel := context.WithCancel(ctx)
	var batches atomic.Int64
	_, err = svc.Rebuild(rctx, replay.RebuildOptions{Projections: list, Tenant: "acme", ProgressEvery: time.Nanosecond, Progress: func(p replay.Progress) {
		if p.Done > 0 && batches.Add(1) == 3 {
			cancel()
		}
	}})
	if err == nil || rctx.Err() == nil {
		t.Fatalf("interrupted rebuild returned %v", err)
	}

	for _, tenant := range []string{"beta", ""} {
		plan, err := svc.Plan(ctx, replay.RebuildOptions{Projections: list, Tenant: tenant})
		if err != nil {
			t.Fatal(err)
		}
		if pl := plan.Projections[0]; pl.Conflict != "" || pl.Resume {
			t.Errorf("plan for %q while acme's rebuild is interrupted: conflict %q, resume %v; want a fresh start", tenant, pl.Conflict, pl.Resume)
		}
		if _, err := svc.Rebuild(ctx, replay.RebuildOptions{Projections: list, Tenant: tenant, Actor: "test"}); err != nil {
			t.Fatalf("rebuild of %q while acme's is interrupted: %v", tenant, err)
		}
	}
	st, err := svc.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st[0].Rebuild != nil || len(st[0].TenantRebuilds) != 1 || st[0].TenantRebuilds[0].Scope != "tenant" || st[0].TenantRebuilds[0].Active {
		t.Fatalf("status: rebuild %+v, tenant rebuilds %+v; want acme's interrupted one only", st[0].Rebuild, st[0].TenantRebuilds)
	}
	for _, shadow := range st[0].TenantRebuilds[0].Tables {
		if strings.Contains(shadow, "acme") {
			t.Errorf("shadow table %s names the tenant", shadow)
		}
	}
	plan, err := svc.Plan(ctx, replay.RebuildOptions{Projections: list, Tenant: "acme"})
	if err != nil || !plan.Projections[0].Resume {
		t.Fatalf("acme's plan: %+v %v, want a resume", plan, err)
	}
	res, err := svc.Rebuild(ctx, replay.RebuildOptions{Projections: list, Tenant: "acme", Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Projections[0].Resumed {
		t.Error("acme's second run did not resume")
	}
	head := lastPosition(ctx, t, b)
	p := orderview.NewOrderDetails(orderview.OrderDetailsTables{})
	want := dumpTables(ctx, t, d.AdminURL, freshRebuild(ctx, t, b, head, p))
	if got := dumpTables(ctx, t, d.AdminURL, liveTables(p)); got != want {
		t.Fatalf("rows after the three rebuilds differ from a fresh rebuild:\n%s", diffLines(want, got))
	}
	assertNoShadowTables(ctx, t, d.AdminURL)
}

// TestRebuildThroughServingLogins: with the projector pool logging in as
// the serving projector login (which cannot become strata_owner), whole
// and per-tenant rebuilds do their DDL and swaps on the owner connection
// and give the same rows as a rebuild by an owner's login alone; without
// an owner connection a rebuild is refused before anything is created.
func TestRebuildThroughServingLogins(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 2*time.Minute)
	d := testdb.New(t, orderview.Migrations)
	seedSQL(ctx, t, d.AdminURL, genHistories(17, []string{"acme", "beta"}, 300, time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)))
	app, proj := d.ServingPools(t)
	store := postgres.New(app, proj)
	newSvc := func(owner *pgxpool.Pool) *replay.Service {
		svc, err := replay.New(replay.Config{Registry: order.Registry, Projections: orderview.All(), Pool: proj, App: app, Owner: owner, Log: store, Logger: quiet(),
			Runner: projections.RunnerConfig{BatchSize: 200}, YieldTimeout: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return svc
	}

	_, err := newSvc(nil).Rebuild(ctx, replay.RebuildOptions{})
	if !errors.Is(err, replay.ErrNoOwner) || !errors.Is(err, replay.ErrInvalid) {
		t.Fatalf("a rebuild without an owner connection: %v, want ErrNoOwner", err)
	}
	assertNoShadowTables(ctx, t, d.AdminURL)

	svc := newSvc(d.Projector) // logs in as the owner's login, runs as the projector
	if _, err := svc.Rebuild(ctx, replay.RebuildOptions{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	adminExec(ctx, t, d.AdminURL, `UPDATE order_list SET total_amount = -1 WHERE tenant_id = 'acme'`)
	if _, err := svc.Rebuild(ctx, replay.RebuildOptions{Tenant: "acme", Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	got := dumpTables(ctx, t, d.AdminURL, liveTables(orderview.All()...))
	assertNoShadowTables(ctx, t, d.AdminURL)

	if _, err := newBundle(t, d).svc.Rebuild(ctx, replay.RebuildOptions{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	if want := dumpTables(ctx, t, d.AdminURL, liveTables(orderview.All()...)); got != want {
		t.Errorf("rows rebuilt through the serving logins differ from an owner's rebuild:\n%s", diffLines(want, got))
	}
	if !strings.Contains(got, `"tenant_id": "beta"`) {
		t.Error("nothing was rebuilt")
	}
}

// othersCounter is a store that counts the events of tenants other than
// tenant its global log read returns.
type othersCounter struct {
	*postgres.Store
	tenant string
	others atomic.Int64
}

func (c *othersCounter) ReadAll(ctx context.Context, after event.Position, limit int) ([]event.Record, error) {
	recs, err := c.Store.ReadAll(ctx, after, limit)
	for _, r := range recs {
		if r.Tenant != c.tenant {
			c.others.Add(1)
		}
	}
	return recs, err
}
