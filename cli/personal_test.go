package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/internal/pgtest"
	"github.com/strata-es/strata/personal"
)

// TestPersonalDataSealedShreddedAndRotated (issue 30, the keys): two
// customers' orders written through `strata serve` reach the log with
// their personal fields sealed, each customer under a key of its own; the
// read models and an export show them opened. Once one customer's key is
// destroyed, a rebuild reads that customer's fields as the module's
// tombstones (the customer's pseudonym, the erased payment reference)
// while the other customer's data and every total stay; a returning
// customer gets a new key. `strata keys rotate` re-wraps every data key
// without changing one byte of the log, and a new process still opens
// them.
func TestPersonalDataSealedShreddedAndRotated(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	url := pgtest.NewDatabase(t)
	vars := directoryVars(t, url)
	base, _, stop := startServe(t, vars)
	defer stop()
	waitReady(t, base)
	provisionOver(t, base, "acme")
	waitServed(t, base, "acme")
	call := func(method, path, body string) []byte {
		t.Helper()
		status, raw, _ := apiCall(t, nil, base, tenantToken(t, "acme"), method, path, body)
		if status >= 300 {
			t.Fatalf("%s %s: %d %s", method, path, status, raw)
		}
		return raw
	}
	place := func(id, customer, ref string) {
		t.Helper()
		call("POST", "/v1/orders", `{"order_id":"`+id+`","customer_id":"`+customer+`","currency":"EUR"}`)
		call("POST", "/v1/orders/"+id+"/lines", `{"product_id":"p-1","quantity":2,"unit_price":{"amount":250,"currency":"EUR"}}`)
		call("POST", "/v1/orders/"+id+"/place", "")
		call("POST", "/v1/orders/"+id+"/pay", `{"payment_reference":"`+ref+`"}`)
	}
	call("POST", "/v1/orders", `{"order_id":"o-a0","customer_id":"alice-q7","currency":"EUR"}`)
	call("POST", "/v1/orders/o-a0/lines", `{"product_id":"p-1","quantity":1,"unit_price":{"amount":100,"currency":"EUR"}}`)
	call("POST", "/v1/orders/o-a0/place", "")
	place("o-a1", "alice-q7", "psp-alice-1")
	place("o-a2", "alice-q7", "psp-alice-2")
	place("o-b1", "bob-q7", "psp-bob-1")

	plainInLog := func() int {
		var n int
		queryOn(t, url, `SELECT count(*) FROM strata.events WHERE data::text ~ '(alice|bob)-q7|psp-(alice|bob)'`, nil, &n)
		return n
	}
	if n := plainInLog(); n != 0 {
		t.Fatalf("%d events hold a customer's ID or payment reference in plaintext", n)
	}
	var keys, sealed int
	queryOn(t, url, `SELECT (SELECT count(*) FROM strata.subject_keys WHERE tenant_id = 'acme'),
       (SELECT count(*) FROM strata.events WHERE tenant_id = 'acme' AND data::text LIKE '%"$sealed"%')`, nil, &keys, &sealed)
	if keys != 2 || sealed != 7 {
		t.Fatalf("%d data keys (want one per customer: 2), %d sealed events (want 4 created + 3 paid)", keys, sealed)
	}
	detail := func(id string) map[string]any {
		t.Helper()
		var got map[string]any
		if err := json.Unmarshal(call("GET", "/v1/orders/"+id+"?wait=5s", ""), &got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := detail("o-a1"); got["customer_id"] != "alice-q7" {
		t.Fatalf("the read model of o-a1: %v", got)
	}
	owner := func(args ...string) (int, string, string) {
		t.Helper()
		var out, errb bytes.Buffer
		code := run(ctx, args, testEnv(vars), &out, &errb)
		return code, out.String(), errb.String()
	}
	archive := filepath.Join(t.TempDir(), "acme.tar.gz")
	if code, _, errOut := owner("tenants", "export", "acme", "--out", archive, "--catch-up", "60s"); code != exitOK {
		t.Fatalf("export: %s", errOut)
	}
	if events := string(readArchive(t, archive)["events.jsonl"]); !strings.Contains(events, "alice-q7") || strings.Contains(events, event.SealedField) {
		t.Fatalf("the export's events are not opened:\n%.400s", events)
	}

	// Alice's key is destroyed (the subject erasure's first step).
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["search_path"] = db.Schema
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	keyID, err := personal.Destroy(ctx, conn, "acme", "alice-q7")
	conn.Close(ctx)
	if err != nil || keyID == "" {
		t.Fatalf("destroy alice's key: %q %v", keyID, err)
	}
	for _, p := range []string{"order_details", "order_list", "customer_summary", "order_fulfilment"} {
		if code, _, errOut := owner("replay", "rebuild", "--projection", p); code != exitOK {
			t.Fatalf("rebuild %s: %s", p, errOut)
		}
	}
	erased := order.ErasedCustomerPrefix + event.PseudonymOf(keyID)
	for _, id := range []string{"o-a1", "o-a2"} {
		if got := detail(id); got["customer_id"] != erased {
			t.Fatalf("%s after alice's key was destroyed: customer %v, want %s", id, got["customer_id"], erased)
		}
	}
	if got := detail("o-b1"); got["customer_id"] != "bob-q7" {
		t.Fatalf("bob's order after alice's erasure: %v", got)
	}
	var refs string
	queryOn(t, url, `SELECT string_agg(order_id || '=' || payment_reference, ',' ORDER BY order_id) FROM strata.order_fulfilment WHERE tenant_id = 'acme'`, nil, &refs)
	if refs != "o-a1="+order.ErasedPaymentReference+",o-a2="+order.ErasedPaymentReference+",o-b1=psp-bob-1" {
		t.Fatalf("payment references after alice's erasure: %s", refs)
	}
	var summary string
	queryOn(t, url, `SELECT string_agg(s.customer_id || ':' || s.orders || ':' || p.amount, ',' ORDER BY s.customer_id)
FROM strata.customer_summaries s JOIN strata.customer_paid_totals p USING (tenant_id, customer_id) WHERE tenant_id = 'acme'`, nil, &summary)
	if summary != "bob-q7:1:500,"+erased+":3:1000" {
		t.Fatalf("customer summaries after alice's erasure: %s", summary)
	}
	if code, out, errOut := owner("replay", "verify"); code != exitOK {
		t.Fatalf("replay verify after the erasure: %d\n%s%s", code, out, errOut)
	}
	// Her placed order cannot be paid: the payment reference would be
	// hers, and her key is gone.
	status, raw, _ := apiCall(t, nil, base, tenantToken(t, "acme"), "POST", "/v1/orders/o-a0/pay", `{"payment_reference":"psp-alice-0"}`)
	if status != 422 || errorCode(raw) != "rule_violation" || !strings.Contains(string(raw), "forgotten") {
		t.Fatalf("paying the forgotten customer's order: %d %s, want 422 rule_violation", status, raw)
	}
	// Alice comes back: a new subject, a new key.
	place("o-a3", "alice-q7", "psp-alice-3")
	waitUntil(t, 10*time.Second, func() bool {
		status, _, _ := apiCall(t, nil, base, tenantToken(t, "acme"), "GET", "/v1/orders/o-a3", "")
		return status == 200
	}, "alice's new order in the read model")
	if got := detail("o-a3"); got["customer_id"] != "alice-q7" {
		t.Fatalf("alice's new order: %v", got)
	}

	// Rotation: every data key re-wrapped, the log untouched.
	var logBefore, logAfter string
	const digest = `SELECT md5(string_agg(event_id::text || data::text, '' ORDER BY position)) FROM strata.events`
	queryOn(t, url, digest, nil, &logBefore)
	code, out, errOut := owner("keys", "rotate", "--json")
	if code != exitOK {
		t.Fatalf("keys rotate: %d\n%s%s", code, out, errOut)
	}
	var rotated struct {
		Databases []struct {
			Database string         `json:"database"`
			Current  string         `json:"current_kek"`
			Keys     map[string]int `json:"data_keys_by_kek"`
			Rotation struct {
				Keys int `json:"Keys"`
			} `json:"rotation"`
		} `json:"databases"`
	}
	if err := json.Unmarshal([]byte(out), &rotated); err != nil || len(rotated.Databases) != 1 {
		t.Fatalf("keys rotate --json: %v\n%s", err, out)
	}
	r := rotated.Databases[0]
	if r.Rotation.Keys != 2 || len(r.Keys) != 1 || r.Keys[r.Current] != 2 {
		t.Fatalf("after the rotation: %+v (want bob's and alice's new key re-wrapped by the current KEK)", r)
	}
	queryOn(t, url, digest, nil, &logAfter)
	if logBefore != logAfter {
		t.Fatal("the rotation changed the log")
	}
	// A new process (the rebuild) opens the keys under the new KEK.
	if code, _, errOut := owner("replay", "rebuild", "--projection", "order_details"); code != exitOK {
		t.Fatalf("rebuild after the rotation: %s", errOut)
	}
	if got := detail("o-b1"); got["customer_id"] != "bob-q7" {
		t.Fatalf("bob's order after the rotation: %v", got)
	}
	if n := plainInLog(); n != 0 {
		t.Fatalf("%d events hold plaintext personal data", n)
	}
}
