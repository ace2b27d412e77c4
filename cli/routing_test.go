package cli

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/internal/pgtest"
)

// TestServeRoutesOnEscapedPath sends paths whose IDs hold escapes through the
// real router and handlers: an escaped "/" stays inside its segment (it
// used to be decoded before routing, so POST /v1/orders/a-1%2Fplace placed
// order a-1), an ID that decodes to something invalid is a 400, an escaped
// ordinary character is decoded once, and the IDs "." and ".." are refused
// at creation, on the command, query and admin routes.
func TestServeRoutesOnEscapedPath(t *testing.T) {
	url := pgtest.NewDatabase(t)
	secret := "routing-test-secret-0123456789abcdefgh"
	base, _, stop := startServe(t, map[string]string{"DATABASE_URL": url, "STRATA_DATA_DIR": t.TempDir(),
		"STRATA_JWT_SECRET": secret, "STRATA_LOG_LEVEL": "warn"})
	defer stop()
	waitReady(t, base)
	tok, err := auth.Sign([]byte(secret), auth.Claims{Subject: "ops", Tenant: "acme", Scopes: []string{auth.ScopeAdmin}}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	type answer struct {
		status int
		code   string // error code, "" on success
		body   string
	}
	call := func(method, path, body string, header ...string) answer {
		t.Helper()
		status, raw, _ := apiCall(t, client, base, tok, method, path, body, header...)
		a := answer{status: status, body: string(raw)}
		if status >= 400 {
			var shape struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			if err := json.Unmarshal(raw, &shape); err != nil || shape.Error.Code == "" {
				t.Fatalf("%s %s: %d without the error shape: %s", method, path, status, raw)
			}
			a.code = shape.Error.Code
		}
		return a
	}
	want := func(a answer, status int, code string, what string) {
		t.Helper()
		if a.status != status || a.code != code {
			t.Errorf("%s: answered %d %s, want %d %s", what, a.status, a.body, status, code)
		}
	}

	want(call("POST", "/v1/orders", `{"order_id":"a-1","customer_id":"c-1","currency":"EUR"}`), 201, "", "create a-1")
	want(call("POST", "/v1/orders/a-1/lines", `{"product_id":"p-1","quantity":1,"unit_price":{"amount":100,"currency":"EUR"}}`), 200, "", "add a line")

	// Command routes.
	want(call("POST", "/v1/orders/a-1%2Fplace", ""), 405, "method_not_allowed", "POST /v1/orders/a-1%2Fplace (one segment, the order route, GET only)")
	want(call("POST", "/v1/orders/a-1%2Fx/place", ""), 400, "invalid_request", "an order ID that decodes to a-1/x")
	want(call("POST", "/v1/orders/%2E%2E/place", ""), 400, "invalid_request", "an order ID that decodes to ..")
	want(call("DELETE", "/v1/orders/a-1/lines/p-1%2Fx", ""), 400, "invalid_request", "a product ID that decodes to p-1/x")
	// Not placed by any of that: placing now is version 3 (created, line,
	// placed), addressed with an escaped "a", which is decoded once.
	placed := call("POST", "/v1/orders/%61-1/place", "")
	want(placed, 200, "", "place via %61-1")
	if !strings.Contains(placed.body, `"order_id":"a-1","version":3`) {
		t.Errorf("place answered %s, want a-1 at version 3", placed.body)
	}
	var pos struct{ Position string }
	_ = json.Unmarshal([]byte(placed.body), &pos)

	// "." and "..": refused wherever an ID comes in.
	want(call("POST", "/v1/orders", `{"order_id":"..","customer_id":"c-1","currency":"EUR"}`), 400, "invalid_request", `order_id ".."`)
	want(call("POST", "/v1/orders", `{"order_id":".","customer_id":"c-1","currency":"EUR"}`), 400, "invalid_request", `order_id "."`)
	want(call("POST", "/v1/orders", `{"order_id":"a-2","customer_id":"..","currency":"EUR"}`), 400, "invalid_request", `customer_id ".."`)
	want(call("POST", "/v1/orders", `{"order_id":"a-2","customer_id":"c-1","currency":"EUR"}`), 201, "", "create a-2")
	want(call("POST", "/v1/orders/a-2/lines", `{"product_id":"..","quantity":1,"unit_price":{"amount":1,"currency":"EUR"}}`), 400, "invalid_request", `product_id ".."`)

	// Query routes.
	want(call("GET", "/v1/orders/%61-1?wait=10s", "", "X-Consistency-Token", pos.Position), 200, "", "GET /v1/orders/%61-1")
	want(call("GET", "/v1/orders/a-1%2F", ""), 400, "invalid_request", "GET an order ID that decodes to a-1/")
	want(call("GET", "/v1/orders/%2E%2E", ""), 400, "invalid_request", "GET an order ID that decodes to ..")
	want(call("GET", "/v1/customers/c-1%2Fsummary", ""), 404, "not_found", "GET /v1/customers/c-1%2Fsummary (no such route)")
	want(call("GET", "/v1/customers/c-1%2Fx/summary", ""), 400, "invalid_request", "a customer ID that decodes to c-1/x")
	// With the token: the customer summary is another projection, which
	// may not have applied the placement yet.
	want(call("GET", "/v1/customers/%63-1/summary?wait=10s", "", "X-Consistency-Token", pos.Position), 200, "", "GET /v1/customers/%63-1/summary")

	// Admin routes: an escaped "/" does not reach the rebuild route.
	want(call("POST", "/v1/admin/projections/order_details%2Frebuild", `{"dry_run":true}`), 405, "method_not_allowed", "POST .../order_details%2Frebuild")
	want(call("GET", "/v1/admin/projections/order_details%2Frebuild", ""), 404, "not_found", "GET .../order_details%2Frebuild (no such projection)")
	want(call("GET", "/v1/admin/projections/%6Frder_details", ""), 200, "", "GET .../%6Frder_details")
	want(call("POST", "/v1/admin/dead-letters/1%2Fdiscard", ""), 404, "not_found", "POST .../dead-letters/1%2Fdiscard")
}
