package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/examples"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/internal/pgtest"
	"github.com/strata-es/strata/tenancy/subjects"
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
	vars["STRATA_PROJECTION_RETRY_ATTEMPTS"] = "1" // the dead letter below parks at once
	vars["STRATA_PROCESSES"] = "all"               // the fulfilment process keeps payment references
	vars["STRATA_PROCESS_POLL"] = "100ms"
	vars["STRATA_BACKUP_RETENTION"] = "35d"
	vars["STRATA_RELAY"] = "sql" // the erasure's notice goes where the events go
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
		if id == "o-a1" || id == "o-b1" { // with an idempotency key, which names the customer
			status, raw, _ := apiCall(t, nil, base, tenantToken(t, "acme"), "POST", "/v1/orders", `{"order_id":"`+id+`","customer_id":"`+customer+`","currency":"EUR"}`,
				"Idempotency-Key", "create-"+customer)
			if status != 201 {
				t.Fatalf("create %s: %d %s", id, status, raw)
			}
		} else {
			call("POST", "/v1/orders", `{"order_id":"`+id+`","customer_id":"`+customer+`","currency":"EUR"}`)
		}
		call("POST", "/v1/orders/"+id+"/lines", `{"product_id":"p-1","quantity":2,"unit_price":{"amount":250,"currency":"EUR"}}`)
		call("POST", "/v1/orders/"+id+"/place", "")
		if id == "o-a2" {
			// A dead letter of hers: order_details loses the order's row,
			// so her payment parks there (the data sealed, the error text
			// the projection's).
			waitUntil(t, 10*time.Second, func() bool {
				var n int
				queryOn(t, url, `SELECT count(*) FROM strata.order_details WHERE tenant_id = 'acme' AND order_id = 'o-a2' AND status = 'placed'`, nil, &n)
				return n == 1
			}, "o-a2 placed in order_details")
			execOn(t, url, `DELETE FROM strata.order_details WHERE tenant_id = 'acme' AND order_id = 'o-a2'`)
		}
		call("POST", "/v1/orders/"+id+"/pay", `{"payment_reference":"`+ref+`"}`)
	}
	call("POST", "/v1/inventory/p-1/receive", `{"quantity":100}`) // so that fulfilment reserves, not cancels
	call("POST", "/v1/orders", `{"order_id":"o-a0","customer_id":"alice-q7","currency":"EUR"}`)
	call("POST", "/v1/orders/o-a0/lines", `{"product_id":"p-1","quantity":1,"unit_price":{"amount":100,"currency":"EUR"}}`)
	call("POST", "/v1/orders/o-a0/place", "")
	place("o-a1", "alice-q7", "psp-alice-1")
	place("o-a2", "alice-q7", "psp-alice-2")
	place("o-b1", "bob-q7", "psp-bob-1")

	waitUntil(t, 20*time.Second, func() bool {
		var n int
		queryOn(t, url, `SELECT count(*) FROM strata.dead_letters WHERE tenant_id = 'acme' AND stream_id = 'order-o-a2' AND status = 'parked'
AND event_type = 'order.paid' AND data::text LIKE '%"$sealed"%'`, nil, &n)
		return n == 1
	}, "her payment of o-a2 parked by order_details")
	// What her orders' fulfilment instances keep in plaintext: the payment
	// references in their state, the history's notes.
	plainInProcesses := func(pattern string) int {
		var n int
		queryOn(t, url, `SELECT (SELECT count(*) FROM strata.process_instances WHERE state::text LIKE $1)
     + (SELECT count(*) FROM strata.process_steps WHERE payload::text LIKE $1 OR coalesce(result::text, '') LIKE $1 OR coalesce(last_error, '') LIKE $1)
     + (SELECT count(*) FROM strata.process_history WHERE note LIKE $1 OR summary::text LIKE $1)`, []any{pattern}, &n)
		return n
	}
	waitUntil(t, 20*time.Second, func() bool { return plainInProcesses("%psp-alice-2%") > 0 }, "the fulfilment of o-a2 sees her payment")
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

	// Before the erasure, verify finds her.
	if code, out, _ := owner("subjects", "verify", "acme", "alice-q7"); code != exitFailure || !strings.Contains(out, "FOUND keys") ||
		!strings.Contains(out, "FOUND table:order_list.customer_id") || !strings.Contains(out, "FOUND subject_erasures") {
		t.Fatalf("verify before the erasure: %d\n%s", code, out)
	}

	// Alice is forgotten: `strata subjects erase`, stopped after every
	// step and run again until it finishes.
	stopped := map[string]bool{}
	subjectEraseAfter = func(step string) error {
		if !stopped[step] {
			stopped[step] = true
			return errors.New("stopped after the step (test)")
		}
		return nil
	}
	defer func() { subjectEraseAfter = nil }()
	var receipt subjects.Receipt
	for runs := 0; ; runs++ {
		code, out, errOut := owner("subjects", "erase", "acme", "alice-q7", "--reason", "GDPR art. 17 request #12", "--json")
		if code == exitOK {
			if err := json.Unmarshal([]byte(out), &receipt); err != nil {
				t.Fatalf("receipt: %v\n%s", err, out)
			}
			break
		}
		if runs > len(subjects.Steps) || !strings.Contains(errOut, "stopped after the step") {
			t.Fatalf("subjects erase: %d\n%s%s", code, out, errOut)
		}
	}
	for _, step := range subjects.Steps {
		if !stopped[step] {
			t.Errorf("the erasure was never stopped after %s", step)
		}
	}
	keyID := receipt.KeyID
	stores := map[string]int64{}
	for _, st := range receipt.Stores {
		stores[st.Name+" "+st.Mode] = st.Count
	}
	want := map[string]int64{"keys deleted": 1, "log shredded": 5, "dead_letters shredded": 1, "relay shredded": -1,
		"idempotency_records deleted": 1, "exports deleted": 0, "read_models tombstoned": int64(len(examples.All().Projections())),
		"process_instances tombstoned": 3, "dead_letter_errors tombstoned": 1, "backups beyond_use": -1, "broker_notice notified": 1}
	if !maps.Equal(stores, want) || len(keyID) != 32 || receipt.Pseudonym != event.PseudonymOf(keyID) {
		t.Fatalf("receipt: %+v\nstores %v, want %v", receipt, stores, want)
	}
	for _, st := range receipt.Stores {
		if st.Name == "backups" && (st.Until == nil || st.Until.Sub(receipt.StartedAt) < 35*24*time.Hour-time.Second || st.Until.Sub(receipt.StartedAt) > 35*24*time.Hour+time.Minute) {
			t.Fatalf("backups beyond use until %v, want 35 days after the erasure started (%v)", st.Until, receipt.StartedAt)
		}
	}
	again := receipt
	again.ContentHash = ""
	body, _ := json.Marshal(again)
	if sum := sha256.Sum256(body); hex.EncodeToString(sum[:]) != receipt.ContentHash {
		t.Fatalf("the receipt's content hash is not the hash of its content")
	}
	var stored string
	queryOn(t, url, `SELECT receipt->>'content_hash' FROM strata.subject_erasures WHERE tenant_id = 'acme' AND finished_at IS NOT NULL`, nil, &stored)
	if stored != receipt.ContentHash {
		t.Fatalf("the stored receipt's hash %s, the printed one's %s", stored, receipt.ContentHash)
	}
	// Run again after it finished: the same receipt, nothing done twice.
	code, out, errOut := owner("subjects", "erase", "acme", "alice-q7", "--reason", "GDPR art. 17 request #12", "--json")
	var twice subjects.Receipt
	if code != exitOK || json.Unmarshal([]byte(out), &twice) != nil || twice.ContentHash != receipt.ContentHash {
		t.Fatalf("erase run again: %d %s%s, want the receipt %s", code, out, errOut, receipt.ContentHash)
	}
	// The notice, once (the step was stopped after it and run again), on
	// the relay's topic beside the tenant's events, naming the key.
	var notices int
	var noticeKey string
	queryOn(t, url, `SELECT count(*), max(payload::jsonb->>'key_id') FROM strata.watermill_strata_events
WHERE metadata::jsonb->>'tenant' = 'acme' AND metadata::jsonb->>'type' = 'strata.subject.erased'`, nil, &notices, &noticeKey)
	if notices != 1 || noticeKey != keyID {
		t.Fatalf("erasure notices on the relay's table: %d naming key %q, want 1 naming %s", notices, noticeKey, keyID)
	}
	var idem int
	queryOn(t, url, `SELECT count(*) FROM strata.idempotency_keys WHERE tenant_id = 'acme' AND key LIKE 'create-%'`, nil, &idem)
	if idem != 1 {
		t.Fatalf("%d idempotency records left, want bob's only", idem)
	}
	if n := plainInProcesses("%psp-alice%"); n != 0 {
		t.Fatalf("%d process rows still hold her payment references", n)
	}
	if n := plainInProcesses("%psp-bob-1%"); n == 0 {
		t.Fatal("the erasure of alice redacted bob's fulfilment")
	}
	var letterError string
	queryOn(t, url, `SELECT error FROM strata.dead_letters WHERE tenant_id = 'acme' AND stream_id = 'order-o-a2'`, nil, &letterError)
	if strings.Contains(letterError, "o-a2") || !strings.Contains(letterError, "erased") {
		t.Fatalf("the error text of her dead letter after the erasure: %q", letterError)
	}
	if code, out, errOut := owner("subjects", "verify", "acme", "alice-q7"); code != exitOK {
		t.Fatalf("verify after the erasure: %d\n%s%s", code, out, errOut)
	}
	// verify checks her streams field by field: a note that quotes her
	// payment again, or a state holding it, is found.
	for _, c := range []struct{ tamper, undo, found string }{
		{`UPDATE strata.process_history SET note = 'order paid: psp-alice-1' WHERE tenant_id = 'acme' AND instance = 'o-a1' AND note = '` + "(erased with a data subject)" + `' AND id = (SELECT min(id) FROM strata.process_history WHERE tenant_id = 'acme' AND instance = 'o-a1' AND note <> '')`,
			`UPDATE strata.process_history SET note = '(erased with a data subject)' WHERE note = 'order paid: psp-alice-1'`, "FOUND free_text"},
		{`UPDATE strata.process_instances SET state = jsonb_set(state, '{payment_reference}', '"psp-alice-1"') WHERE tenant_id = 'acme' AND instance = 'o-a1'`,
			`UPDATE strata.process_instances SET state = jsonb_set(state, '{payment_reference}', '"erased"') WHERE tenant_id = 'acme' AND instance = 'o-a1'`, "FOUND process_instances"},
		// A message on the broker (the relay's table) with her order's
		// customer ID opened: her ID, and a declared field in plaintext.
		{`INSERT INTO strata.watermill_strata_events (uuid, payload, metadata, transaction_id) VALUES (gen_random_uuid()::text,
'{"order_id": "o-a1", "customer_id": "alice-q7"}'::json, json_build_object('tenant', 'acme', 'type', 'order.created', 'stream', '` + order.StreamID("o-a1") + `'), pg_current_xact_id())`,
			`DELETE FROM strata.watermill_strata_events WHERE payload::text LIKE '%alice-q7%'`, "FOUND broker: 1 (messages the broker keeps naming"},
		{`INSERT INTO strata.watermill_strata_events (uuid, payload, metadata, transaction_id) VALUES (gen_random_uuid()::text,
'{"order_id": "o-a1", "customer_id": "someone"}'::json, json_build_object('tenant', 'acme', 'type', 'order.created', 'stream', '` + order.StreamID("o-a1") + `'), pg_current_xact_id())`,
			`DELETE FROM strata.watermill_strata_events WHERE payload::text LIKE '%someone%'`, "FOUND broker_fields"},
	} {
		execOn(t, url, c.tamper)
		code, out, _ := owner("subjects", "verify", "acme", "alice-q7")
		execOn(t, url, c.undo)
		if code != exitFailure || !strings.Contains(out, c.found) {
			t.Fatalf("verify after %s: %d\n%s", c.tamper, code, out)
		}
	}
	if code, out, errOut := owner("subjects", "verify", "acme", "alice-q7"); code != exitOK {
		t.Fatalf("verify after the tampering was undone: %d\n%s%s", code, out, errOut)
	}
	if code, out, _ := owner("subjects", "verify", "acme", "bob-q7"); code != exitFailure {
		t.Fatalf("verify of bob, never erased: %d\n%s", code, out)
	}
	after := filepath.Join(t.TempDir(), "acme-after.tar.gz")
	if code, _, errOut := owner("tenants", "export", "acme", "--out", after, "--catch-up", "60s"); code != exitOK {
		t.Fatalf("export after the erasure: %s", errOut)
	}
	for name, content := range readArchive(t, after) {
		if strings.Contains(string(content), "alice-q7") || strings.Contains(string(content), "psp-alice") {
			t.Fatalf("the export after the erasure holds alice's data in %s", name)
		}
		if name == "events.jsonl" && !strings.Contains(string(content), "bob-q7") {
			t.Fatalf("the export after the erasure lost bob's data")
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
	// A full rebuild of every projection equals the live tables (--deep
	// rebuilds each into a shadow and compares it row by row).
	if code, out, errOut := owner("replay", "verify", "--deep"); code != exitOK {
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
	// (The events up to now: the fulfilment process appends its own.)
	var logBefore, logAfter string
	var upTo int64
	queryOn(t, url, `SELECT max(position) FROM strata.events`, nil, &upTo)
	const digest = `SELECT md5(string_agg(event_id::text || data::text, '' ORDER BY position)) FROM strata.events WHERE position <= $1`
	queryOn(t, url, digest, []any{upTo}, &logBefore)
	code, out, errOut = owner("keys", "rotate", "--json")
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
	queryOn(t, url, digest, []any{upTo}, &logAfter)
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

// TestSubjectErasureOverHTTP: a tenant admin forgets a customer through
// POST /v1/admin/subjects/erase (the subject in the body), follows the
// erasure with GET /v1/admin/subject-erasures/{id} to its receipt, and
// the customer's orders read as erased while the other's do not. A
// token without the admin scope is refused; another tenant cannot see
// the erasure.
func TestSubjectErasureOverHTTP(t *testing.T) {
	url := pgtest.NewDatabase(t)
	vars := directoryVars(t, url)
	base, _, stop := startServe(t, vars)
	defer stop()
	waitReady(t, base)
	for _, tenant := range []string{"acme", "beta"} {
		provisionOver(t, base, tenant)
		waitServed(t, base, tenant)
	}
	for _, o := range [][2]string{{"o-c", "carol-h2"}, {"o-d", "dave-h2"}} {
		if status, raw, _ := apiCall(t, nil, base, tenantToken(t, "acme"), "POST", "/v1/orders", `{"order_id":"`+o[0]+`","customer_id":"`+o[1]+`","currency":"EUR"}`); status != 201 {
			t.Fatalf("create %s: %d %s", o[0], status, raw)
		}
	}
	body := `{"subject":"carol-h2","reason":"asked to be forgotten"}`
	if status, raw, _ := apiCall(t, nil, base, tenantToken(t, "acme"), "POST", "/v1/admin/subjects/erase", body); status != 403 {
		t.Fatalf("erase without the admin scope: %d %s", status, raw)
	}
	admin := tenantToken(t, "acme", auth.ScopeAdmin)
	status, raw, _ := apiCall(t, nil, base, admin, "POST", "/v1/admin/subjects/erase", body)
	var st subjects.Status
	if status != 202 || json.Unmarshal(raw, &st) != nil || st.ErasureID == "" {
		t.Fatalf("erase: %d %s", status, raw)
	}
	waitUntil(t, 60*time.Second, func() bool {
		status, raw, _ := apiCall(t, nil, base, admin, "GET", "/v1/admin/subject-erasures/"+st.ErasureID, "")
		return status == 200 && json.Unmarshal(raw, &st) == nil && st.Finished
	}, "the erasure finished")
	if st.Receipt == nil || st.Receipt.KeyID == "" || st.Receipt.RequestedBy != "api:ops" || len(st.StepsDone) != len(subjects.Steps) {
		t.Fatalf("finished erasure: %+v", st)
	}
	erased := order.ErasedCustomerPrefix + event.PseudonymOf(st.Receipt.KeyID)
	for id, want := range map[string]string{"o-c": erased, "o-d": "dave-h2"} {
		status, raw, _ := apiCall(t, nil, base, admin, "GET", "/v1/orders/"+id, "")
		var got map[string]any
		if status != 200 || json.Unmarshal(raw, &got) != nil || got["customer_id"] != want {
			t.Fatalf("%s after the erasure: %d %s, want customer %s", id, status, raw, want)
		}
	}
	if status, raw, _ := apiCall(t, nil, base, tenantToken(t, "beta", auth.ScopeAdmin), "GET", "/v1/admin/subject-erasures/"+st.ErasureID, ""); status != 404 {
		t.Fatalf("another tenant reading the erasure: %d %s", status, raw)
	}
	if status, raw, _ := apiCall(t, nil, base, admin, "POST", "/v1/admin/subjects/erase", `{"subject":"","reason":"x"}`); status != 400 {
		t.Fatalf("an empty subject: %d %s", status, raw)
	}
}

// TestSubjectErasureKilledAtEveryStep: `strata subjects erase` is
// SIGKILLed inside each step's transaction, the step's work written and
// not committed (failpoint subjects.<step>), one run per step, then run to
// the end: its receipt holds what an erasure never interrupted holds for
// an identical tenant, and the subject is forgotten.
func TestSubjectErasureKilledAtEveryStep(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	url := pgtest.NewDatabase(t)
	vars := directoryVars(t, url)
	base, _, stop := startServe(t, vars)
	defer stop()
	waitReady(t, base)
	for _, tenant := range []string{"acme", "beta"} {
		provisionOver(t, base, tenant)
		waitServed(t, base, tenant)
		for _, o := range [][3]string{{"o-1", "erin-k9", "psp-e1"}, {"o-2", "erin-k9", "psp-e2"}, {"o-3", "finn-k9", "psp-f3"}} {
			for _, c := range [][3]string{
				{"/v1/orders", `{"order_id":"` + o[0] + `","customer_id":"` + o[1] + `","currency":"EUR"}`, "create-" + o[0]},
				{"/v1/orders/" + o[0] + "/lines", `{"product_id":"p-1","quantity":1,"unit_price":{"amount":700,"currency":"EUR"}}`, ""},
				{"/v1/orders/" + o[0] + "/place", "", ""},
				{"/v1/orders/" + o[0] + "/pay", `{"payment_reference":"` + o[2] + `"}`, ""},
			} {
				var header []string
				if c[2] != "" {
					header = []string{"Idempotency-Key", c[2]}
				}
				if status, raw, _ := apiCall(t, nil, base, tenantToken(t, tenant), "POST", c[0], c[1], header...); status >= 300 {
					t.Fatalf("%s %s: %d %s", tenant, c[0], status, raw)
				}
			}
		}
	}
	erase := func(tenant string) subjects.Receipt {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(ctx, []string{"subjects", "erase", tenant, "erin-k9", "--reason", "asked", "--json"}, testEnv(vars), &out, &errb); code != exitOK {
			t.Fatalf("erase %s: %d %s", tenant, code, errb.String())
		}
		var r subjects.Receipt
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, step := range subjects.Steps {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "STRATA_TEST_AS_MAIN=1", "STRATA_TEST_ARGS=subjects erase acme erin-k9 --reason asked", "STRATA_FAILPOINTS=subjects."+step)
		for k, v := range vars {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != -1 { // -1: ended by a signal
			t.Fatalf("the erasure with failpoint subjects.%s was not killed: %v %s", step, err, out)
		}
	}
	killed, clean := erase("acme"), erase("beta")
	if !reflect.DeepEqual(killed.Stores, clean.Stores) || killed.KeyID == "" {
		t.Fatalf("the erasure killed at every step holds %+v, one never interrupted %+v", killed.Stores, clean.Stores)
	}
	if again := erase("acme"); again.ContentHash != killed.ContentHash {
		t.Fatalf("run again after the end: receipt %s, then %s", killed.ContentHash, again.ContentHash)
	}
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"subjects", "verify", "acme", "erin-k9"}, testEnv(vars), &out, &errb); code != exitOK {
		t.Fatalf("verify after the killed erasure: %d %s%s", code, out.String(), errb.String())
	}
}
