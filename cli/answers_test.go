package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/cli/openapi"
	"github.com/strata-es/strata/cli/openapi/openapitest"
	"github.com/strata-es/strata/examples"
	"github.com/strata-es/strata/internal/pgtest"
)

// TestAnswersOutsideHandlers: on a process that runs the query role only,
// every command route of the document answers alike — 405, in the error
// shape, with an Allow of what the process does serve on the path (it
// answered 405 where a query route shares the path and 404 elsewhere) — and the answers no handler writes are in the
// error shape with an X-Request-Id and match the document: a path not in
// canonical form (a 400, where the router redirected with an empty 301), and
// net/http's own 400, 431 and 501, sent on a raw connection.
func TestAnswersOutsideHandlers(t *testing.T) {
	secret := "answers-test-secret-0123456789abcdefghij"
	base, _, stop := startServe(t, map[string]string{"DATABASE_URL": pgtest.NewDatabase(t), "STRATA_DATA_DIR": t.TempDir(),
		"STRATA_JWT_SECRET": secret, "STRATA_LOG_LEVEL": "warn"}, "--roles", "query")
	defer stop()
	waitReady(t, base)
	tok, err := auth.Sign([]byte(secret), auth.Claims{Subject: "ops", Tenant: "acme"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := openapi.Document(examples.All())
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Paths map[string]map[string]struct {
			ID    string `json:"operationId"`
			Route string `json:"x-strata-route"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	commands := 0
	for path, item := range d.Paths {
		for method, op := range item {
			if op.Route != "command" {
				continue
			}
			commands++
			concrete := strings.NewReplacer("{id}", "o-1", "{sku}", "s-1", "{product_id}", "p-1").Replace(path)
			status, raw, h := apiCall(t, nil, base, tok, strings.ToUpper(method), concrete, `{}`)
			// Allow lists the query route sharing the path, if any.
			allow, has := h["Allow"]
			if status != http.StatusMethodNotAllowed || !has || strings.Contains(strings.Join(allow, ""), strings.ToUpper(method)) || !strings.Contains(string(raw), `"method_not_allowed"`) {
				t.Errorf("%s %s (%s) on a query process: %d %s, Allow %q (present: %v); want 405 with an Allow without %s", method, concrete, op.ID, status, raw, allow, has, method)
			}
		}
	}
	if commands < 10 {
		t.Fatalf("found %d command routes in the document", commands)
	}

	// Not in canonical form: refused, not redirected (the client would
	// follow a 301 with a GET of another route).
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, p := range []string{"/v1//orders", "/v1/inventory/../receive", "/v1/orders/./o-1"} {
		req, _ := http.NewRequest(http.MethodPost, base+p, strings.NewReader(`{"quantity":1}`))
		req.URL.Opaque = p
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		res, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(raw), `"invalid_request"`) {
			t.Errorf("POST %s: %d %s, want 400 invalid_request", p, res.StatusCode, raw)
		}
	}

	// net/http's own answers, validated against the document as the
	// requests' answers (their operation's, or a miss's).
	v, err := openapitest.For(examples.All()...)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(base)
	for _, c := range []struct {
		name, method, path, raw string
		status                  int
	}{
		{"bad request line", "GET", "/", "GARBAGE\r\n\r\n", 400},
		{"header over 64 KiB", "GET", "/v1/orders",
			"GET /v1/orders HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 80<<10) + "\r\n\r\n", 431},
		{"gzip transfer encoding", "POST", "/v1/orders",
			"POST /v1/orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
	} {
		conn, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck
		go io.WriteString(conn, c.raw)                     //nolint:errcheck // a 431 may come before the header is all sent
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		body, _ := io.ReadAll(res.Body)
		conn.Close()
		req, _ := http.NewRequest(c.method, base+c.path, nil)
		if res.StatusCode != c.status || res.Header.Get("X-Request-Id") == "" || !json.Valid(body) {
			t.Errorf("%s: %d %v %s, want %d in the error shape with X-Request-Id", c.name, res.StatusCode, res.Header, body, c.status)
		}
		if err := v.Check(openapitest.Exchange{Request: req, Status: res.StatusCode, Header: res.Header, Body: body}); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

// TestBadFragmentStopsServe: a module whose OpenAPI fragment redefines an
// engine path stops serve at start, before any database is opened, with
// an error naming the module and the clash.
func TestBadFragmentStopsServe(t *testing.T) {
	t.Parallel()
	bad := examples.All()[0]
	bad.OpenAPI = []byte("paths: {/livez: {get: {operationId: mine, responses: {'200': {description: ok}}}}}")
	var stderr strings.Builder
	code := Run(context.Background(), []string{"serve", "--addr", "127.0.0.1:0"}, testEnv(map[string]string{"STRATA_DATA_DIR": t.TempDir()}), io.Discard, &stderr, bad)
	if code == exitOK || !strings.Contains(stderr.String(), "module orders: the OpenAPI fragment: path /livez is already defined by the engine") {
		t.Fatalf("serve exited %d: %s", code, stderr.String())
	}
}
