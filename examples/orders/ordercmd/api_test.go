package ordercmd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

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
	"github.com/strata-es/strata/httpapi"
	"github.com/strata-es/strata/internal/pgtest"
	"github.com/strata-es/strata/internal/testdb"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var secret = []byte("test-secret-test-secret-test-secret-0123")

type bundle struct {
	srv   *httptest.Server
	store *postgres.Store
	db    *testdb.DB
}

func setup(t *testing.T) *bundle {
	t.Helper()
	d := testdb.New(t)
	store := postgres.New(d.App, d.Projector)
	v, err := auth.NewVerifier(secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := httpapi.NewRouter()
	api := r.NewRoute().Subrouter()
	api.Use(httpapi.Authenticate(v))
	if err := ordercmd.Commands(api, commandapi.Deps{Store: store, Idempotency: store, Config: commands.Config{Registry: order.Registry}}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.WithRequestID(httpapi.Recover(r)))
	t.Cleanup(srv.Close)
	return &bundle{srv: srv, store: store, db: d}
}

func token(t *testing.T, tenant string) string {
	t.Helper()
	tok, err := auth.Sign(secret, auth.Claims{Subject: "tester", Tenant: domain.TenantID("t-" + tenant)}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

type resp struct {
	status int
	header http.Header
	body   string
}

func (b *bundle) do(t *testing.T, method, path, tok string, body string, headers ...string) resp {
	t.Helper()
	req, err := http.NewRequest(method, b.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := openapitest.ClientFor(t, orders.Module()).Do(req) // every request and response checked against the document
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return resp{status: res.StatusCode, header: res.Header, body: string(raw)}
}

func (b *bundle) events(t *testing.T, tenant, orderID string) []event.Record {
	t.Helper()
	recs, err := b.store.ReadStream(context.Background(), "t-"+tenant, "order-"+orderID, 0)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func wantStatus(t *testing.T, r resp, status int, code string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	if code != "" {
		var e struct {
			Error struct{ Code, Message string }
		}
		if err := json.Unmarshal([]byte(r.body), &e); err != nil || e.Error.Code != code || e.Error.Message == "" {
			t.Fatalf("body %s, want error code %q with a message", r.body, code)
		}
	}
}

func TestOrderLifecycle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tok := token(t, "a")
	r := b.do(t, "POST", "/v1/orders", tok, `{"order_id":"o-1","customer_id":"c-1","currency":"EUR"}`)
	wantStatus(t, r, 201, "")
	var ok struct {
		OrderID  string `json:"order_id"`
		Version  int64  `json:"version"`
		Position string `json:"position"`
	}
	if err := json.Unmarshal([]byte(r.body), &ok); err != nil || ok.OrderID != "o-1" || ok.Version != 1 {
		t.Fatalf("create: %s", r.body)
	}
	if _, err := event.ParseToken(ok.Position); err != nil {
		t.Fatalf("position %q is not a consistency token: %v", ok.Position, err)
	}
	if r.header.Get("Location") != "/v1/orders/o-1" || r.header.Get("ETag") != `"1"` {
		t.Fatalf("headers %v", r.header)
	}
	for i, step := range []struct{ method, path, body string }{
		{"POST", "/v1/orders/o-1/lines", `{"product_id":"p-1","quantity":2,"unit_price":{"amount":1999,"currency":"EUR"}}`},
		{"POST", "/v1/orders/o-1/lines", `{"product_id":"p-2","quantity":1,"unit_price":{"amount":500,"currency":"EUR"}}`},
		{"DELETE", "/v1/orders/o-1/lines/p-2", ``},
		{"POST", "/v1/orders/o-1/place", ``},
		{"POST", "/v1/orders/o-1/pay", `{"payment_reference":"pay-1"}`},
	} {
		r := b.do(t, step.method, step.path, tok, step.body)
		wantStatus(t, r, 200, "")
		if !strings.Contains(r.body, fmt.Sprintf(`"version":%d`, i+2)) {
			t.Fatalf("step %d: %s", i, r.body)
		}
	}
	wantStatus(t, b.do(t, "POST", "/v1/orders/o-1/cancel", tok, `{"reason":"too late"}`), 422, "rule_violation")
	recs := b.events(t, "a", "o-1")
	if len(recs) != 6 || recs[5].Type != "order.paid" || recs[0].Metadata.Actor != "tester" {
		t.Fatalf("stored %d events, last %s, actor %q", len(recs), recs[len(recs)-1].Type, recs[0].Metadata.Actor)
	}
	// Generated order IDs.
	r = b.do(t, "POST", "/v1/orders", tok, `{"customer_id":"c-1","currency":"USD"}`)
	wantStatus(t, r, 201, "")
}

func TestRulesAnswer422WithTheRule(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tok := token(t, "a")
	wantStatus(t, b.do(t, "POST", "/v1/orders", tok, `{"order_id":"o-1","customer_id":"c-1","currency":"EUR"}`), 201, "")
	cases := []struct {
		name, method, path, body, want string
	}{
		{"place empty", "POST", "/v1/orders/o-1/place", ``, "empty order"},
		{"pay draft", "POST", "/v1/orders/o-1/pay", `{"payment_reference":"x"}`, "placed order"},
		{"currency", "POST", "/v1/orders/o-1/lines", `{"product_id":"p","quantity":1,"unit_price":{"amount":1,"currency":"USD"}}`, "currency"},
		{"overflow", "POST", "/v1/orders/o-1/lines", `{"product_id":"p","quantity":2,"unit_price":{"amount":9223372036854775807,"currency":"EUR"}}`, "too large"},
		{"exists", "POST", "/v1/orders", `{"order_id":"o-1","customer_id":"c-1","currency":"EUR"}`, "already exists"},
	}
	for _, c := range cases {
		r := b.do(t, c.method, c.path, tok, c.body)
		wantStatus(t, r, 422, "rule_violation")
		if !strings.Contains(r.body, c.want) {
			t.Errorf("%s: %s does not name the rule (%q)", c.name, r.body, c.want)
		}
	}
	if n := len(b.events(t, "a", "o-1")); n != 1 {
		t.Fatalf("rejected commands stored events: %d", n)
	}
	// A quantity outside 1..10000 in one add is malformed input, a 400
	// as the document's minimum and maximum say (and as inventory's
	// receive answers); a line whose adds sum beyond it breaks the rule.
	for _, q := range []string{"0", "10001", "-1"} {
		r := b.do(t, "POST", "/v1/orders/o-1/lines", tok, `{"product_id":"p","quantity":`+q+`,"unit_price":{"amount":1,"currency":"EUR"}}`)
		wantStatus(t, r, 400, "invalid_request")
		if !strings.Contains(r.body, "quantity") {
			t.Errorf("quantity %s: %s does not name the quantity", q, r.body)
		}
	}
	wantStatus(t, b.do(t, "POST", "/v1/orders/o-1/lines", tok, `{"product_id":"p","quantity":10000,"unit_price":{"amount":1,"currency":"EUR"}}`), 200, "")
	r := b.do(t, "POST", "/v1/orders/o-1/lines", tok, `{"product_id":"p","quantity":1,"unit_price":{"amount":1,"currency":"EUR"}}`)
	wantStatus(t, r, 422, "rule_violation")
	if !strings.Contains(r.body, "quantity") {
		t.Errorf("a line summing beyond 10000: %s does not name the rule", r.body)
	}
}

// TestLinesPerOrderAreBounded: an order holds at most order.MaxLines
// lines (issue 29, finding 9: one order of 600 lines delayed every
// tenant's fulfilment); the line past it is a 422 naming the rule, and
// nothing is stored.
func TestLinesPerOrderAreBounded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tok := token(t, "a")
	wantStatus(t, b.do(t, "POST", "/v1/orders", tok, `{"order_id":"o-1","customer_id":"c-1","currency":"EUR"}`), 201, "")
	line := func(i int) string {
		return fmt.Sprintf(`{"product_id":"p-%d","quantity":1,"unit_price":{"amount":100,"currency":"EUR"}}`, i)
	}
	for i := range order.MaxLines {
		wantStatus(t, b.do(t, "POST", "/v1/orders/o-1/lines", tok, line(i)), 200, "")
	}
	r := b.do(t, "POST", "/v1/orders/o-1/lines", tok, line(order.MaxLines))
	wantStatus(t, r, 422, "rule_violation")
	if want := fmt.Sprintf("at most %d lines", order.MaxLines); !strings.Contains(r.body, want) {
		t.Errorf("%s does not name the rule (%q)", r.body, want)
	}
	if n := len(b.events(t, "a", "o-1")); n != 1+order.MaxLines {
		t.Fatalf("stored %d events, want the creation and %d lines", n, order.MaxLines)
	}
}

// TestEngineIdempotencyKeysAreRefused: the process managers' steps run
// under keys "pm:<process>:<instance>:<step>"; a user who sent such a key
// first (issue 29, finding 11: pm:fulfilment:o-1:cancel) would have made
// the step replay the user's outcome and park. The namespace is the
// engine's: a user key in it is a 400, and nothing is executed.
func TestEngineIdempotencyKeysAreRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tok := token(t, "a")
	create := `{"order_id":"o-1","customer_id":"c-1","currency":"EUR"}`
	r := b.do(t, "POST", "/v1/orders", tok, create, "Idempotency-Key", "pm:fulfilment:o-1:cancel")
	wantStatus(t, r, 400, "invalid_request")
	if !strings.Contains(r.body, "reserved") {
		t.Errorf("%s does not say the key is reserved", r.body)
	}
	if n := len(b.events(t, "a", "o-1")); n != 0 {
		t.Fatalf("a refused key executed the command: %d events", n)
	}
	// Only the engine's exact prefix is reserved.
	wantStatus(t, b.do(t, "POST", "/v1/orders", tok, create, "Idempotency-Key", "x-pm:fulfilment:o-1:cancel"), 201, "")
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tok := token(t, "a")
	wantStatus(t, b.do(t, "POST", "/v1/orders", tok, `{"order_id":"o-1","customer_id":"c-1","currency":"EUR"}`), 201, "")
	big := `{"customer_id":"` + strings.Repeat("x", 1<<20) + `","currency":"EUR"}`
	cases := []struct {
		name, path, body string
		headers          []string
		status           int
		code             string
	}{
		{"unknown field", "/v1/orders", `{"customer_id":"c","currency":"EUR","tenant":"t-b"}`, nil, 400, "invalid_request"},
		{"case variant key", "/v1/orders", `{"Customer_ID":"c","currency":"EUR"}`, nil, 400, "invalid_request"},
		{"duplicate key", "/v1/orders", `{"customer_id":"c","customer_id":"d","currency":"EUR"}`, nil, 400, "invalid_request"},
		{"trailing data", "/v1/orders", `{"customer_id":"c","currency":"EUR"} {}`, nil, 400, "invalid_request"},
		{"wrong type", "/v1/orders/o-1/lines", `{"product_id":"p","quantity":"2","unit_price":{"amount":1,"currency":"EUR"}}`, nil, 400, "invalid_request"},
		{"huge number", "/v1/orders/o-1/lines", `{"product_id":"p","quantity":1e400,"unit_price":{"amount":1,"currency":"EUR"}}`, nil, 400, "invalid_request"},
		{"not json", "/v1/orders", `customer_id=c`, nil, 400, "invalid_request"},
		{"bad id", "/v1/orders", `{"order_id":"a/b","customer_id":"c","currency":"EUR"}`, nil, 400, "invalid_request"},
		{"missing field", "/v1/orders", `{"currency":"EUR"}`, nil, 400, "invalid_request"},
		{"too large", "/v1/orders", big, nil, 413, "payload_too_large"},
		{"media type", "/v1/orders", `{"customer_id":"c","currency":"EUR"}`, []string{"Content-Type", "text/plain"}, 415, "unsupported_media_type"},
		{"bad if-match", "/v1/orders/o-1/place", `{}`, []string{"If-Match", `"x"`}, 400, "invalid_request"},
		{"bad idempotency key", "/v1/orders/o-1/place", `{}`, []string{"Idempotency-Key", "a b"}, 400, "invalid_request"},
		// Refused, where it was silently replaced by the request ID.
		{"bad correlation ID", "/v1/orders/o-1/place", `{}`, []string{"X-Correlation-ID", "a b"}, 400, "invalid_request"},
		{"quantity beyond the document's maximum", "/v1/orders/o-1/lines", `{"product_id":"p","quantity":10001,"unit_price":{"amount":1,"currency":"EUR"}}`, nil, 400, "invalid_request"},
		{"negative price", "/v1/orders/o-1/lines", `{"product_id":"p","quantity":1,"unit_price":{"amount":-1,"currency":"EUR"}}`, nil, 400, "invalid_request"},
		{"currency not three capitals", "/v1/orders", `{"customer_id":"c","currency":"euro"}`, nil, 400, "invalid_request"},
	}
	for _, c := range cases {
		r := b.do(t, "POST", c.path, tok, c.body, c.headers...)
		if r.status != c.status {
			t.Errorf("%s: status %d, want %d (%s)", c.name, r.status, c.status, r.body)
			continue
		}
		wantStatus(t, r, c.status, c.code)
	}
	if n := len(b.events(t, "a", "o-1")); n != 1 {
		t.Fatalf("bad requests stored events: %d", n)
	}
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	b := setup(t)
	expired, _ := auth.Sign(secret, auth.Claims{Subject: "s", Tenant: "t-a"}, -time.Hour)
	other, _ := auth.Sign([]byte("another-secret-another-secret-0123456"), auth.Claims{Subject: "s", Tenant: "t-a"}, time.Hour)
	none := "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0." + "eyJzdWIiOiJzIiwidGVuYW50IjoidC1hIiwiZXhwIjo0MTAyNDQ0ODAwfQ."
	for name, tok := range map[string]string{"missing": "", "expired": expired, "foreign secret": other, "alg none": none, "garbage": "x.y.z"} {
		r := b.do(t, "POST", "/v1/orders", tok, `{"customer_id":"c","currency":"EUR"}`)
		wantStatus(t, r, 401, "unauthenticated")
		if r.header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: no WWW-Authenticate header", name)
		}
	}
	// A tenant header, path or body never changes the tenant.
	tok := token(t, "a")
	wantStatus(t, b.do(t, "POST", "/v1/orders", tok, `{"order_id":"o-1","customer_id":"c","currency":"EUR"}`, "X-Tenant-ID", "t-b"), 201, "")
	if len(b.events(t, "b", "o-1")) != 0 || len(b.events(t, "a", "o-1")) != 1 {
		t.Fatal("X-Tenant-ID changed the tenant")
	}
}

func TestForeignOrderAnswersLikeMissing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wantStatus(t, b.do(t, "POST", "/v1/orders", token(t, "a"), `{"order_id":"o-a","customer_id":"c","currency":"EUR"}`), 201, "")
	tokB := token(t, "b")
	for _, p := range []struct{ method, path, body string }{
		{"POST", "/v1/orders/%s/lines", `{"product_id":"p","quantity":1,"unit_price":{"amount":1,"currency":"EUR"}}`},
		{"DELETE", "/v1/orders/%s/lines/p", ``},
		{"POST", "/v1/orders/%s/place", ``},
		{"POST", "/v1/orders/%s/pay", `{"payment_reference":"r"}`},
		{"POST", "/v1/orders/%s/cancel", `{}`},
	} {
		foreign := b.do(t, p.method, fmt.Sprintf(p.path, "o-a"), tokB, p.body)
		missing := b.do(t, p.method, fmt.Sprintf(p.path, "o-nope"), tokB, p.body)
		wantStatus(t, foreign, 404, "not_found")
		if foreign.body != missing.body || foreign.status != missing.status {
			t.Errorf("%s %s: foreign %d %s vs missing %d %s", p.method, p.path, foreign.status, foreign.body, missing.status, missing.body)
		}
	}
	if len(b.events(t, "a", "o-a")) != 1 {
		t.Fatal("tenant b changed tenant a's order")
	}
}

func TestIfMatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tok := token(t, "a")
	wantStatus(t, b.do(t, "POST", "/v1/orders", tok, `{"order_id":"o-1","customer_id":"c","currency":"EUR"}`), 201, "")
	line := `{"product_id":"p","quantity":1,"unit_price":{"amount":1,"currency":"EUR"}}`
	wantStatus(t, b.do(t, "POST", "/v1/orders/o-1/lines", tok, line, "If-Match", `"1"`), 200, "")
	r := b.do(t, "POST", "/v1/orders/o-1/lines", tok, line, "If-Match", `"1"`)
	wantStatus(t, r, 409, "version_conflict")
	wantStatus(t, b.do(t, "POST", "/v1/orders/o-1/lines", tok, line, "If-Match", `2`), 200, "")
	// A precondition on a missing order: 404, like any missing order.
	wantStatus(t, b.do(t, "POST", "/v1/orders/o-nope/lines", tok, line, "If-Match", `"3"`), 404, "not_found")
	if n := len(b.events(t, "a", "o-1")); n != 3 {
		t.Fatalf("%d events, want 3", n)
	}
}

// Without If-Match, concurrent commands on one order all succeed: version
// conflicts are retried against the new state. Each conflict a command
// meets is another command's success, so 8 commands need at most 8
// attempts each (the handler allows 10): the outcome does not depend on
// timing.
func TestConflictsRetriedWithoutIfMatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tok := token(t, "a")
	wantStatus(t, b.do(t, "POST", "/v1/orders", tok, `{"order_id":"o-1","customer_id":"c","currency":"EUR"}`), 201, "")
	const n = 8
	var wg sync.WaitGroup
	statuses := make(chan int, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := b.do(t, "POST", "/v1/orders/o-1/lines", tok, fmt.Sprintf(`{"product_id":"p-%d","quantity":1,"unit_price":{"amount":1,"currency":"EUR"}}`, i))
			statuses <- r.status
		}()
	}
	wg.Wait()
	close(statuses)
	for s := range statuses {
		if s != 200 {
			t.Errorf("concurrent add line answered %d", s)
		}
	}
	if got := len(b.events(t, "a", "o-1")); got != n+1 {
		t.Fatalf("%d events, want %d", got, n+1)
	}
}

func TestIdempotencyKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tok := token(t, "a")
	create := `{"order_id":"o-1","customer_id":"c","currency":"EUR"}`

	// Same key and body x100: one execution, identical responses.
	var first resp
	for i := 0; i < 100; i++ {
		r := b.do(t, "POST", "/v1/orders", tok, create, "Idempotency-Key", "create-1")
		if i == 0 {
			first = r
			wantStatus(t, r, 201, "")
			continue
		}
		if r.status != first.status || r.body != first.body {
			t.Fatalf("replay %d: %d %s, first %d %s", i, r.status, r.body, first.status, first.body)
		}
		if r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("replay %d not marked as replayed", i)
		}
	}
	if n := len(b.events(t, "a", "o-1")); n != 1 {
		t.Fatalf("100 identical requests stored %d events", n)
	}

	// Same key, other body: 422, no new events.
	r := b.do(t, "POST", "/v1/orders", tok, `{"order_id":"o-2","customer_id":"c","currency":"EUR"}`, "Idempotency-Key", "create-1")
	wantStatus(t, r, 422, "idempotency_key_reused")
	if n := len(b.events(t, "a", "o-2")); n != 0 {
		t.Fatalf("a reused key executed another command: %d events", n)
	}

	// 50 concurrent identical requests: one execution, every answer the same.
	line := `{"product_id":"p","quantity":3,"unit_price":{"amount":100,"currency":"EUR"}}`
	var wg sync.WaitGroup
	results := make(chan resp, 50)
	start := make(chan struct{})
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results <- b.do(t, "POST", "/v1/orders/o-1/lines", tok, line, "Idempotency-Key", "line-1")
		}()
	}
	close(start)
	wg.Wait()
	close(results)
	var bodies []string
	for r := range results {
		wantStatus(t, r, 200, "")
		bodies = append(bodies, r.body)
	}
	for _, body := range bodies {
		if body != bodies[0] {
			t.Fatalf("concurrent duplicates answered differently: %s vs %s", body, bodies[0])
		}
	}
	recs := b.events(t, "a", "o-1")
	if len(recs) != 2 {
		t.Fatalf("50 concurrent duplicates stored %d line events", len(recs)-1)
	}

	// The same key under another tenant is independent.
	tokB := token(t, "b")
	wantStatus(t, b.do(t, "POST", "/v1/orders", tokB, create, "Idempotency-Key", "create-1"), 201, "")
	if n := len(b.events(t, "b", "o-1")); n != 1 {
		t.Fatalf("tenant b's request with a's key stored %d events", n)
	}

	// A rejection is remembered: the retry gets the same 422 even after the
	// state changed so that the command would now succeed.
	wantStatus(t, b.do(t, "POST", "/v1/orders", tok, `{"order_id":"o-3","customer_id":"c","currency":"EUR"}`), 201, "")
	rej := b.do(t, "POST", "/v1/orders/o-3/place", tok, ``, "Idempotency-Key", "place-3")
	wantStatus(t, rej, 422, "rule_violation")
	wantStatus(t, b.do(t, "POST", "/v1/orders/o-3/lines", tok, line), 200, "")
	again := b.do(t, "POST", "/v1/orders/o-3/place", tok, ``, "Idempotency-Key", "place-3")
	if again.status != rej.status || again.body != rej.body {
		t.Fatalf("replayed rejection %d %s, first %d %s", again.status, again.body, rej.status, rej.body)
	}
}

func TestEventIDsStableAcrossIdempotentRetries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tok := token(t, "a")
	wantStatus(t, b.do(t, "POST", "/v1/orders", tok, `{"order_id":"o-1","customer_id":"c","currency":"EUR"}`, "Idempotency-Key", "k"), 201, "")
	recs := b.events(t, "a", "o-1")
	// Re-deriving the command's events for the same tenant and key gives the
	// same IDs: the IDs depend only on them.
	other := setup(t)
	wantStatus(t, other.do(t, "POST", "/v1/orders", tok, `{"order_id":"o-1","customer_id":"c","currency":"EUR"}`, "Idempotency-Key", "k"), 201, "")
	again := other.events(t, "a", "o-1")
	if recs[0].ID != again[0].ID || recs[0].Metadata.CommandID != again[0].Metadata.CommandID {
		t.Fatalf("event id %s vs %s for the same tenant and key", recs[0].ID, again[0].ID)
	}
}
