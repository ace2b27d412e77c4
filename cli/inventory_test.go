package cli

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/internal/pgtest"
)

// TestInventoryModule drives the second bounded context through a real
// `strata serve`: its commands, its projection and its query routes, on
// the same engine as the orders module, tenant-scoped like it.
func TestInventoryModule(t *testing.T) {
	url := pgtest.NewDatabase(t)
	secret := "inventory-test-secret-0123456789abcdef"
	base, _, stop := startServe(t, map[string]string{"DATABASE_URL": url, "STRATA_DATA_DIR": t.TempDir(),
		"STRATA_JWT_SECRET": secret, "STRATA_LOG_LEVEL": "warn"})
	defer stop()
	waitReady(t, base)
	token := func(tenant string) string {
		tok, err := auth.Sign([]byte(secret), auth.Claims{Subject: "ops", Tenant: domain.TenantID(tenant)}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	type answer struct {
		status int
		body   map[string]any
		raw    string
		header http.Header
	}
	call := func(tenant, method, path, body string, header ...string) answer {
		t.Helper()
		status, raw, hdr := apiCall(t, nil, base, token(tenant), method, path, body, header...)
		a := answer{status: status, raw: string(raw), header: hdr}
		json.Unmarshal(raw, &a.body) //nolint:errcheck
		return a
	}
	want := func(a answer, status int, code string) {
		t.Helper()
		if a.status != status {
			t.Fatalf("answered %d %s, want %d", a.status, a.raw, status)
		}
		if code != "" {
			e, _ := a.body["error"].(map[string]any)
			if e["code"] != code {
				t.Fatalf("answered %s, want error code %s", a.raw, code)
			}
		}
	}

	a := call("acme", "POST", "/v1/inventory/sku-1/receive", `{"quantity":10}`)
	want(a, 200, "")
	if a.body["sku"] != "sku-1" || a.body["version"] != float64(1) || a.body["position"] == "" {
		t.Fatalf("receive answered %s", a.raw)
	}
	a = call("acme", "POST", "/v1/inventory/sku-1/reserve", `{"reservation_id":"r-1","quantity":4}`, "Idempotency-Key", "reserve-r-1")
	want(a, 200, "")
	// The same request again is replayed; the same reservation under
	// another key changes nothing (idempotent on the reservation ID).
	if again := call("acme", "POST", "/v1/inventory/sku-1/reserve", `{"reservation_id":"r-1","quantity":4}`, "Idempotency-Key", "reserve-r-1"); again.raw != a.raw || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replayed reserve: %s (%v), want %s", again.raw, again.header, a.raw)
	}
	if same := call("acme", "POST", "/v1/inventory/sku-1/reserve", `{"reservation_id":"r-1","quantity":4}`); same.status != 200 || same.body["version"] != float64(2) {
		t.Fatalf("repeated reservation: %s", same.raw)
	}
	want(call("acme", "POST", "/v1/inventory/sku-1/reserve", `{"reservation_id":"r-2","quantity":7}`), 422, "rule_violation")
	want(call("acme", "POST", "/v1/inventory/sku-1/reserve", `{"reservation_id":"r-1","quantity":5}`), 422, "rule_violation")
	want(call("acme", "POST", "/v1/inventory/sku-1/commit", `{"reservation_id":"r-9"}`), 422, "rule_violation")
	want(call("acme", "POST", "/v1/inventory/sku-1/reserve", `{"reservation_id":"r-2","quantity":0}`), 400, "invalid_request")
	want(call("acme", "POST", "/v1/inventory/sku-1/reserve", `{"quantity":1}`), 400, "invalid_request")
	want(call("acme", "POST", "/v1/inventory/sku-1/receive", `{"quantity":1,"tenant":"other"}`), 400, "invalid_request")
	want(call("acme", "POST", "/v1/inventory/sku-1/release", `{"reservation_id":"r-1"}`), 200, "")
	want(call("acme", "POST", "/v1/inventory/sku-1/commit", `{"reservation_id":"r-1"}`), 422, "rule_violation")
	a = call("acme", "POST", "/v1/inventory/sku-1/reserve", `{"reservation_id":"r-3","quantity":6}`)
	want(a, 200, "")
	a = call("acme", "POST", "/v1/inventory/sku-1/commit", `{"reservation_id":"r-3"}`)
	want(a, 200, "")
	if a.body["version"] != float64(5) {
		t.Fatalf("commit answered %s, want version 5", a.raw)
	}
	if a.header.Get("Location") != "" {
		t.Errorf("a 200 answer carries Location %q", a.header.Get("Location"))
	}

	// Read your write: the projection has applied the commit.
	pos, _ := a.body["position"].(string)
	q := call("acme", "GET", "/v1/inventory/sku-1?wait=10s", "", "X-Consistency-Token", pos)
	want(q, 200, "")
	if strings.TrimSpace(q.raw) != `{"sku":"sku-1","on_hand":4,"reserved":0,"available":4,"version":5}` {
		t.Fatalf("item: %s", q.raw)
	}
	for _, sku := range []string{"sku-2", "sku-3"} {
		want(call("acme", "POST", "/v1/inventory/"+sku+"/receive", `{"quantity":1}`), 200, "")
	}
	last := call("acme", "POST", "/v1/inventory/sku-3/receive", `{"quantity":2}`)
	page := call("acme", "GET", "/v1/inventory?limit=2&wait=10s", "", "X-Consistency-Token", last.body["position"].(string))
	want(page, 200, "")
	items, _ := page.body["items"].([]any)
	next, _ := page.body["next_cursor"].(string)
	if len(items) != 2 || next == "" {
		t.Fatalf("first page: %s", page.raw)
	}
	rest := call("acme", "GET", "/v1/inventory?limit=2&cursor="+next, "")
	want(rest, 200, "")
	if items, _ := rest.body["items"].([]any); len(items) != 1 || !strings.Contains(rest.raw, `"sku":"sku-3","on_hand":3`) || rest.body["next_cursor"] != nil {
		t.Fatalf("second page: %s", rest.raw)
	}
	want(call("acme", "GET", "/v1/inventory?cursor=c1.bogus", ""), 400, "invalid_request")

	// A transfer moves units between two items in one command: both
	// changed, or neither.
	a = call("acme", "POST", "/v1/inventory/sku-1/transfer", `{"to_sku":"sku-2","transfer_id":"t-1","quantity":3}`)
	want(a, 200, "")
	if a.body["sku"] != "sku-1" || a.body["version"] != float64(7) {
		t.Fatalf("transfer answered %s, want sku-1 at version 7", a.raw)
	}
	pos, _ = a.body["position"].(string)
	if q := call("acme", "GET", "/v1/inventory/sku-2?wait=10s", "", "X-Consistency-Token", pos); !strings.Contains(q.raw, `"on_hand":4`) {
		t.Fatalf("sku-2 after the transfer: %s", q.raw)
	}
	if again := call("acme", "POST", "/v1/inventory/sku-1/transfer", `{"to_sku":"sku-2","transfer_id":"t-1","quantity":3}`); again.status != 200 || again.body["version"] != float64(7) {
		t.Fatalf("the same transfer again: %s, want nothing changed (version 7)", again.raw)
	}
	want(call("acme", "POST", "/v1/inventory/sku-1/transfer", `{"to_sku":"sku-2","transfer_id":"t-2","quantity":50}`), 422, "rule_violation")
	want(call("acme", "POST", "/v1/inventory/sku-1/transfer", `{"to_sku":"sku-1","transfer_id":"t-3","quantity":1}`), 422, "rule_violation")
	want(call("acme", "POST", "/v1/inventory/sku-1/transfer", `{"to_sku":"sku-2","transfer_id":"t-4","quantity":1}`, "If-Match", "6"), 409, "version_conflict")
	if q := call("acme", "GET", "/v1/inventory/sku-2", ""); !strings.Contains(q.raw, `"on_hand":4`) {
		t.Fatalf("sku-2 after the refused transfers: %s", q.raw)
	}

	// Another tenant sees nothing, and its SKU of the same name is its own.
	want(call("beta", "GET", "/v1/inventory/sku-1", ""), 404, "not_found")
	want(call("beta", "POST", "/v1/inventory/sku-1/reserve", `{"reservation_id":"r-1","quantity":1}`), 422, "rule_violation")
	if list := call("beta", "GET", "/v1/inventory", ""); list.status != 200 || !strings.Contains(list.raw, `"items":[]`) {
		t.Fatalf("beta's list: %s", list.raw)
	}
}
