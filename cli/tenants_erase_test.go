package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/internal/pgtest"
	"github.com/strata-es/strata/tenancy"
)

const testNATS = "nats://127.0.0.1:4222"

// natsCount is the number of messages on subject filter of the stream.
func natsCount(t *testing.T, js nats.JetStreamContext, stream, filter string) int64 {
	t.Helper()
	info, err := js.StreamInfo(stream, &nats.StreamInfoRequest{SubjectsFilter: filter})
	if err != nil {
		t.Fatalf("stream info %s %s: %v", stream, filter, err)
	}
	var n int64
	for _, c := range info.State.Subjects {
		n += int64(c)
	}
	return n
}

// catalogRows counts the tenant's rows in every table of the schema with
// a tenant_id column, from the catalog now (a new module's table is
// included without a list), and in the relay's watermill copy.
func catalogRows(t *testing.T, conn *pgx.Conn, tenant string) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	rows, err := conn.Query(ctx, `SELECT c.relname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'strata' AND c.relkind IN ('r', 'p') AND a.attname = 'tenant_id' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, tb := range tables {
		var n int64
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM strata.`+pgx.Identifier{tb}.Sanitize()+` WHERE tenant_id = $1`, tenant).Scan(&n); err != nil {
			t.Fatal(err)
		}
		out[tb] = n
	}
	return out
}

// tableChecksums is md5 over each tenant table's rows of the tenant,
// ordered: byte-identical read models compare equal.
func tableChecksums(t *testing.T, conn *pgx.Conn, tenant string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for tb := range catalogRows(t, conn, tenant) {
		var sum string
		if err := conn.QueryRow(context.Background(), `SELECT coalesce(md5(string_agg(x::text, '|' ORDER BY x::text)), '') FROM strata.`+
			pgx.Identifier{tb}.Sanitize()+` x WHERE tenant_id = $1`, tenant).Scan(&sum); err != nil {
			t.Fatal(err)
		}
		out[tb] = sum
	}
	return out
}

