//go:build prism

package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/cli/openapi"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/examples"
	"github.com/strata-es/strata/internal/pgtest"
)

// TestIndependentValidator puts Stoplight Prism (an OpenAPI validator
// written apart from kin-openapi, with its own JSON Schema checker) in
// proxy mode in front of a real serve and sends traffic over every
// operation through it: valid requests, and requests the document refuses.
// Prism reports each disagreement between the document and a request or an
// answer in the sl-violations header; the test fails on any.
//
// Run by `make openapi/prism`, which installs Prism from npm (this test
// installs it itself into STRATA_PRISM_DIR when it is missing, and fails
// if it cannot): too heavy for make test, so behind the prism build tag.
func TestIndependentValidator(t *testing.T) {
	prism := installPrism(t)
	secret := "prism-test-secret-0123456789abcdefghijkl"
	base, _, stop := startServe(t, map[string]string{"DATABASE_URL": pgtest.NewDatabase(t), "STRATA_DATA_DIR": t.TempDir(),
		"STRATA_JWT_SECRET": secret, "STRATA_LOG_LEVEL": "warn"})
	defer stop()
	waitReady(t, base)
	doc, err := openapi.Document(examples.All())
	if err != nil {
		t.Fatal(err)
	}
	spec := filepath.Join(t.TempDir(), "openapi.json")
	if err := os.WriteFile(spec, doc, 0o644); err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, prism, "proxy", spec, base, "--host", "127.0.0.1", "--port", fmt.Sprint(port), "--errors=false")
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("start prism: %v", err)
	}
	var log strings.Builder
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		once := false
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if !once && strings.Contains(sc.Text(), "Prism is listening") {
				once = true
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(60 * time.Second):
		t.Fatalf("prism did not start: %s", log.String())
	}
	proxy := fmt.Sprintf("http://127.0.0.1:%d", port)

	sign := func(tenant string, scopes ...string) string {
		tok, err := auth.Sign([]byte(secret), auth.Claims{Subject: "prism", Tenant: domain.TenantID(tenant), Scopes: scopes}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	user, admin, platform := sign("acme"), sign("acme", auth.ScopeAdmin), sign("acme", auth.ScopePlatform)
	sent, requestRefused := 0, 0
	// call sends one request through Prism. Prism's violations about the
	// answer always fail; about the request, they must agree with the
	// server: a request Prism refuses must get a 4xx, and one the test
	// sends as a mistake (bad) must be refused by Prism too.
	exchange := func(bad bool, tok, method, path, body string, header ...string) (int, string) {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, _ := http.NewRequest(method, proxy+path, rd)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		res, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		sent++
		var vs []struct {
			Location []any  `json:"location"`
			Message  string `json:"message"`
		}
		if v := res.Header.Get("sl-violations"); v != "" {
			if err := json.Unmarshal([]byte(v), &vs); err != nil {
				t.Fatalf("sl-violations %q: %v", v, err)
			}
		}
		refused := false
		for _, v := range vs {
			if len(v.Location) > 0 && v.Location[0] == "request" {
				refused = true
				continue
			}
			t.Errorf("%s %s -> %d %.200s\n  prism: the answer: %v %s", method, path, res.StatusCode, raw, v.Location, v.Message)
		}
		switch {
		case refused && res.StatusCode < 400:
			t.Errorf("%s %s -> %d: the server took a request Prism refuses: %v", method, path, res.StatusCode, vs)
		case bad && !refused:
			t.Errorf("%s %s -> %d: Prism took a request the test sends as a mistake", method, path, res.StatusCode)
		case !bad && refused:
			t.Errorf("%s %s -> %d: Prism refused a valid request: %v", method, path, res.StatusCode, vs)
		}
		if refused {
			requestRefused++
		}
		return res.StatusCode, string(raw)
	}
	call := func(tok, method, path, body string, header ...string) (int, string) {
		t.Helper()
		return exchange(false, tok, method, path, body, header...)
	}
	mistake := func(tok, method, path, body string, header ...string) {
		t.Helper()
		if status, raw := exchange(true, tok, method, path, body, header...); status < 400 {
			t.Errorf("%s %s: %d %s, want it refused", method, path, status, raw)
		}
	}
	// Every operation, with valid input.
	call("", "GET", "/livez", "")
	call("", "GET", "/readyz", "")
	call("", "GET", "/openapi.json", "")
	_, created := call(user, "POST", "/v1/orders", `{"order_id":"o-1","customer_id":"c-1","currency":"EUR"}`, "Idempotency-Key", "k-1", "X-Correlation-ID", "corr-1")
	call(user, "POST", "/v1/orders", `{"order_id":"o-1","customer_id":"c-1","currency":"EUR"}`, "Idempotency-Key", "k-1")
	call(user, "POST", "/v1/orders/o-1/lines", `{"product_id":"p-1","quantity":2,"unit_price":{"amount":1250,"currency":"EUR"}}`, "If-Match", `"1"`)
	call(user, "POST", "/v1/orders/o-1/lines", `{"product_id":"p-2","quantity":1,"unit_price":{"amount":100,"currency":"EUR"}}`)
	call(user, "DELETE", "/v1/orders/o-1/lines/p-2", "")
	call(user, "POST", "/v1/orders/o-1/place", "")
	_, paid := call(user, "POST", "/v1/orders/o-1/pay", `{"payment_reference":"cap_1"}`)
	call(user, "POST", "/v1/orders", `{"order_id":"o-2","customer_id":"c-1","currency":"EUR"}`)
	call(user, "POST", "/v1/orders/o-2/cancel", `{"reason":"changed my mind"}`)
	token := strings.Split(strings.Split(paid, `"position":"`)[1], `"`)[0]
	_ = created
	call(user, "GET", "/v1/orders/o-1?wait=10s", "", "X-Consistency-Token", token)
	call(user, "GET", "/v1/orders?limit=1", "")
	call(user, "GET", "/v1/orders?status=paid&customer_id=c-1", "")
	call(user, "GET", "/v1/customers/c-1/summary?wait=10s", "", "X-Consistency-Token", token)
	call(user, "GET", "/v1/revenue/daily?from=2020-01-01&to=2020-12-31", "")
	call(user, "GET", "/v1/orders/o-1/fulfilment", "")
	call(user, "POST", "/v1/inventory/s-1/receive", `{"quantity":10}`)
	call(user, "POST", "/v1/inventory/s-1/reserve", `{"reservation_id":"r-1","quantity":2}`)
	call(user, "POST", "/v1/inventory/s-1/commit", `{"reservation_id":"r-1"}`)
	call(user, "POST", "/v1/inventory/s-1/reserve", `{"reservation_id":"r-2","quantity":1}`)
	call(user, "POST", "/v1/inventory/s-1/release", `{"reservation_id":"r-2"}`)
	call(user, "GET", "/v1/inventory/s-1", "")
	call(user, "GET", "/v1/inventory?limit=5", "")
	call(admin, "GET", "/v1/admin/projections", "")
	call(admin, "GET", "/v1/admin/projections/order_list", "")
	call(admin, "POST", "/v1/admin/projections/order_list/rebuild", `{"dry_run":true}`)
	call(admin, "GET", "/v1/admin/projections/order_list/rebuild", "")
	call(admin, "GET", "/v1/admin/dead-letters", "")
	call(admin, "GET", "/v1/admin/dead-letters/1", "")
	call(admin, "POST", "/v1/admin/dead-letters/retry", `{"projection":"order_list"}`)
	call(admin, "POST", "/v1/admin/dead-letters/1/retry", "")
	call(admin, "POST", "/v1/admin/dead-letters/1/discard", `{"reason":"test"}`)
	call(admin, "GET", "/v1/admin/processes", "")
	call(admin, "GET", "/v1/admin/processes/fulfilment/instances/o-1", "")
	call(admin, "GET", "/v1/admin/audit", "")
	call(platform, "GET", "/v1/platform/tenants", "")
	call(platform, "POST", "/v1/platform/tenants", `{"id":"globex"}`)
	call(platform, "GET", "/v1/platform/tenants/globex", "")
	call(platform, "PUT", "/v1/platform/tenants/globex/quotas", `{"rate_commands":"50"}`)
	call(platform, "POST", "/v1/platform/tenants/globex/suspend", `{"reason":"test"}`)
	call(platform, "POST", "/v1/platform/tenants/globex/resume", `{"reason":"test"}`)
	call(platform, "GET", "/v1/platform/tiers", "")
	call(platform, "PUT", "/v1/platform/tiers/gold", `{"quotas":{"rate_commands":"100"}}`)
	call(platform, "PUT", "/v1/platform/tenants/globex/tier", `{"tier":"gold"}`)
	call(platform, "PUT", "/v1/platform/tenants/globex/cohort", `{"cohort":"canary"}`)
	call(platform, "PUT", "/v1/platform/tenants/globex/retention", `{"audit":"30d"}`)
	call(platform, "GET", "/v1/platform/heavy-hitters", "")
	call(platform, "POST", "/v1/platform/tenants/globex/exports", "")
	call(platform, "GET", "/v1/platform/tenants/globex/exports/00000000-0000-0000-0000-000000000000", "")
	call(platform, "GET", "/v1/platform/tenants/globex/exports/00000000-0000-0000-0000-000000000000/archive", "")
	call(platform, "DELETE", "/v1/platform/tenants/globex/exports/00000000-0000-0000-0000-000000000000", "")
	call(platform, "GET", "/v1/platform/tenants/globex/erasure", "")
	call(platform, "POST", "/v1/platform/tenants/globex/erase", `{"reason":"test"}`)
	call(platform, "GET", "/v1/platform/audit", "")
	// Mistakes: each must be refused by both, the answer as documented.
	mistake(user, "POST", "/v1/orders", `{"customer_id":"c 1","currency":"euro"}`)
	mistake(user, "POST", "/v1/orders", `{"customer_id":"c/1","currency":"EUR"}`)
	mistake(user, "POST", "/v1/orders", `{"customer_id":"c-1","currency":"EUR","tenant":"other"}`)
	mistake(user, "POST", "/v1/orders/o-1/lines", `{"product_id":"p-1","quantity":10001,"unit_price":{"amount":-1,"currency":"EUR"}}`)
	mistake(user, "POST", "/v1/orders/o-2/pay", `{"payment_reference":""}`)
	mistake(user, "POST", "/v1/orders/o-1/place", `{"x":1}`)
	mistake(user, "POST", "/v1/orders/o-1/place", "", "X-Correlation-ID", "not ok")
	mistake(user, "POST", "/v1/orders/o-1/place", "", "Idempotency-Key", "pm:mine")
	mistake(user, "POST", "/v1/orders/o-1/place", "", "If-Match", "v3")
	mistake(user, "POST", "/v1/inventory/s-1/receive", `{"quantity":0}`)
	mistake(user, "POST", "/v1/inventory/s-1/reserve", `{"reservation_id":"r 3","quantity":1}`)
	mistake(user, "GET", "/v1/orders?limit=0", "")
	mistake(user, "GET", "/v1/orders?status=lost", "")
	mistake(user, "GET", "/v1/orders/o-1?wait=soon", "")
	mistake(user, "GET", "/v1/revenue/daily?from=yesterday&to=2020-01-02", "")
	mistake("", "GET", "/v1/orders", "")
	// Refused for what the request is, not how it is written: the answers
	// must still be the document's.
	call(user, "GET", "/v1/orders/o-404", "")
	call(user, "POST", "/v1/orders/o-1/place", "")
	call(user, "GET", "/v1/admin/projections", "")
	call(admin, "GET", "/v1/admin/projections/nope", "")
	call(admin, "POST", "/v1/admin/projections/nope/rebuild", "")
	call(user, "POST", "/v1/inventory/s-1/reserve", `{"reservation_id":"r-9","quantity":1000}`)
	t.Logf("Prism %s checked %d exchanges; it refused %d requests, each a mistake the server refused too", prismVersion, sent, requestRefused)
}

// installPrism returns the prism binary under STRATA_PRISM_DIR (default
// .tools/prism at the module root), installing the pinned version from npm
// when it is missing; a failed install fails the test.
func installPrism(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("STRATA_PRISM_DIR")
	if dir == "" {
		dir = filepath.Join("..", ".tools", "prism")
	}
	bin := filepath.Join(dir, "node_modules", ".bin", "prism")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	cmd := exec.Command("npm", "install", "--no-audit", "--no-fund", "--prefix", dir, "@stoplight/prism-cli@"+prismVersion)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("install Stoplight Prism %s with npm: %v\n%s", prismVersion, err, out)
	}
	return bin
}

const prismVersion = "5.16.0"
