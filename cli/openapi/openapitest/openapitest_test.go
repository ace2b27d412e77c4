package openapitest_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/strata-es/strata/cli/openapi/openapitest"
	"github.com/strata-es/strata/examples"
)

func strata(t *testing.T) *openapitest.Validator {
	t.Helper()
	v, err := openapitest.For(examples.All()...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func jsonHeader(kv ...string) http.Header {
	h := http.Header{"Content-Type": {"application/json"}, "X-Request-Id": {"a1b2c3"}}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

// TestCheckCatchesDrift feeds the validator responses as handlers write
// them, and the same with one thing changed the way a handler's drift
// would change it: each changed one must fail.
func TestCheckCatchesDrift(t *testing.T) {
	v := strata(t)
	const created = `{"order_id":"o-1","version":1,"position":"p1.a2cuNA"}`
	const notFound = `{"error":{"code":"not_found","message":"order not found"}}`
	const order = `{"order_id":"o-1","customer_id":"c-1","status":"draft","currency":"EUR","lines":[],` +
		`"total":{"amount":0,"currency":"EUR"},"version":1,"created_at":"2026-01-02T03:04:05.123456Z","placed_at":null,"paid_at":null,"cancelled_at":null}`
	for _, c := range []struct {
		name, method, path string
		status             int
		header             http.Header
		body               string
		ok                 bool
	}{
		{"created", "POST", "/v1/orders", 201, jsonHeader("ETag", `"1"`, "Location", "/v1/orders/o-1"), created, true},
		{"renamed field", "POST", "/v1/orders", 201, jsonHeader(), `{"orderId":"o-1","version":1,"position":"p1.a2cuNA"}`, false},
		{"extra field", "POST", "/v1/orders", 201, jsonHeader(), `{"order_id":"o-1","version":1,"position":"p1.a2cuNA","tenant":"t"}`, false},
		{"wrong type", "POST", "/v1/orders", 201, jsonHeader(), `{"order_id":"o-1","version":"1","position":"p1.a2cuNA"}`, false},
		{"undocumented status", "POST", "/v1/orders", 200, jsonHeader(), created, false},
		{"not JSON", "POST", "/v1/orders", 201, http.Header{"Content-Type": {"text/plain"}, "X-Request-Id": {"a1"}}, created, false},
		{"bad ETag", "POST", "/v1/orders/o-1/place", 200, jsonHeader("ETag", "1"), created, false},
		{"order", "GET", "/v1/orders/o-1", 200, jsonHeader(), order, true},
		{"order, status out of the enum", "GET", "/v1/orders/o-1", 200, jsonHeader(), strings.Replace(order, `"draft"`, `"drafted"`, 1), false},
		{"order, a field dropped", "GET", "/v1/orders/o-1", 200, jsonHeader(), strings.Replace(order, `"paid_at":null,`, ``, 1), false},
		{"error", "GET", "/v1/orders/o-1", 404, jsonHeader(), notFound, true},
		{"error, another shape", "GET", "/v1/orders/o-1", 404, jsonHeader(), `{"code":"not_found","message":"order not found"}`, false},
		{"error, the code of another status", "GET", "/v1/orders/o-1", 404, jsonHeader(), `{"error":{"code":"internal","message":"x"}}`, false},
		{"error, a code not in the table", "GET", "/v1/orders/o-1", 404, jsonHeader(), `{"error":{"code":"missing","message":"x"}}`, false},
		{"429 with Retry-After", "GET", "/v1/orders", 429, jsonHeader("Retry-After", "1"), `{"error":{"code":"rate_limited","message":"x"}}`, true},
		{"429 without Retry-After", "GET", "/v1/orders", 429, jsonHeader(), `{"error":{"code":"rate_limited","message":"x"}}`, false},
		{"401 without WWW-Authenticate", "GET", "/v1/orders", 401, jsonHeader(), `{"error":{"code":"unauthenticated","message":"x"}}`, false},
		{"unknown path, the router's 404", "GET", "/v1/nope", 404, jsonHeader(), `{"error":{"code":"not_found","message":"no such route"}}`, true},
		{"unknown path answered", "GET", "/v1/nope", 200, jsonHeader(), `{}`, false},
		{"unknown method, the router's 405", "PUT", "/v1/orders/o-1", 405, jsonHeader("Allow", "GET"), `{"error":{"code":"method_not_allowed","message":"x"}}`, true},
		{"unknown method, plain text", "PUT", "/v1/orders/o-1", 405, http.Header{"Content-Type": {"text/plain"}, "Allow": {"GET"}, "X-Request-Id": {"a1"}}, `405 method not allowed`, false},
		{"unknown method, no Allow", "PUT", "/v1/orders/o-1", 405, jsonHeader(), `{"error":{"code":"method_not_allowed","message":"x"}}`, false},
		{"a role this process does not run: 405, Allow empty", "POST", "/v1/orders/o-1/place", 405, jsonHeader("Allow", ""), `{"error":{"code":"method_not_allowed","message":"x"}}`, true},
		{"no request ID", "GET", "/livez", 200, http.Header{"Content-Type": {"application/json"}}, `{"status":"ok"}`, false},
		{"431 in the error shape", "GET", "/v1/orders", 431, jsonHeader(), `{"error":{"code":"headers_too_large","message":"x"}}`, true},
		{"501 in the error shape", "POST", "/v1/nope", 501, jsonHeader(), `{"error":{"code":"not_implemented","message":"x"}}`, true},
		{"livez", "GET", "/livez", 200, jsonHeader(), `{"status":"ok"}`, true},
		{"sum beyond int64", "GET", "/v1/customers/c-1/summary", 200, jsonHeader(),
			`{"customer_id":"c-1","orders":3,"open_orders":0,"paid_total":[{"amount":27670116110564327421,"currency":"EUR"}]}`, true},
	} {
		req := httptest.NewRequest(c.method, "http://strata.test"+c.path, nil)
		err := v.Check(openapitest.Exchange{Request: req, Status: c.status, Header: c.header, Body: []byte(c.body)})
		if c.ok && err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if !c.ok && err != nil {
			t.Logf("%s: rejected: %v", c.name, err)
		}
		if !c.ok && err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
}

// TestTransportReports: a server whose handler renamed a field fails
// through the Transport the HTTP tests use, and its caller still gets the
// whole response.
func TestTransportReports(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Request-Id", "r-1")
		if r.URL.Path == "/livez" {
			io.WriteString(w, `{"status":"ok"}`)
			return
		}
		io.WriteString(w, `{"sku":"s-1","on_hand":3,"reserved":0,"available":3,"revision":1}`)
	}))
	defer srv.Close()
	var reported []error
	client := &http.Client{Transport: &openapitest.Transport{Validator: strata(t), Report: func(_ *http.Request, err error) { reported = append(reported, err) }}}
	for _, path := range []string{"/livez", "/v1/inventory/s-1"} {
		res, err := client.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if len(body) == 0 {
			t.Fatalf("%s: the caller got no body", path)
		}
	}
	if len(reported) != 1 || !strings.Contains(reported[0].Error(), "query.inventory_item") {
		t.Fatalf("reported %v, want one mismatch of query.inventory_item", reported)
	}
}