// atHead reports whether every running checkpoint has passed the log's
// last event.
func atHead(t *testing.T, conn *pgx.Conn) bool {
	t.Helper()
	var ok bool
	err := conn.QueryRow(context.Background(), `SELECT coalesce(bool_and((c.pos_major, c.pos_minor) >= (h.tx::numeric, h.pos::numeric)), true)
		FROM strata.projection_checkpoints c,
		     (SELECT tx_id::text AS tx, position AS pos FROM strata.events ORDER BY tx_id DESC, position DESC LIMIT 1) h
		WHERE c.status = 'running'`).Scan(&ok)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestTenantErasureEndToEnd: a serving process with every module, the
// fulfilment process manager and the NATS relay; two tenants with orders,
// stock and fulfilments; `strata tenants erase acme` while acme's
// requests keep coming. Afterwards nothing of acme is left in any table
// with a tenant_id (found from the catalog) nor on its NATS subjects;
// beta's rows are byte-identical; the projections are at the head with no
// dead letters; acme's requests never got data once refused; the receipt
// verifies, and a rerun gives it again. The HTTP job then erases beta.
func TestTenantErasureEndToEnd(t *testing.T) {
	url := pgtest.NewDatabase(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	topic := "erase_test_" + hex.EncodeToString(b[:])
	vars := directoryVars(t, url)
	maps.Copy(vars, map[string]string{"STRATA_RELAY_URL": testNATS, "STRATA_RELAY_TOPIC": topic, "STRATA_PROCESSES": "all",
		"STRATA_PAYMENT_TIMEOUT": "1h", "STRATA_PROCESS_POLL": "100ms"})
	base, _, stop := startServe(t, vars)
	defer stop()
	waitReady(t, base)
	provisionOver(t, base, "acme")
	provisionOver(t, base, "beta")

	nc, err := nats.Connect(testNATS)
	if err != nil {
		t.Fatalf("NATS at %s: %v", testNATS, err)
	}
	defer nc.Close()
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = js.DeleteStream(topic) }()

	for _, tenant := range []string{"acme", "beta"} {
		tok := tenantToken(t, tenant)
		call := func(method, path, body string) {
			t.Helper()
			if st, raw, _ := apiCall(t, nil, base, tok, method, path, body); st >= 300 {
				t.Fatalf("%s %s %s: %d %s", tenant, method, path, st, raw)
			}
		}
		call("POST", "/v1/inventory/p-1/receive", `{"quantity":50}`)
		for i := 1; i <= 4; i++ {
			id := fmt.Sprintf("o-%d", i)
			call("POST", "/v1/orders", `{"order_id":"`+id+`","customer_id":"c-`+tenant+`","currency":"EUR"}`)
			call("POST", "/v1/orders/"+id+"/lines", `{"product_id":"p-1","quantity":2,"unit_price":{"amount":700,"currency":"EUR"}}`)
			call("POST", "/v1/orders/"+id+"/place", "")
		}
	}
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	// Every fulfilment reserves its stock and then waits for the payment
	// (its deadline an hour away): the log is still from then on.
	for _, tenant := range []string{"acme", "beta"} {
		for i := 1; i <= 4; i++ {
			path := fmt.Sprintf("/v1/orders/o-%d/fulfilment", i)
			waitUntil(t, 30*time.Second, func() bool {
				st, raw, _ := apiCall(t, nil, base, tenantToken(t, tenant), http.MethodGet, path, "")
				return st == http.StatusOK && strings.Contains(string(raw), `"stage":"awaiting_payment"`)
			}, tenant+" "+path+" awaiting payment")
		}
	}
	var acmeEvents int64
	waitUntil(t, 30*time.Second, func() bool {
		if !atHead(t, conn) {
			return false
		}
		var betaEvents int64
		_ = conn.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE tenant_id = 'acme'), count(*) FILTER (WHERE tenant_id = 'beta') FROM strata.events`).Scan(&acmeEvents, &betaEvents)
		// Deadlines set, and no step of a process still to execute: a
		// step executed after the snapshot below changed beta's
		// process_instances and process_history (about one run in ten).
		var waiting, steps int
		_ = conn.QueryRow(context.Background(), `SELECT count(*) FROM strata.process_deadlines`).Scan(&waiting)
		_ = conn.QueryRow(context.Background(), `SELECT count(*) FROM strata.process_steps WHERE status = 'pending'`).Scan(&steps)
		return waiting == 8 && steps == 0 && natsCount(t, js, topic, topic+".acme.>") == acmeEvents && natsCount(t, js, topic, topic+".beta.>") == betaEvents
	}, "projections, process managers and the relay at the head")
	betaSums := tableChecksums(t, conn, "beta")
	betaNATS := natsCount(t, js, topic, topic+".beta.>")
	before := catalogRows(t, conn, "acme")
	if before["events"] == 0 || before["process_deadlines"] != 4 || betaNATS == 0 {
		t.Fatalf("seeded acme %v, beta's messages %d", before, betaNATS)
	}

	// acme's requests go on during the erasure: once refused, never data.
	var mu sync.Mutex
	var statuses []int
	hammer, stopHammer := context.WithCancel(context.Background())
	var hammered sync.WaitGroup
	hammered.Add(1)
	go func() {
		defer hammered.Done()
		tok := tenantToken(t, "acme")
		for hammer.Err() == nil {
			st, _, _ := apiCall(t, nil, base, tok, http.MethodGet, "/v1/orders/o-1", "")
			mu.Lock()
			statuses = append(statuses, st)
			mu.Unlock()
		}
	}()
	waitUntil(t, 5*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(statuses) > 5 }, "acme's requests are served")

	cli := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := run(context.Background(), append([]string{"tenants"}, args...), testEnv(vars), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	if code, _, errOut := cli("erase", "acme"); code != exitUsage || !strings.Contains(errOut, "--reason") {
		t.Fatalf("erase without a reason: %d %s", code, errOut)
	}
	start := time.Now()
	code, out, errOut := cli("erase", "acme", "--reason", "contract ended", "--json")
	took := time.Since(start)
	stopHammer()
	hammered.Wait()
	if code != exitOK {
		t.Fatalf("erase: %d\n%s\n%s", code, out, errOut)
	}
	t.Logf("erased acme in %s; progress:\n%s", took.Round(time.Millisecond), errOut)
	var receipt tenancy.Receipt
	if err := json.Unmarshal([]byte(out), &receipt); err != nil || !receipt.Verify() {
		t.Fatalf("receipt: %v %s", err, out)
	}
	refused := false
	served := 0
	for _, st := range statuses {
		if st == http.StatusOK {
			served++
		}
	}
	t.Logf("acme's requests during the test: %d served, then %d refused", served, len(statuses)-served)
	for i, st := range statuses {
		switch {
		case st == http.StatusForbidden:
			refused = true
		case refused:
			t.Fatalf("request %d of acme answered %d after an earlier one was refused", i, st)
		case st != http.StatusOK:
			t.Fatalf("request %d of acme answered %d", i, st)
		}
	}
	if st, body, _ := apiCall(t, nil, base, tenantToken(t, "acme"), http.MethodGet, "/v1/orders", ""); st != http.StatusForbidden || errorCode(body) != "tenant_suspended" {
		t.Fatalf("acme after its erasure: %d %s", st, body)
	}

	for tb, n := range catalogRows(t, conn, "acme") {
		if n != 0 {
			t.Errorf("%s still has %d rows of acme", tb, n)
		}
	}
	if n := natsCount(t, js, topic, topic+".acme.>"); n != 0 {
		t.Errorf("%d messages left on acme's subjects", n)
	}
	if n := natsCount(t, js, topic, topic+".beta.>"); n != betaNATS {
		t.Errorf("beta's messages: %d, were %d", n, betaNATS)
	}
	if got := tableChecksums(t, conn, "beta"); !maps.Equal(got, betaSums) {
		for tb := range got {
			if got[tb] != betaSums[tb] {
				t.Errorf("beta's %s changed", tb)
			}
		}
	}
	// Beta is still served and still written: the projections are at the
	// head with no dead letter.
	if st, raw, _ := apiCall(t, nil, base, tenantToken(t, "beta"), "POST", "/v1/orders", `{"order_id":"o-9","customer_id":"c-beta","currency":"EUR"}`); st != http.StatusCreated {
		t.Fatalf("beta after acme's erasure: %d %s", st, raw)
	}
	waitUntil(t, 20*time.Second, func() bool { return atHead(t, conn) }, "projections at the head after the erasure")
	var deadLetters int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM strata.dead_letters`).Scan(&deadLetters); err != nil {
		t.Fatal(err)
	}
	if deadLetters != 0 {
		t.Errorf("%d dead letters after the erasure", deadLetters)
	}

	counts := receipt.Counts()
	for tb, n := range before {
		if counts["table:"+tb] != n {
			t.Errorf("receipt: %s before %d, counted %d", tb, counts["table:"+tb], n)
		}
	}
	if counts["nats:"+topic] != acmeEvents {
		t.Errorf("receipt: nats before %d, want %d (acme's events)", counts["nats:"+topic], acmeEvents)
	}

	code, out, errOut = cli("status", "acme", "--json")
	var st statusView
	if code != exitOK || json.Unmarshal([]byte(out), &st) != nil || st.Tenant.Status != "erased" || st.Erasure == nil || st.Erasure.Receipt == nil ||
		st.Erasure.Receipt.ContentHash != receipt.ContentHash {
		t.Fatalf("status: %d %s %s", code, out, errOut)
	}
	if code, out, _ := cli("status", "acme"); code != exitOK || !strings.Contains(out, "hard_delete_verified") || !strings.Contains(out, "anonymized") {
		t.Fatalf("status (text): %s", out)
	}
	code, out, errOut = cli("erase", "acme", "--reason", "again", "--json")
	var again tenancy.Receipt
	if code != exitOK || json.Unmarshal([]byte(out), &again) != nil || again.ContentHash != receipt.ContentHash {
		t.Fatalf("rerun of a finished erasure: %d %s %s", code, out, errOut)
	}
	if code, _, errOut := cli("provision", "acme"); code != exitFailure || !strings.Contains(errOut, "erased") {
		t.Fatalf("provision of an erased tenant: %d %s", code, errOut)
	}

	// The HTTP job.
	if st, raw := platformCall(t, base, http.MethodGet, "/v1/platform/tenants/beta/erasure", ""); st != http.StatusNotFound {
		t.Fatalf("erasure of beta before any: %d %s", st, raw)
	}
	if st, raw := platformCall(t, base, http.MethodPost, "/v1/platform/tenants/beta/erase", `{"reason":"over HTTP"}`); st != http.StatusAccepted {
		t.Fatalf("POST erase: %d %s", st, raw)
	}
	var last []byte
	defer func() {
		if t.Failed() {
			t.Logf("the erasure of beta as last read: %s", last)
		}
	}()
	// Beyond the job's own barrier and quiescence timeouts (1 minute
	// each), so that a job that gives up is seen here as such.
	waitUntil(t, 150*time.Second, func() bool {
		st, raw := platformCall(t, base, http.MethodGet, "/v1/platform/tenants/beta/erasure", "")
		last = raw
		if st != http.StatusOK {
			return false
		}
		var w tenancy.Erasure
		if err := json.Unmarshal(raw, &w); err != nil {
			t.Fatalf("the erasure of beta does not decode: %v\n%s", err, raw)
		}
		if w.Receipt != nil && !w.Receipt.Verify() {
			t.Fatalf("the receipt of beta's erasure does not verify (content hash %s, recomputed %s):\n%s", w.Receipt.ContentHash, w.Receipt.Hash(), raw)
		}
		return w.Receipt != nil
	}, "the HTTP erasure of beta finishes")
	for tb, n := range catalogRows(t, conn, "beta") {
		if n != 0 {
			t.Errorf("%s still has %d rows of beta", tb, n)
		}
	}
	if st, raw, _ := apiCall(t, nil, base, tenantToken(t, "acme", auth.ScopePlatform), http.MethodGet, "/v1/platform/tenants/acme/erasure", ""); st != http.StatusOK {
		t.Fatalf("erasure of acme over HTTP: %d %s", st, raw)
	}
}
