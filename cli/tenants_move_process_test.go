package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/domain"
)

// TestTenantMoveCarriesProcessState moves a tenant whose fulfilment
// process has an open instance (an order reserved, awaiting payment, its
// payment deadline pending) and a finished one. In the target the
// instances, outbox, deadlines and history are the source's, and stay so
// once the target's process runner has passed the copied events: nothing
// is decided, reserved or scheduled a second time. The open instance goes
// on in the target (paid: its stock committed, its deadline cancelled),
// while the source's copy of its deadline, due meanwhile, is never fired:
// the source leaves a tenant that moved away alone. A tenant with a parked
// instance is refused.
func TestTenantMoveCarriesProcessState(t *testing.T) {
	poolURL, euURL, _, vars, cli := twoPlacements(t)
	vars["STRATA_PROCESSES"] = "all"
	vars["STRATA_PAYMENT_TIMEOUT"] = "8s"
	vars["STRATA_PROCESS_POLL"] = "100ms"
	vars["STRATA_RELAY"] = "sql" // the relay publishes into the database's watermill table
	vars["STRATA_METRICS_ADDR"] = "127.0.0.1:0"
	vars["STRATA_PLACEMENT_RELOAD"] = "200ms"
	if code, _, errOut := cli("placements", "add", "eu", "--url", euURL); code != exitOK {
		t.Fatalf("placements add: %s", errOut)
	}
	if code, _, errOut := cli("tenants", "provision", "zeta"); code != exitOK {
		t.Fatalf("provision: %s", errOut)
	}
	base, banner, stop := startServe(t, vars)
	defer stop()
	waitReady(t, base)
	tok, err := auth.Sign([]byte(tenantsSecret), auth.Claims{Subject: "ops", Tenant: domain.TenantID("zeta"), Scopes: []string{auth.ScopeAdmin}}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	call := jsonCaller(t, base, tok)
	stage := func(id string) string {
		status, raw, _ := apiCall(t, nil, base, tok, "GET", "/v1/orders/"+id+"/fulfilment", "")
		var f map[string]any
		if status != 200 || json.Unmarshal(raw, &f) != nil {
			return ""
		}
		s, _ := f["stage"].(string)
		return s
	}
	order := func(id string, qty int) {
		call("POST", "/v1/orders", `{"order_id":"`+id+`","customer_id":"c-1","currency":"EUR"}`)
		call("POST", "/v1/orders/"+id+"/lines", fmt.Sprintf(`{"product_id":"p-2","quantity":%d,"unit_price":{"amount":500,"currency":"EUR"}}`, qty))
		call("POST", "/v1/orders/"+id+"/place", "")
	}
	call("POST", "/v1/inventory/p-2/receive", `{"quantity":10}`)
	order("o-1", 2)
	waitUntil(t, 20*time.Second, func() bool { return stage("o-1") == "awaiting_payment" }, "o-1 reserved")
	order("o-2", 3)
	waitUntil(t, 20*time.Second, func() bool { return stage("o-2") == "awaiting_payment" }, "o-2 reserved")
	call("POST", "/v1/orders/o-2/pay", `{"payment_reference":"psp-2"}`)
	waitUntil(t, 20*time.Second, func() bool { return stage("o-2") == "completed" }, "o-2 completed")
	waitUntil(t, 20*time.Second, func() bool {
		var done bool
		queryOn(t, poolURL, `SELECT done FROM strata.process_instances WHERE tenant_id = 'zeta' AND instance = 'o-2'`, nil, &done)
		return done
	}, "o-2's instance done")

	// The process state, as the source has it.
	const stateSQL = `SELECT
  (SELECT string_agg(instance || ':' || status || ':' || done || ':' || inputs, ',' ORDER BY instance) FROM strata.process_instances WHERE tenant_id = 'zeta'),
  (SELECT string_agg(instance || ':' || step || ':' || status || ':' || attempts, ',' ORDER BY instance, step) FROM strata.process_steps WHERE tenant_id = 'zeta'),
  (SELECT string_agg(instance || ':' || name || ':' || status || ':' || due_at, ',' ORDER BY instance, name) FROM strata.process_deadlines WHERE tenant_id = 'zeta'),
  (SELECT string_agg(instance || ':' || kind || ':' || status_after || ':' || at, ',' ORDER BY id) FROM strata.process_history WHERE tenant_id = 'zeta')`
	state := func(url string) [4]string {
		t.Helper()
		var s [4]*string
		queryOn(t, url, stateSQL, nil, &s[0], &s[1], &s[2], &s[3])
		var out [4]string
		for i, p := range s {
			if p != nil {
				out[i] = *p
			}
		}
		return out
	}
	before := state(poolURL)
	if !strings.Contains(before[2], "o-1:") || !strings.Contains(before[2], ":pending:") {
		t.Fatalf("o-1's payment deadline is not pending before the move: %s", before[2])
	}
	var dueAt time.Time
	queryOn(t, poolURL, `SELECT due_at FROM strata.process_deadlines WHERE tenant_id = 'zeta' AND instance = 'o-1' AND status = 'pending'`, nil, &dueAt)

	// A parked instance's dead letter would not follow it: such a tenant
	// is refused until the operator has dealt with it.
	execOn(t, poolURL, `UPDATE strata.process_instances SET parked = true WHERE tenant_id = 'zeta' AND instance = 'o-2'`)
	if code, _, errOut := cli("tenants", "move", "zeta", "--to", "eu"); code == exitOK || !strings.Contains(errOut, "parked process instances (fulfilment/o-2)") {
		t.Fatalf("a move with a parked instance: %d %s", code, errOut)
	}
	execOn(t, poolURL, `UPDATE strata.process_instances SET parked = false WHERE tenant_id = 'zeta' AND instance = 'o-2'`)
	if code, out, errOut := cli("tenants", "move", "zeta", "--to", "eu", "--json"); code != exitOK || !strings.Contains(out, `"phase":"switched"`) {
		t.Fatalf("move: %d %s %s", code, out, errOut)
	}
	if got := state(euURL); got != before {
		t.Fatalf("the target's process state right after the move:\n got %q\nwant %q", got, before)
	}
	// The target's process runner passes the copies over: once it is at
	// the head of its log, the state is still the source's.
	var head string
	queryOn(t, euURL, `SELECT tx_id::text || '/' || position FROM strata.events ORDER BY tx_id DESC, position DESC LIMIT 1`, nil, &head)
	waitUntil(t, 20*time.Second, func() bool {
		var at bool
		queryOn(t, euURL, `SELECT count(*) = 2 AND bool_and((pos_major, pos_minor) >= (split_part($1, '/', 1)::numeric, split_part($1, '/', 2)::numeric))
			FROM strata.projection_checkpoints WHERE projection = 'fulfilment' OR projection LIKE 'relay\_%'`, []any{head}, &at)
		return at
	}, "the target's fulfilment runner and relay at the head of its log")
	if got := state(euURL); got != before {
		t.Fatalf("the target's process state after its runner passed the copies:\n got %q\nwant %q", got, before)
	}
	// The relay passed them over too: the pool published each of them.
	const published = `SELECT count(*) FROM strata.watermill_strata_events WHERE metadata::jsonb->>'tenant' = 'zeta'`
	var inPool, inEU, poolEvents int64
	queryOn(t, poolURL, published, nil, &inPool)
	queryOn(t, euURL, published, nil, &inEU)
	poolEvents = countEvents(t, poolURL, "zeta")
	if inPool != poolEvents || inEU != 0 {
		t.Fatalf("relay: the pool published %d of zeta's %d events, the target %d of the copies (want all, and 0)", inPool, poolEvents, inEU)
	}

	// The open instance goes on in the target.
	call("POST", "/v1/orders/o-1/pay", `{"payment_reference":"psp-1"}`)
	waitUntil(t, 20*time.Second, func() bool { return stage("o-1") == "completed" }, "o-1 completed in the target")
	waitUntil(t, 20*time.Second, func() bool {
		it := call("GET", "/v1/inventory/p-2", "")
		return it["on_hand"] == float64(5) && it["reserved"] == float64(0)
	}, "p-2's stock committed once per order (10 received, 2 and 3 sold)")
	// The relay publishes after the process manager's commit, on its own
	// wake-up: wait for it rather than read once (under a loaded machine
	// the single read raced it).
	waitUntil(t, 20*time.Second, func() bool {
		queryOn(t, euURL, published, nil, &inEU)
		return inEU > 0
	}, "the target's relay published zeta's events after the move")
	var reserves int64
	queryOn(t, euURL, `SELECT count(*) FROM strata.events WHERE tenant_id = 'zeta' AND event_type = 'inventory.reserved'`, nil, &reserves)
	if reserves != 2 {
		t.Errorf("the target's log holds %d reservations, want 2 (one per order)", reserves)
	}

	// Past o-1's deadline: the source, which still holds its rows until
	// --finish, never fired it.
	time.Sleep(time.Until(dueAt) + time.Second)
	var srcStatus, dstStatus string
	queryOn(t, poolURL, `SELECT status FROM strata.process_deadlines WHERE tenant_id = 'zeta' AND instance = 'o-1'`, nil, &srcStatus)
	queryOn(t, euURL, `SELECT status FROM strata.process_deadlines WHERE tenant_id = 'zeta' AND instance = 'o-1'`, nil, &dstStatus)
	if srcStatus != "pending" || dstStatus != "cancelled" {
		t.Errorf("o-1's payment deadline past its time: %s in the source (want pending, left alone), %s in the target (want cancelled by the payment)", srcStatus, dstStatus)
	}
	var dstTimeouts int64
	queryOn(t, euURL, `SELECT count(*) FROM strata.process_history WHERE tenant_id = 'zeta' AND kind = 'timeout'`, nil, &dstTimeouts)
	if dstTimeouts != 0 {
		t.Errorf("the target's history has %d timeouts, want 0 (o-1 was paid in time)", dstTimeouts)
	}
	// The serving process exports the open move (read from its record).
	scrape := func() string {
		t.Helper()
		res, err := http.Get(metricsURL(banner))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		return string(raw)
	}
	waitUntil(t, 10*time.Second, func() bool {
		m := scrape()
		return strings.Contains(m, `strata_tenant_move_open{phase="switched",source="pool",target="eu",tenant="zeta"} 1`) &&
			strings.Contains(m, `strata_tenant_move_freeze_seconds{tenant="zeta"}`) && strings.Contains(m, `strata_tenant_move_copied_events{tenant="zeta"}`)
	}, "the open move in /metrics")
	if code, out, errOut := cli("tenants", "move", "zeta", "--finish", "--json"); code != exitOK || !strings.Contains(out, `"phase":"finished"`) {
		t.Fatalf("finish: %d %s %s", code, out, errOut)
	}
	if rows := countTenantRows(t, poolURL, "zeta"); rows != 0 {
		t.Errorf("the pool holds %d rows of zeta after --finish", rows)
	}
	waitUntil(t, 10*time.Second, func() bool { return !strings.Contains(scrape(), `strata_tenant_move_open{`) }, "the finished move gone from /metrics")
}
