package queryapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/mux"
	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/cli/openapi/openapitest"
	"github.com/strata-es/strata/commands"
	"github.com/strata-es/strata/commands/commandapi"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples/orders"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/ordercmd"
	"github.com/strata-es/strata/examples/orders/orderquery"
	"github.com/strata-es/strata/examples/orders/orderview"
	"github.com/strata-es/strata/httpapi"
	"github.com/strata-es/strata/internal/pgtest"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/readmodels"
	"github.com/strata-es/strata/readmodels/queryapi"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var secret = []byte("0123456789abcdef0123456789abcdef-query-tests")

// bundle is a command and query API over one database, wired as
// `strata serve` wires them (one router, one authentication), with or
// without projection runners in the same process.
type bundle struct {
	t        *testing.T
	d        *testdb.DB
	url      string
	store    *postgres.Store
	router   *mux.Router
	runners  []*projections.Runner
	progress *projections.Progress
}

type bundleOpts struct {
	runners bool
	local   func(string) (projections.RunnerStatus, bool)
	// waits, when set, bounds each tenant's consistency waits, as strata
	// serve does.
	waits *httpapi.TenantLimiter
	// private puts the database on a cluster of its own: for tests that
	// hold a transaction open, which pauses every log reader of the
	// cluster (other tests' too).
	private bool
}

