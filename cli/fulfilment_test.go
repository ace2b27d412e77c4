package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"

	"strings"
	"testing"
	"time"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/internal/paysim"
	"github.com/strata-es/strata/internal/pgtest"
)

// TestFulfilmentThroughServe is the README's walkthrough with the manual
// payment provider, through a real `strata serve` running the fulfilment
// process manager: stock received, an order placed (its stock reserved),
// paid (committed); a second order left unpaid, cancelled by its deadline
// (released); a third one out of stock, cancelled at once. The operator's
// routes show the instances and one instance's history, every answer
// validated against the OpenAPI document.
func TestFulfilmentThroughServe(t *testing.T) {
	url := pgtest.NewDatabase(t)
	secret := "fulfilment-test-secret-0123456789abcdef"
	base, _, stop := startServe(t, map[string]string{"DATABASE_URL": url, "STRATA_DATA_DIR": t.TempDir(),
		"STRATA_JWT_SECRET": secret, "STRATA_LOG_LEVEL": "warn", "STRATA_PROCESSES": "all",
		"STRATA_PAYMENT_TIMEOUT": "2s", "STRATA_PROCESS_POLL": "100ms"})
	defer stop()
	waitReady(t, base)
	tok, err := auth.Sign([]byte(secret), auth.Claims{Subject: "ops", Tenant: domain.TenantID("demo"), Scopes: []string{auth.ScopeAdmin}}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	call := jsonCaller(t, base, tok)
	eventually := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	stage := func(id string) string {
		status, raw, _ := apiCall(t, nil, base, tok, "GET", "/v1/orders/"+id+"/fulfilment", "")
		if status == 404 {
			return ""
		}
		var f map[string]any
		json.Unmarshal(raw, &f) //nolint:errcheck
		s, _ := f["stage"].(string)
		return s
	}
	item := func() map[string]any { return call("GET", "/v1/inventory/p-2", "") }
	order := func(id string, qty int) {
		call("POST", "/v1/orders", `{"order_id":"`+id+`","customer_id":"c-1","currency":"EUR"}`)
		call("POST", "/v1/orders/"+id+"/lines", `{"product_id":"p-2","quantity":`+itoa(qty)+`,"unit_price":{"amount":500,"currency":"EUR"}}`)
		call("POST", "/v1/orders/"+id+"/place", "")
	}

	call("POST", "/v1/inventory/p-2/receive", `{"quantity":10}`)
	order("o-2", 2)
	eventually("o-2 reserved", func() bool { return stage("o-2") == "awaiting_payment" })
	if it := item(); it["reserved"] != float64(2) || it["available"] != float64(8) {
		t.Fatalf("after the reservation: %v", it)
	}
	call("POST", "/v1/orders/o-2/pay", `{"payment_reference":"psp-2"}`)
	eventually("o-2 completed", func() bool { return stage("o-2") == "completed" })
	eventually("o-2's stock committed", func() bool { it := item(); return it["on_hand"] == float64(8) && it["reserved"] == float64(0) })

	order("o-3", 3)
	eventually("o-3 reserved", func() bool { return item()["reserved"] == float64(3) })
	eventually("o-3 cancelled by its deadline", func() bool { return stage("o-3") == "cancelled" })
	f := call("GET", "/v1/orders/o-3/fulfilment", "")
	if f["cancel_reason"] != "payment_timeout" {
		t.Fatalf("o-3: %v", f)
	}
	eventually("o-3's stock released", func() bool { it := item(); return it["on_hand"] == float64(8) && it["reserved"] == float64(0) })

	order("o-4", 30)
	eventually("o-4 cancelled out of stock", func() bool { return stage("o-4") == "cancelled" })
	if f := call("GET", "/v1/orders/o-4/fulfilment", ""); f["cancel_reason"] != "out_of_stock" {
		t.Fatalf("o-4: %v", f)
	}

	// The read models run ahead of the process's own bookkeeping (the last
	// outcome is recorded after the command's event is in the log): wait
	// for the instances to be done.
	var byStatus map[string]int
	eventually("every instance done", func() bool {
		list := call("GET", "/v1/admin/processes?process=fulfilment", "")
		byStatus = map[string]int{}
		for _, in := range list["instances"].([]any) {
			byStatus[in.(map[string]any)["status"].(string)]++
		}
		return byStatus["completed"] == 1 && byStatus["cancelled"] == 2 && len(byStatus) == 2
	})
	d := call("GET", "/v1/admin/processes/fulfilment/instances/o-3", "")
	var kinds []string
	for _, h := range d["history"].([]any) {
		kinds = append(kinds, h.(map[string]any)["kind"].(string))
	}
	if got := strings.Join(kinds, ","); !strings.Contains(got, "timeout") || d["status"] != "cancelled" || d["done"] != true {
		t.Fatalf("o-3's history: %s (%v)", got, d["status"])
	}
	dls := d["deadlines"].([]any)
	if len(dls) != 1 || dls[0].(map[string]any)["status"] != "fired" {
		t.Fatalf("o-3's deadlines: %v", dls)
	}
	if status, raw, _ := apiCall(t, nil, base, tok, "GET", "/v1/admin/processes/fulfilment/instances/nope", ""); status != 404 || !strings.Contains(string(raw), "not_found") {
		t.Fatalf("unknown instance: %d %s", status, raw)
	}
	if status, _, _ := apiCall(t, nil, base, tok, "GET", "/v1/admin/processes?stuck=soon", ""); status != 400 {
		t.Fatalf("bad stuck: %d", status)
	}
}

// TestFulfilmentParkedInstanceRetried: with the http provider failing every
// call and one attempt allowed, the capture parks its instance in the
// dead-letter store (the process goes on for others); `strata replay
// processes list --parked` and `dlq list` show it; once the provider is
// back, `dlq retry` re-queues the step under its original key and the
// order completes, with exactly one capture at the provider.
func TestFulfilmentParkedInstanceRetried(t *testing.T) {
	sim := paysim.Start(paysim.Config{Seed: 7, Faults: paysim.Faults{FailRate: 1}})
	defer sim.Close()
	url := pgtest.NewDatabase(t)
	secret := "fulfilment-test-secret-0123456789abcdef"
	vars := map[string]string{"DATABASE_URL": url, "STRATA_DATA_DIR": t.TempDir(),
		"STRATA_JWT_SECRET": secret, "STRATA_LOG_LEVEL": "error", "STRATA_PROCESSES": "all", "STRATA_PROCESS_POLL": "100ms",
		"STRATA_PROCESS_ATTEMPTS": "1", "STRATA_PAYMENT_PROVIDER": "http", "STRATA_PAYMENT_URL": sim.URL(), "STRATA_PAYMENT_HTTP_TIMEOUT": "1s"}
	base, _, stop := startServe(t, vars)
	defer stop()
	waitReady(t, base)
	tok, err := auth.Sign([]byte(secret), auth.Claims{Subject: "ops", Tenant: domain.TenantID("demo")}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range [][3]string{
		{"POST", "/v1/inventory/p-1/receive", `{"quantity":5}`},
		{"POST", "/v1/orders", `{"order_id":"o-1","customer_id":"c-1","currency":"EUR"}`},
		{"POST", "/v1/orders/o-1/lines", `{"product_id":"p-1","quantity":1,"unit_price":{"amount":700,"currency":"EUR"}}`},
		{"POST", "/v1/orders/o-1/place", ""},
	} {
		if status, raw, _ := apiCall(t, nil, base, tok, c[0], c[1], c[2]); status >= 300 {
			t.Fatalf("%s %s: %d %s", c[0], c[1], status, raw)
		}
	}
	replayJSON := func(args ...string) (int, map[string]any) {
		t.Helper()
		var out, errb bytes.Buffer
		code := run(context.Background(), append([]string{"replay"}, args...), testEnv(vars), &out, &errb)
		var v map[string]any
		json.Unmarshal(out.Bytes(), &v) //nolint:errcheck
		if code != exitOK {
			t.Logf("strata replay %s: exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errb.String())
		}
		return code, v
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, v := replayJSON("processes", "list", "--parked", "--json")
		if ins, _ := v["instances"].([]any); len(ins) == 1 && ins[0].(map[string]any)["instance"] == "o-1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("o-1 was never parked: %v", v)
		}
		time.Sleep(100 * time.Millisecond)
	}
	code, v := replayJSON("dlq", "list", "--projection", "fulfilment", "--json")
	letters, _ := v["dead_letters"].([]any)
	if code != exitOK || len(letters) != 1 {
		t.Fatalf("dlq list: %d %v", code, v)
	}
	id := strconv.FormatInt(int64(letters[0].(map[string]any)["id"].(float64)), 10)
	if sim.Ledger().Captures("o-1") != 0 {
		t.Fatalf("a capture went through while the provider failed: %+v", sim.Ledger())
	}

	sim.SetFaults(paysim.Faults{})
	if code, v := replayJSON("dlq", "retry", id, "--json"); code != exitOK {
		t.Fatalf("dlq retry: %d %v", code, v)
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		status, raw, _ := apiCall(t, nil, base, tok, "GET", "/v1/orders/o-1/fulfilment", "")
		if status == 200 && strings.Contains(string(raw), `"stage":"completed"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("o-1 did not complete after the retry: %d %s", status, raw)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := sim.Ledger().Kept("o-1"); n != 1 {
		t.Fatalf("captures kept for o-1: %d, want 1 (%+v)", n, sim.Ledger())
	}
}
