package adminapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/mux"
	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/cli/openapi/openapitest"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/orderview"
	"github.com/strata-es/strata/httpapi"
	"github.com/strata-es/strata/internal/pgtest"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/readmodels"
	"github.com/strata-es/strata/replay"
	"github.com/strata-es/strata/replay/adminapi"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var secret = []byte("adminapi-test-secret-0123456789abcdef01")

type env struct {
	t   *testing.T
	url string
	d   *testdb.DB
}

func (e env) call(tok, method, path string, body any) (int, map[string]any) {
	e.t.Helper()
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, e.url+path, rd)
	req.Header.Set("Authorization", "Bearer "+tok)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := openapitest.ClientFor(e.t).Do(req) // every request and response checked against the engine's document
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	out := map[string]any{}
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			e.t.Fatalf("%s %s: %d %s", method, path, res.StatusCode, raw)
		}
	}
	return res.StatusCode, out
}

func token(t *testing.T, tenant string, scopes []string, cross bool) string {
	t.Helper()
	tok, err := auth.Sign(secret, auth.Claims{Subject: "tester-" + tenant, Tenant: domain.TenantID(tenant), Scopes: scopes, CrossTenant: cross}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestAdminRoutes checks the admin routes' scopes, their tenant isolation
// (another tenant's dead letter answers like a missing one), the audit
// trail, and retry, discard and a rebuild over HTTP.
func TestAdminRoutes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := testdb.New(t, orderview.Migrations)
	conn, err := pgx.Connect(ctx, d.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	// In each tenant: an order, and a line added to an order that does not
	// exist (order_details parks it).
	for _, tenant := range []string{"acme", "beta"} {
		if _, err := conn.Exec(ctx, `INSERT INTO strata.events (tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata)
VALUES ($1, 'order-ok', 1, gen_random_uuid(), 'order.created', 1, '{"order_id":"ok","customer_id":"c-1","currency":"EUR","at":"2026-01-01T00:00:00Z"}', '{}'),
       ($1, 'order-ghost', 1, gen_random_uuid(), 'order.line_added', 2,
        '{"order_id":"ghost","product_id":"p-1","quantity":1,"unit_price":{"amount":100,"currency":"EUR"},"at":"2026-01-01T00:00:00Z"}', '{}')`, tenant); err != nil {
			t.Fatal(err)
		}
	}
	store := postgres.New(d.App, d.Projector)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, p := range orderview.All() {
		r, err := projections.NewRunner(p, store, d.Projector, projections.RunnerConfig{Registry: order.Registry, DeadLetters: true, Failures: projections.FailurePolicy{Attempts: 1}, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.CatchUp(ctx, lastPos(ctx, t, conn)); err != nil {
			t.Fatal(err)
		}
	}
	svc, err := replay.New(replay.Config{Registry: order.Registry, Projections: orderview.All(), Pool: d.Projector, App: d.App, Log: store, Logger: quiet, YieldTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := auth.NewVerifier(secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	router := mux.NewRouter().UseEncodedPath() // as httpapi.NewRouter: routes match the escaped path
	api := router.NewRoute().Subrouter()
	api.Use(httpapi.Authenticate(verifier))
	reader := readmodels.NewDB(d.App)
	audit := func(ctx context.Context, a adminapi.Audit) error {
		return reader.RecordAudit(ctx, readmodels.AuditEntry{Subject: a.Subject, Action: a.Action, Target: a.Target, RequestID: a.RequestID})
	}
	adminapi.New(svc, audit, ctx).Register(api)
	srv := httptest.NewServer(httpapi.WithRequestID(httpapi.Recover(router)))
	defer srv.Close()
	e := env{t: t, url: srv.URL, d: d}

	acme := token(t, "acme", []string{auth.ScopeAdmin}, false)
	beta := token(t, "beta", []string{auth.ScopeAdmin}, false)
	ops := token(t, "acme", []string{auth.ScopeAdmin}, true)
	plain := token(t, "acme", nil, true)

	letters := func(tok, query string) []map[string]any {
		t.Helper()
		status, body := e.call(tok, http.MethodGet, "/v1/admin/dead-letters"+query, nil)
		if status != http.StatusOK {
			t.Fatalf("list %s: %d %v", query, status, body)
		}
		var out []map[string]any
		for _, l := range body["dead_letters"].([]any) {
			out = append(out, l.(map[string]any))
		}
		return out
	}
	if status, _ := e.call(plain, http.MethodGet, "/v1/admin/dead-letters", nil); status != http.StatusForbidden {
		t.Errorf("without the admin scope: %d, want 403", status)
	}
	if status, _ := e.call(acme, http.MethodGet, "/v1/admin/dead-letters?scope=all", nil); status != http.StatusForbidden {
		t.Errorf("scope=all without cross_tenant: %d, want 403", status)
	}
	mine := letters(acme, "")
	theirs := letters(beta, "")
	if len(mine) != 1 || mine[0]["tenant"] != "acme" || len(theirs) != 1 || theirs[0]["tenant"] != "beta" {
		t.Fatalf("tenant lists: acme %v, beta %v", mine, theirs)
	}
	acmeID := strconv.Itoa(int(mine[0]["id"].(float64)))
	betaID := strconv.Itoa(int(theirs[0]["id"].(float64)))

	// Another tenant's letter answers exactly like a missing one.
	s1, b1 := e.call(acme, http.MethodGet, "/v1/admin/dead-letters/"+betaID, nil)
	s2, b2 := e.call(acme, http.MethodGet, "/v1/admin/dead-letters/987654", nil)
	if s1 != http.StatusNotFound || s2 != http.StatusNotFound || jsonOf(b1) != jsonOf(b2) {
		t.Errorf("foreign letter %d %v, missing letter %d %v: want the same 404", s1, b1, s2, b2)
	}
	for _, path := range []string{"/v1/admin/dead-letters/" + betaID + "/retry", "/v1/admin/dead-letters/" + betaID + "/discard"} {
		if status, body := e.call(acme, http.MethodPost, path, map[string]any{"reason": "x"}); status != http.StatusNotFound {
			t.Errorf("POST %s of another tenant: %d %v, want 404", path, status, body)
		}
	}
	if status, body := e.call(acme, http.MethodGet, "/v1/admin/dead-letters/"+acmeID, nil); status != http.StatusOK || body["stream"] != "order-ghost" || body["head"] != true {
		t.Errorf("show: %d %v", status, body)
	}
	auditRows := func() int {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM strata.admin_audit`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := auditRows()
	if all := letters(ops, "?scope=all"); len(all) != 2 {
		t.Errorf("scope=all lists %d letters, want 2", len(all))
	}
	if after := auditRows(); after != before+1 {
		t.Errorf("a cross-tenant list wrote %d audit rows, want 1", after-before)
	}

	// Retry: the handler still fails, the answer says so.
	status, body := e.call(acme, http.MethodPost, "/v1/admin/dead-letters/"+acmeID+"/retry", nil)
	if status != http.StatusOK || body["still_parked"] != float64(1) {
		t.Errorf("retry of a letter that fails again: %d %v", status, body)
	}
	// Discard needs a reason; then it records who and why.
	if status, _ := e.call(acme, http.MethodPost, "/v1/admin/dead-letters/"+acmeID+"/discard", map[string]any{}); status != http.StatusBadRequest {
		t.Errorf("discard without a reason: %d, want 400", status)
	}
	status, body = e.call(acme, http.MethodPost, "/v1/admin/dead-letters/"+acmeID+"/discard", map[string]any{"reason": "ghost order"})
	if status != http.StatusOK || body["status"] != "discarded" || body["reason"] != "ghost order" || body["resolved_by"] != "api:tester-acme@acme" {
		t.Errorf("discard: %d %v", status, body)
	}
	if status, body := e.call(acme, http.MethodPost, "/v1/admin/dead-letters/"+acmeID+"/discard", map[string]any{"reason": "again"}); status != http.StatusConflict || errorCode(body) != adminapi.CodeNothingToDo {
		t.Errorf("second discard: %d %v, want 409 nothing_to_do", status, body)
	}
	if status, body := e.call(acme, http.MethodPost, "/v1/admin/dead-letters/retry", map[string]any{"all": true}); status != http.StatusConflict {
		t.Errorf("retry all with nothing parked in acme: %d %v, want 409", status, body)
	}
	// beta's letter is still there, for beta and for the cross-tenant view.
	if len(letters(beta, "")) != 1 || len(letters(ops, "?scope=all")) != 1 {
		t.Error("acme's actions touched beta's letter")
	}
	status, body = e.call(ops, http.MethodPost, "/v1/admin/dead-letters/retry?scope=all", map[string]any{"projection": "order_details", "stream": "order-ghost"})
	if status != http.StatusOK || body["still_parked"] != float64(1) {
		t.Errorf("cross-tenant retry by stream: %d %v", status, body)
	}

	// Projection status: the tenant's own counts.
	status, body = e.call(acme, http.MethodGet, "/v1/admin/projections/order_details", nil)
	if status != http.StatusOK || body["dead_letters"] != float64(0) || body["scope"] != "tenant" {
		t.Errorf("acme's status: %d %v", status, body)
	}
	status, body = e.call(ops, http.MethodGet, "/v1/admin/projections/order_details?scope=all", nil)
	if status != http.StatusOK || body["dead_letters"] != float64(1) {
		t.Errorf("cross-tenant status: %d %v", status, body)
	}
	if status, _ := e.call(acme, http.MethodGet, "/v1/admin/projections/nope", nil); status != http.StatusNotFound {
		t.Errorf("unknown projection: %d, want 404", status)
	}

	// Rebuild of acme's rows over HTTP: a dry run, then the real thing.
	status, body = e.call(acme, http.MethodPost, "/v1/admin/projections/order_list/rebuild", map[string]any{"dry_run": true})
	if status != http.StatusOK || body["dry_run"] != true {
		t.Errorf("dry run: %d %v", status, body)
	}
	// The same mistake, the same answer: 404 as GET of the projection.
	if status, body := e.call(acme, http.MethodPost, "/v1/admin/projections/nope/rebuild", nil); status != http.StatusNotFound {
		t.Errorf("rebuild of an unknown projection: %d %v, want 404", status, body)
	}
	status, body = e.call(ops, http.MethodPost, "/v1/admin/projections/order_list/rebuild?scope=all", map[string]any{"dry_run": true})
	if projs, _ := body["projections"].([]any); status != http.StatusOK || len(projs) != 1 || projs[0].(map[string]any)["live_checkpoint"] == nil || projs[0].(map[string]any)["Name"] != nil {
		t.Errorf("dry run of every tenant: %d %v, want the plan in snake_case", status, body)
	}
	status, body = e.call(acme, http.MethodPost, "/v1/admin/projections/order_list/rebuild", nil)
	if status != http.StatusAccepted || body["scope"] != "tenant" {
		t.Fatalf("start rebuild: %d %v", status, body)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, body = e.call(acme, http.MethodGet, "/v1/admin/projections/order_list/rebuild", nil)
		if status != http.StatusOK {
			t.Fatalf("rebuild status: %d %v", status, body)
		}
		if body["state"] != "running" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rebuild still running: %v", body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if body["state"] != "done" || body["checkpoint"] == nil {
		t.Fatalf("rebuild ended %v", body)
	}
	if status, _ := e.call(beta, http.MethodGet, "/v1/admin/projections/order_list/rebuild", nil); status != http.StatusNotFound {
		t.Errorf("beta sees acme's rebuild job: %d", status)
	}
}

func jsonOf(v any) string {
	raw, _ := json.Marshal(v)
	return string(raw)
}

func errorCode(body map[string]any) string {
	e, _ := body["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

// lastPos is the newest event's position, read as the superuser (not
// limited by the shared cluster's horizon).
func lastPos(ctx context.Context, t *testing.T, conn *pgx.Conn) event.Position {
	t.Helper()
	var p event.Position
	var tx string
	var pos int64
	if err := conn.QueryRow(ctx, `SELECT tx_id::text AS tx_text, position FROM strata.events ORDER BY events.tx_id DESC, events.position DESC LIMIT 1`).Scan(&tx, &pos); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Sscan(tx, &p.Major); err != nil {
		t.Fatal(err)
	}
	p.Minor = uint64(pos)
	return p
}

// TestTenantViewHidesDatabaseErrors: a dead letter whose error is
// PostgreSQL's text (here a CHECK violation naming the table and its
// constraint) is shown to the tenant sanitized, in the list, the letter,
// a retry's answer and a discard's, keeping only the SQLSTATE; the
// cross-tenant view and the CLI's rendering keep the full text.
func TestTenantViewHidesDatabaseErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := testdb.New(t, orderview.Migrations)
	conn, err := pgx.Connect(ctx, d.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	// A line of quantity 0 (no command makes one): order_details' insert
	// breaks the CHECK (quantity > 0) of order_detail_lines.
	if _, err := conn.Exec(ctx, `INSERT INTO strata.events (tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata)
VALUES ('acme', 'order-o-1', 1, gen_random_uuid(), 'order.created', 1, '{"order_id":"o-1","customer_id":"c-1","currency":"EUR","at":"2026-01-01T00:00:00Z"}', '{}'),
       ('acme', 'order-o-1', 2, gen_random_uuid(), 'order.line_added', 2,
        '{"order_id":"o-1","product_id":"p-1","quantity":0,"unit_price":{"amount":100,"currency":"EUR"},"at":"2026-01-01T00:00:00Z"}', '{}')`); err != nil {
		t.Fatal(err)
	}
	store := postgres.New(d.App, d.Projector)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	r, err := projections.NewRunner(orderview.NewOrderDetails(orderview.OrderDetailsTables{}), store, d.Projector,
		projections.RunnerConfig{Registry: order.Registry, DeadLetters: true, PerEvent: true, Failures: projections.FailurePolicy{Attempts: 1}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.CatchUp(ctx, lastPos(ctx, t, conn)); err != nil {
		t.Fatal(err)
	}
	svc, err := replay.New(replay.Config{Registry: order.Registry, Projections: orderview.All(), Pool: d.Projector, App: d.App, Log: store, Logger: quiet, YieldTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := auth.NewVerifier(secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	router := mux.NewRouter()
	api := router.NewRoute().Subrouter()
	api.Use(httpapi.Authenticate(verifier))
	adminapi.New(svc, func(context.Context, adminapi.Audit) error { return nil }, ctx).Register(api)
	srv := httptest.NewServer(httpapi.WithRequestID(httpapi.Recover(router)))
	defer srv.Close()
	e := env{t: t, url: srv.URL, d: d}
	acme := token(t, "acme", []string{auth.ScopeAdmin}, false)
	ops := token(t, "acme", []string{auth.ScopeAdmin}, true)

	const want = "the projection's database statement failed on this event (SQLSTATE 23514); the details are in the cross-tenant view and `strata replay dlq show`"
	leaks := func(where string, l map[string]any) {
		t.Helper()
		msg, _ := l["error"].(string)
		if msg != want {
			t.Errorf("%s: error %q, want %q", where, msg, want)
		}
	}
	status, body := e.call(acme, http.MethodGet, "/v1/admin/dead-letters", nil)
	list, _ := body["dead_letters"].([]any)
	if status != http.StatusOK || len(list) != 1 {
		t.Fatalf("acme's letters: %d %v", status, body)
	}
	l := list[0].(map[string]any)
	leaks("list", l)
	id := strconv.Itoa(int(l["id"].(float64)))
	_, body = e.call(acme, http.MethodGet, "/v1/admin/dead-letters/"+id, nil)
	leaks("show", body)
	status, body = e.call(acme, http.MethodPost, "/v1/admin/dead-letters/"+id+"/retry", nil)
	streams, _ := body["streams"].([]any)
	if status != http.StatusOK || len(streams) != 1 {
		t.Fatalf("retry: %d %v", status, body)
	}
	failed, _ := streams[0].(map[string]any)["failed"].(map[string]any)
	leaks("retry", failed)

	// The operator's views keep PostgreSQL's text.
	_, body = e.call(ops, http.MethodGet, "/v1/admin/dead-letters/"+id+"?scope=all", nil)
	if msg, _ := body["error"].(string); !strings.Contains(msg, "order_detail_lines") || !strings.Contains(msg, "SQLSTATE 23514") {
		t.Errorf("cross-tenant show: error %q, want the full text", msg)
	}
	letters, err := svc.DeadLetters(ctx, replay.ListOptions{Tenant: "acme"})
	if err != nil || len(letters) != 1 {
		t.Fatalf("letters: %v %v", letters, err)
	}
	if v := adminapi.LetterView(letters[0]); !strings.Contains(v.Error, "order_detail_lines") {
		t.Errorf("LetterView (the CLI's rendering): error %q, want the full text", v.Error)
	}

	status, body = e.call(acme, http.MethodPost, "/v1/admin/dead-letters/"+id+"/discard", map[string]any{"reason": "a line of nothing"})
	if status != http.StatusOK {
		t.Fatalf("discard: %d %v", status, body)
	}
	leaks("discard", body)
}

// lockedBuffer collects log lines written from background rebuilds.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// TestRebuildConflictsAnsweredAtOnce: a tenant's rebuild that the plan
// already refuses (an operator's rebuild of every tenant is interrupted)
// is answered 409 at once, naming no tenant, instead of 202 and a failed
// job; and a job that fails in the background logs why.
func TestRebuildConflictsAnsweredAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := testdb.New(t, orderview.Migrations)
	conn, err := pgx.Connect(ctx, d.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, tenant := range []string{"acme", "beta"} {
		if _, err := conn.Exec(ctx, `INSERT INTO strata.events (tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata)
VALUES ($1, 'order-o-1', 1, gen_random_uuid(), 'order.created', 1, '{"order_id":"o-1","customer_id":"c-1","currency":"EUR","at":"2026-01-01T00:00:00Z"}', '{}')`, tenant); err != nil {
			t.Fatal(err)
		}
	}
	store := postgres.New(d.App, d.Projector)
	logs := &lockedBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	svc, err := replay.New(replay.Config{Registry: order.Registry, Projections: orderview.All(), Pool: d.Projector, App: d.App, Log: store, Logger: logger, YieldTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// The operator's rebuild of order_details, interrupted as soon as its
	// shadow exists.
	rctx, stop := context.WithCancel(ctx)
	_, err = svc.Rebuild(rctx, replay.RebuildOptions{Projections: []string{orderview.OrderDetailsName}, ProgressEvery: time.Nanosecond,
		Progress: func(replay.Progress) { stop() }})
	stop()
	if err == nil {
		t.Fatal("the operator's rebuild was not interrupted")
	}
	if st, err := svc.Status(ctx); err != nil || st[0].Rebuild == nil || st[0].Rebuild.Scope != "all" {
		t.Fatalf("status after the interruption: %v %v", st, err)
	}

	verifier, err := auth.NewVerifier(secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	router := mux.NewRouter()
	api := router.NewRoute().Subrouter()
	api.Use(httpapi.Authenticate(verifier))
	adminapi.New(svc, func(context.Context, adminapi.Audit) error { return nil }, ctx).Register(api)
	srv := httptest.NewServer(httpapi.WithRequestID(httpapi.Recover(router)))
	defer srv.Close()
	e := env{t: t, url: srv.URL, d: d}
	acme := token(t, "acme", []string{auth.ScopeAdmin}, false)

	status, body := e.call(acme, http.MethodPost, "/v1/admin/projections/order_details/rebuild", nil)
	errBody, _ := body["error"].(map[string]any)
	msg, _ := errBody["message"].(string)
	if status != http.StatusConflict || errorCode(body) != adminapi.CodeBusy || msg == "" {
		t.Fatalf("a tenant's rebuild behind the operator's interrupted one: %d %v, want 409 busy at once", status, body)
	}
	for _, tenant := range []string{"acme", "beta"} {
		if strings.Contains(msg, tenant) {
			t.Errorf("the conflict names tenant %s: %q", tenant, msg)
		}
	}
	if status, _ := e.call(acme, http.MethodGet, "/v1/admin/projections/order_details/rebuild", nil); status != http.StatusNotFound {
		t.Errorf("a refused rebuild left a job: %d", status)
	}

	// A failure the plan cannot see (the live table changed hands) fails
	// the job in the background: the server log says why.
	if _, err := conn.Exec(ctx, `ALTER TABLE strata.order_list OWNER TO CURRENT_USER`); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(context.Background(), `ALTER TABLE strata.order_list OWNER TO strata_owner`) //nolint:errcheck
	if status, body := e.call(acme, http.MethodPost, "/v1/admin/projections/order_list/rebuild", nil); status != http.StatusAccepted {
		t.Fatalf("start rebuild: %d %v", status, body)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, body = e.call(acme, http.MethodGet, "/v1/admin/projections/order_list/rebuild", nil)
		if status != http.StatusOK {
			t.Fatalf("rebuild status: %d %v", status, body)
		}
		if body["state"] != "running" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rebuild still running: %v", body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if body["state"] != "failed" {
		t.Fatalf("rebuild of a table owned by another role: %v, want failed", body)
	}
	if l := logs.String(); !strings.Contains(l, "rebuild started over HTTP failed") || !strings.Contains(l, "projection=order_list") ||
		!strings.Contains(l, "owned by") {
		t.Errorf("the failure is not in the server log:\n%s", l)
	}
}