func setup(t *testing.T, o bundleOpts) *bundle {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var d *testdb.DB
	if o.private {
		d = testdb.NewPrivate(t, nil, orderview.Migrations).DB
	} else {
		d = testdb.New(t, orderview.Migrations)
	}
	wake, progress := projections.NewSignal(), projections.NewProgress()
	store := postgres.New(d.App, d.Projector, postgres.WithAppendHook(wake.Fire))
	b := &bundle{t: t, d: d, store: store, progress: progress}
	if o.runners {
		shared := projections.NewSharedReads(store, order.Registry, 0)
		for _, p := range orderview.All() {
			r, err := projections.NewRunner(p, store, d.Projector, projections.RunnerConfig{Registry: order.Registry, PollInterval: 200 * time.Millisecond,
				Wake: wake.C, Progress: progress, Shared: shared, Logger: quiet()})
			if err != nil {
				t.Fatal(err)
			}
			b.runners = append(b.runners, r)
			done := make(chan struct{})
			go func() { defer close(done); r.Run(ctx) }()
			t.Cleanup(func() { <-done })
		}
	}
	t.Cleanup(cancel)
	local := o.local
	if local == nil {
		local = func(name string) (projections.RunnerStatus, bool) {
			for _, r := range b.runners {
				if r.Name() == name {
					return r.Status(), true
				}
			}
			return projections.RunnerStatus{}, false
		}
	}
	verifier, err := auth.NewVerifier(secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	b.router = mux.NewRouter().UseEncodedPath() // as httpapi.NewRouter: routes match the escaped path
	httpapi.SetMisses(b.router, nil)
	api := b.router.NewRoute().Subrouter()
	api.Use(httpapi.Authenticate(verifier))
	if err := ordercmd.Commands(api, commandapi.Deps{Store: store, Idempotency: store, Config: commands.Config{Registry: order.Registry}}); err != nil {
		t.Fatal(err)
	}
	monitor := projections.NewMonitor(projections.MonitorConfig{App: d.App, Log: store, Names: projections.Names(orderview.All()), Local: local})
	cfg := queryapi.Config{Head: store.LastCommitted}
	if o.waits != nil {
		cfg.WaitSlot = func(r *http.Request) (func(), error) { return o.waits.Enter(r, httpapi.SlotWaits) }
	}
	qa := queryapi.New(readmodels.NewDB(d.App), projections.NewConsistency(d.App, progress), monitor, cfg)
	qa.RegisterAdmin(api)
	qa.Register(api, orderquery.Queries(readmodels.NewDB(d.App))...)
	srv := httptest.NewServer(httpapi.WithRequestID(httpapi.Recover(b.router)))
	t.Cleanup(srv.Close)
	b.url = srv.URL
	if o.runners {
		deadline := time.Now().Add(30 * time.Second)
		for _, r := range b.runners {
			for r.Status().State != projections.StateRunning {
				if time.Now().After(deadline) {
					t.Fatalf("runner %s never became active", r.Name())
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	return b
}

func quiet() *slog.Logger { return runnerLogger }

func token(t testing.TB, tenant string, scopes []string, crossTenant bool) string {
	t.Helper()
	tok, err := auth.Sign(secret, auth.Claims{Subject: "tester-" + tenant, Tenant: domain.TenantID(tenant), Scopes: scopes, CrossTenant: crossTenant}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

func (b *bundle) do(method, path, tok string, body any, header ...string) response {
	b.t.Helper()
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, b.url+path, rd)
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	res, err := openapitest.ClientFor(b.t, orders.Module()).Do(req) // every request and response checked against the document
	if err != nil {
		b.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		b.t.Fatal(err)
	}
	return response{res.StatusCode, res.Header, raw}
}

type commandResult struct {
	OrderID  string `json:"order_id"`
	Version  int64  `json:"version"`
	Position string `json:"position"`
}

func (b *bundle) command(tok, path string, body any) commandResult {
	b.t.Helper()
	res := b.do(http.MethodPost, path, tok, body)
	if res.status != http.StatusOK && res.status != http.StatusCreated {
		b.t.Fatalf("POST %s: %d %s", path, res.status, res.body)
	}
	var out commandResult
	res.json(b.t, &out)
	return out
}

type orderView struct {
	OrderID    string `json:"order_id"`
	CustomerID string `json:"customer_id"`
	Status     string `json:"status"`
	Currency   string `json:"currency"`
	Lines      []struct {
		ProductID string `json:"product_id"`
		Quantity  int64  `json:"quantity"`
		UnitPrice struct {
			Amount   int64  `json:"amount"`
			Currency string `json:"currency"`
		} `json:"unit_price"`
		LineTotal struct {
			Amount int64 `json:"amount"`
		} `json:"line_total"`
	} `json:"lines"`
	Total struct {
		Amount   int64  `json:"amount"`
		Currency string `json:"currency"`
	} `json:"total"`
	Version     int64      `json:"version"`
	CreatedAt   time.Time  `json:"created_at"`
	PlacedAt    *time.Time `json:"placed_at"`
	PaidAt      *time.Time `json:"paid_at"`
	CancelledAt *time.Time `json:"cancelled_at"`
}

type listView struct {
	Items []struct {
		OrderID    string `json:"order_id"`
		CustomerID string `json:"customer_id"`
		Status     string `json:"status"`
		Total      *struct {
			Amount int64 `json:"amount"`
		} `json:"total"`
		CreatedAt time.Time `json:"created_at"`
	} `json:"items"`
	NextCursor *string `json:"next_cursor"`
}

type summaryView struct {
	CustomerID string `json:"customer_id"`
	Orders     int64  `json:"orders"`
	OpenOrders int64  `json:"open_orders"`
	PaidTotal  []struct {
		Amount   int64  `json:"amount"`
		Currency string `json:"currency"`
	} `json:"paid_total"`
}

type revenueView struct {
	Days []struct {
		Date     string `json:"date"`
		Currency string `json:"currency"`
		Amount   int64  `json:"amount"`
		Orders   int64  `json:"orders"`
	} `json:"days"`
}

// TestReadYourWrites1000 sends 1,000 commands through the command API and
// follows each with a query carrying the command's consistency token; the
// query must always see the write (the runners run in this process, woken
// by the append hook, with a poll interval far above the time a wait may
// take without a wake-up).
func TestReadYourWrites1000(t *testing.T) {
	t.Parallel()
	b := setup(t, bundleOpts{runners: true})
	tok := token(t, "t-ryw", nil, false)
	var slowest time.Duration
	pairs := 0
	consistent := func(path, position string, v any) {
		t.Helper()
		// The longest wait allowed: on a loaded test machine a projection
		// may take more than the default 2s; the test is about never
		// answering without the write, not about speed.
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		began := time.Now()
		res := b.do(http.MethodGet, path+sep+"wait=10s", tok, nil, queryapi.ConsistencyHeader, position)
		slowest = max(slowest, time.Since(began))
		if res.status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, res.status, res.body)
		}
		res.json(t, v)
	}
	today := time.Now().UTC().Format(time.DateOnly)
	var paid int64
	for i := 0; pairs < 1000; i++ {
		id, customer := fmt.Sprintf("o-%d", i), fmt.Sprintf("c-%d", i%7)
		r := b.command(tok, "/v1/orders", map[string]string{"order_id": id, "customer_id": customer, "currency": "EUR"})
		var o orderView
		consistent("/v1/orders/"+id, r.Position, &o)
		if o.Version != r.Version || o.Status != "draft" {
			t.Fatalf("pair %d: order %s at version %d (%s), want %d (draft)", pairs, id, o.Version, o.Status, r.Version)
		}
		pairs++

		r = b.command(tok, "/v1/orders/"+id+"/lines", map[string]any{"product_id": "p-1", "quantity": 2, "unit_price": map[string]any{"amount": 150, "currency": "EUR"}})
		consistent("/v1/orders/"+id, r.Position, &o)
		if o.Version != r.Version || len(o.Lines) != 1 || o.Total.Amount != 300 {
			t.Fatalf("pair %d: after adding a line: %+v", pairs, o)
		}
		pairs++

		r = b.command(tok, "/v1/orders/"+id+"/place", nil)
		var l listView
		consistent("/v1/orders?customer_id="+customer+"&status=placed", r.Position, &l)
		found := false
		for _, it := range l.Items {
			found = found || it.OrderID == id
		}
		if !found {
			t.Fatalf("pair %d: placed order %s not in the list of placed orders", pairs, id)
		}
		pairs++

		r = b.command(tok, "/v1/orders/"+id+"/pay", map[string]string{"payment_reference": "ref-" + id})
		paid += 300
		if i%2 == 0 {
			var s summaryView
			consistent("/v1/customers/"+customer+"/summary", r.Position, &s)
			if s.OpenOrders != 0 || len(s.PaidTotal) != 1 || s.Orders != int64(i/7+1) {
				t.Fatalf("pair %d: summary of %s: %+v", pairs, customer, s)
			}
		} else {
			var rv revenueView
			consistent("/v1/revenue/daily?from="+today+"&to="+today, r.Position, &rv)
			if len(rv.Days) != 1 || rv.Days[0].Amount != paid {
				t.Fatalf("pair %d: revenue %+v, want %d", pairs, rv, paid)
			}
		}
		pairs++
	}
	t.Logf("%d command/query pairs; slowest query (wait included) %s", pairs, slowest)
}

// TestForeignTenantLooksMissing: for every query route, tenant B asking
// for tenant A's IDs gets exactly what it gets for IDs nobody has.
func TestForeignTenantLooksMissing(t *testing.T) {
	t.Parallel()
	b := setup(t, bundleOpts{runners: true})
	a, other := token(t, "t-a", nil, false), token(t, "t-b", nil, false)
	b.command(a, "/v1/orders", map[string]string{"order_id": "o-1", "customer_id": "c-1", "currency": "EUR"})
	b.command(a, "/v1/orders/o-1/lines", map[string]any{"product_id": "p-1", "quantity": 1, "unit_price": map[string]any{"amount": 100, "currency": "EUR"}})
	b.command(a, "/v1/orders/o-1/place", nil)
	r := b.command(a, "/v1/orders/o-1/pay", map[string]string{"payment_reference": "x"})
	today := time.Now().UTC().Format(time.DateOnly)
	// Tenant A sees its data (with its token's wait) ...
	for _, path := range []string{"/v1/orders/o-1", "/v1/customers/c-1/summary"} {
		if res := b.do(http.MethodGet, path, a, nil, queryapi.ConsistencyHeader, r.Position); res.status != http.StatusOK {
			t.Fatalf("tenant A: GET %s: %d %s", path, res.status, res.body)
		}
	}
	// ... tenant B sees nothing of it, exactly as for missing IDs.
	for _, c := range []struct{ foreign, missing string }{
		{"/v1/orders/o-1", "/v1/orders/o-404"},
		{"/v1/customers/c-1/summary", "/v1/customers/c-404/summary"},
		{"/v1/orders?customer_id=c-1", "/v1/orders?customer_id=c-404"},
		{"/v1/orders?status=paid", "/v1/orders?status=cancelled"},
		{"/v1/revenue/daily?from=" + today + "&to=" + today, "/v1/revenue/daily?from=2001-01-01&to=2001-01-01"},
	} {
		f := b.do(http.MethodGet, c.foreign, other, nil, queryapi.ConsistencyHeader, r.Position)
		m := b.do(http.MethodGet, c.missing, other, nil, queryapi.ConsistencyHeader, r.Position)
		if f.status != m.status || !bytes.Equal(f.body, m.body) || f.header.Get("Content-Type") != m.header.Get("Content-Type") {
			t.Errorf("%s answers %d %s but %s answers %d %s", c.foreign, f.status, f.body, c.missing, m.status, m.body)
		}
	}
	res := b.do(http.MethodGet, "/v1/orders/o-1", other, nil)
	if want := `{"error":{"code":"not_found","message":"order not found"}}` + "\n"; res.status != http.StatusNotFound || string(res.body) != want {
		t.Errorf("foreign order: %d %q, want 404 %q", res.status, res.body, want)
	}
}

func TestListOrdersPagination(t *testing.T) {
	t.Parallel()
	b := setup(t, bundleOpts{runners: true})
	tok := token(t, "t-page", nil, false)
	var last commandResult
	for i := range 7 {
		customer := "c-1"
		if i%3 == 2 {
			customer = "c-2"
		}
		last = b.command(tok, "/v1/orders", map[string]string{"order_id": fmt.Sprintf("o-%d", i), "customer_id": customer, "currency": "EUR"})
		if i < 2 {
			b.command(tok, fmt.Sprintf("/v1/orders/o-%d/lines", i), map[string]any{"product_id": "p", "quantity": 1, "unit_price": map[string]any{"amount": 10, "currency": "EUR"}})
			last = b.command(tok, fmt.Sprintf("/v1/orders/o-%d/place", i), nil)
		}
	}
	page := func(query string) listView {
		t.Helper()
		res := b.do(http.MethodGet, "/v1/orders?"+query, tok, nil, queryapi.ConsistencyHeader, last.Position)
		if res.status != http.StatusOK {
			t.Fatalf("GET ?%s: %d %s", query, res.status, res.body)
		}
		var l listView
		res.json(t, &l)
		return l
	}
	var seen []string
	cursor := ""
	for pages := 0; ; pages++ {
		q := "limit=3"
		if cursor != "" {
			q += "&cursor=" + cursor
		}
		l := page(q)
		for i, it := range l.Items {
			seen = append(seen, it.OrderID)
			if i > 0 && it.CreatedAt.After(l.Items[i-1].CreatedAt) {
				t.Errorf("not newest first: %v", l.Items)
			}
		}
		if l.NextCursor == nil {
			if pages != 2 || len(l.Items) != 1 {
				t.Errorf("last page %d has %d items", pages, len(l.Items))
			}
			break
		}
		cursor = *l.NextCursor
	}
	if strings.Join(seen, ",") != "o-6,o-5,o-4,o-3,o-2,o-1,o-0" {
		t.Errorf("pages hold %v", seen)
	}
	if l := page("customer_id=c-2"); len(l.Items) != 2 || l.Items[0].OrderID != "o-5" || l.Items[1].OrderID != "o-2" {
		t.Errorf("customer c-2: %+v", l.Items)
	}
	if l := page("status=placed&customer_id=c-1"); len(l.Items) != 2 || l.Items[0].Total == nil || l.Items[0].Total.Amount != 10 {
		t.Errorf("placed orders of c-1: %+v", l.Items)
	}
	if l := page("status=draft&limit=200"); len(l.Items) != 5 || l.NextCursor != nil {
		t.Errorf("drafts: %d items", len(l.Items))
	}
	if l := page(""); len(l.Items) != 7 {
		t.Errorf("default page: %d items", len(l.Items))
	}
	for _, bad := range []string{"limit=0", "limit=201", "limit=abc", "limit=-1", "cursor=bogus", "cursor=c1.AAAA", "status=shipped",
		"customer_id=c%201", "sort=created_at", "limit=3&limit=4", "status=%zz"} {
		res := b.do(http.MethodGet, "/v1/orders?"+bad, tok, nil)
		if res.status != http.StatusBadRequest || !strings.Contains(string(res.body), `"code":"invalid_request"`) {
			t.Errorf("?%s: %d %s, want 400 invalid_request", bad, res.status, res.body)
		}
	}
}

func TestQueryValidation(t *testing.T) {
	t.Parallel()
	b := setup(t, bundleOpts{})
	tok := token(t, "t-v", nil, false)
	for _, c := range []struct {
		path   string
		header []string
		status int
		code   string
	}{
		{"/v1/revenue/daily?from=2026-01-01&to=2026-01-31", nil, 200, ""},
		{"/v1/revenue/daily?from=2025-01-01&to=2026-01-01", nil, 200, ""}, // 366 days
		{"/v1/revenue/daily?from=2025-01-01&to=2026-01-02", nil, 400, "invalid_request"},
		{"/v1/revenue/daily?to=2026-01-01", nil, 400, "invalid_request"},
		{"/v1/revenue/daily?from=2026-01-01", nil, 400, "invalid_request"},
		{"/v1/revenue/daily?from=2026-1-01&to=2026-01-02", nil, 400, "invalid_request"},
		{"/v1/revenue/daily?from=2026-02-30&to=2026-03-02", nil, 400, "invalid_request"},
		{"/v1/revenue/daily?from=2026-03-02&to=2026-03-01", nil, 400, "invalid_request"},
		{"/v1/orders/o%20x", nil, 400, "invalid_request"},
		{"/v1/customers/c%201/summary", nil, 400, "invalid_request"},
		{"/v1/orders/o-1?wait=abc", nil, 400, "invalid_request"},
		{"/v1/orders/o-1?wait=11s", nil, 400, "invalid_request"},
		{"/v1/orders/o-1?wait=0s", nil, 400, "invalid_request"},
		{"/v1/orders/o-1?foo=1", nil, 400, "invalid_request"},
		{"/v1/orders/o-1", []string{queryapi.ConsistencyHeader, "not-a-token"}, 400, "invalid_request"},
		{"/v1/orders/o-1", []string{queryapi.ConsistencyHeader, event.Position{Major: 1}.Token(), queryapi.ConsistencyHeader, event.Position{Major: 1}.Token()}, 400, "invalid_request"},
		// Far in the future: no command returned it, it is refused at once
		// (TestGenuineTokenNotYetApplied has the 503 of a genuine one).
		{"/v1/orders/o-1?wait=50ms", []string{queryapi.ConsistencyHeader, event.Position{Major: 1 << 40}.Token()}, 400, "invalid_request"},
		{"/v1/revenue/daily?from=2026-01-01&to=2026-01-01&wait=30ms", []string{queryapi.ConsistencyHeader, event.Position{Major: 1 << 40}.Token()}, 400, "invalid_request"},
		{"/v1/admin/projections", nil, 403, "forbidden"},
	} {
		res := b.do(http.MethodGet, c.path, tok, nil, c.header...)
		if res.status != c.status || (c.code != "" && !strings.Contains(string(res.body), `"code":"`+c.code+`"`)) {
			t.Errorf("GET %s %v: %d %s, want %d %s", c.path, c.header, res.status, res.body, c.status, c.code)
		}
		if c.status == 503 && res.header.Get("Retry-After") != "1" {
			t.Errorf("GET %s: Retry-After %q, want 1", c.path, res.header.Get("Retry-After"))
		}
	}
	res := b.do(http.MethodGet, "/v1/orders/o-1", "garbage", nil)
	if res.status != http.StatusUnauthorized {
		t.Errorf("bad bearer token: %d", res.status)
	}
}

func TestRouteNames(t *testing.T) {
	t.Parallel()
	b := setup(t, bundleOpts{})
	want := map[string]bool{"query.order": false, "query.orders": false, "query.customer_summary": false, "query.revenue_daily": false, "admin.projections": false}
	err := b.router.Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		if _, ok := want[route.GetName()]; ok {
			want[route.GetName()] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, found := range want {
		if !found {
			t.Errorf("no route named %s", name)
		}
	}
}

type adminView struct {
	Scope       string `json:"scope"`
	Projections []struct {
		Name       string `json:"name"`
		Checkpoint struct {
			Token string `json:"token"`
			Major uint64 `json:"major"`
		} `json:"checkpoint"`
		Head struct {
			Token string `json:"token"`
		} `json:"head"`
		Lag struct {
			Events  int64   `json:"events"`
			Seconds float64 `json:"seconds"`
		} `json:"lag"`
		Status    string  `json:"status"`
		LastError *string `json:"last_error"`
	} `json:"projections"`
}

// TestAdminProjections: per tenant by default (lag over the caller's own
// events), everything with a cross_tenant token (audited), 403 otherwise;
// statuses stopped, running and standby.
func TestAdminProjections(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Another "process" will run order_list; this one has a standby runner.
	var standby *projections.Runner
	b := setup(t, bundleOpts{local: func(name string) (projections.RunnerStatus, bool) {
		if name == orderview.OrderListName && standby != nil {
			return standby.Status(), true
		}
		return projections.RunnerStatus{}, false
	}})
	a, other := token(t, "t-a", []string{auth.ScopeAdmin}, false), token(t, "t-b", nil, false)
	for i := range 3 {
		b.command(a, "/v1/orders", map[string]string{"order_id": fmt.Sprintf("o-%d", i), "customer_id": "c", "currency": "EUR"})
	}
	for i := range 5 {
		b.command(other, "/v1/orders", map[string]string{"order_id": fmt.Sprintf("o-%d", i), "customer_id": "c", "currency": "EUR"})
	}
	admin := func(tok, query string) (adminView, response) {
		t.Helper()
		res := b.do(http.MethodGet, "/v1/admin/projections"+query, tok, nil)
		var v adminView
		if res.status == http.StatusOK {
			res.json(t, &v)
		}
		return v, res
	}
	v, res := admin(a, "")
	if res.status != http.StatusOK || v.Scope != "tenant" || len(v.Projections) != 4 {
		t.Fatalf("tenant view: %d %s", res.status, res.body)
	}
	for _, p := range v.Projections {
		if p.Status != "stopped" || p.Lag.Events != 3 || p.Lag.Seconds <= 0 || p.Checkpoint.Major != 0 || p.Head.Token == "" {
			t.Errorf("tenant view of %s: %+v, want stopped with tenant A's 3 events of lag", p.Name, p)
		}
	}
	if _, res := admin(token(t, "t-a", []string{auth.ScopeAdmin}, false), "?scope=all"); res.status != http.StatusForbidden {
		t.Errorf("scope=all without cross_tenant: %d %s", res.status, res.body)
	}
	if _, res := admin(a, "?scope=everything"); res.status != http.StatusBadRequest {
		t.Errorf("bad scope: %d", res.status)
	}
	if _, res := admin(token(t, "t-a", nil, true), "?scope=all"); res.status != http.StatusForbidden {
		t.Errorf("cross_tenant without admin scope: %d", res.status)
	}

	// Run order_list elsewhere, with a standby here.
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	var runs []chan struct{}
	for i := range 2 {
		r, err := projections.NewRunner(orderview.NewOrderList(orderview.OrderListTables{}), b.store, b.d.Projector,
			projections.RunnerConfig{Registry: order.Registry, PollInterval: 20 * time.Millisecond, LeaseRetry: 20 * time.Millisecond, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		runs = append(runs, done)
		go func() { defer close(done); r.Run(rctx) }()
		if i == 0 {
			for r.Status().State != projections.StateRunning {
				time.Sleep(5 * time.Millisecond)
			}
		} else {
			for r.Status().State != projections.StateStandby {
				time.Sleep(5 * time.Millisecond)
			}
			standby = r
		}
	}
	defer func() {
		stop()
		for _, d := range runs {
			<-d
		}
	}()
	// The last committed event, not Head: Head stops below any transaction
	// open in the cluster, such as another test's DROP DATABASE, and was
	// then zero, which ended the wait below at once.
	head, err := b.store.LastCommitted(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cross := token(t, "t-a", []string{auth.ScopeAdmin}, true)
	deadline := time.Now().Add(20 * time.Second)
	for {
		v, res = admin(cross, "?scope=all")
		if res.status != http.StatusOK || v.Scope != "all" {
			t.Fatalf("cross-tenant view: %d %s", res.status, res.body)
		}
		if v.Projections[1].Checkpoint.Token == head.Token() || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, p := range v.Projections {
		switch p.Name {
		case orderview.OrderListName:
			if p.Status != "standby" || p.Lag.Events != 0 || p.Checkpoint.Token != head.Token() {
				t.Errorf("order_list: %+v, want standby (run elsewhere) and caught up", p)
			}
		default:
			if p.Status != "stopped" || p.Lag.Events != 8 {
				t.Errorf("%s: %+v, want stopped with all 8 events of lag", p.Name, p)
			}
		}
	}
	// Every cross-tenant read left its record; tenant views did not.
	conn, err := pgx.Connect(ctx, b.d.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	var who, what, tenant string
	err = conn.QueryRow(ctx, `SELECT count(*) OVER (), subject, target, tenant_id FROM strata.admin_audit ORDER BY at LIMIT 1`).Scan(&n, &who, &what, &tenant)
	if err != nil || n < 1 || who != "tester-t-a" || tenant != "t-a" || !strings.Contains(what, "scope=all") {
		t.Errorf("audit: %d rows, first %q %q %q, %v", n, who, what, tenant, err)
	}
}
