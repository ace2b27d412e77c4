package cli

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/examples"
	"github.com/strata-es/strata/internal/pgtest"
)

// TestServeReadSideAcrossProcesses runs the roles in separate serve
// processes sharing one database: a command+query process and projector
// processes that never poll (STRATA_PROJECTION_POLL=1h), so a query
// carrying a command's consistency token can only be answered if the
// command process's NOTIFY woke the projector through LISTEN. A second
// projector process stands by and takes over when the first stops.
func TestServeReadSideAcrossProcesses(t *testing.T) {
	url := pgtest.NewDatabase(t)
	secret := "serve-read-test-secret-0123456789abcdef"
	vars := func(extra ...string) map[string]string {
		m := map[string]string{"DATABASE_URL": url, "STRATA_DATA_DIR": t.TempDir(), "STRATA_JWT_SECRET": secret,
			"STRATA_LOG_LEVEL": "warn", "STRATA_PROJECTION_POLL": "1h"}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i]] = extra[i+1]
		}
		return m
	}
	projector, _, stopProjector := startServe(t, vars(), "--roles", "projector")
	waitReady(t, projector)
	api, _, stopAPI := startServe(t, vars(), "--roles", "command,query")
	waitReady(t, api)

	tok, err := auth.Sign([]byte(secret), auth.Claims{Subject: "ops", Tenant: "acme", Scopes: []string{auth.ScopeAdmin}}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	call := func(base, method, path, body string, header ...string) (int, []byte) {
		t.Helper()
		status, raw, _ := apiCall(t, nil, base, tok, method, path, body, header...)
		return status, raw
	}
	readOwnWrite := func(id string) time.Duration {
		t.Helper()
		status, raw := call(api, http.MethodPost, "/v1/orders", `{"order_id":"`+id+`","customer_id":"c-1","currency":"EUR"}`)
		if status != http.StatusCreated {
			t.Fatalf("create: %d %s", status, raw)
		}
		var created struct{ Position string }
		if err := json.Unmarshal(raw, &created); err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		status, raw = call(api, http.MethodGet, "/v1/orders/"+id+"?wait=10s", "", "X-Consistency-Token", created.Position)
		if status != http.StatusOK || !strings.Contains(string(raw), `"order_id":"`+id+`"`) {
			t.Fatalf("read own write %s: %d %s", id, status, raw)
		}
		return time.Since(began)
	}
	if took := readOwnWrite("o-1"); took > 5*time.Second {
		t.Errorf("read-your-writes across processes took %s", took)
	}
	status, raw := call(api, http.MethodGet, "/v1/admin/projections", "")
	if status != http.StatusOK || strings.Count(string(raw), `"status":"running"`) != len(examples.All().Projections()) {
		t.Fatalf("admin view from the query process: %d %s", status, raw)
	}

	// A standby projector (with a query role to look through).
	standby, _, stopStandby := startServe(t, vars(), "--roles", "projector,query")
	waitReady(t, standby)
	if status, raw := call(standby, http.MethodGet, "/v1/admin/projections", ""); status != http.StatusOK || strings.Count(string(raw), `"status":"standby"`) != len(examples.All().Projections()) {
		t.Fatalf("admin view from the standby: %d %s", status, raw)
	}
	if code := stopProjector(); code != exitOK {
		t.Fatalf("projector exited %d", code)
	}
	// The standby takes the leases (it retries every few seconds) and is
	// woken by NOTIFY like the first.
	if took := readOwnWrite("o-2"); took > 9*time.Second {
		t.Errorf("read-your-writes after the take-over took %s", took)
	}
	// Each runner retries its own lease on its own clock: the one behind
	// GET /v1/orders/{id} took over, the other three follow within a
	// lease retry.
	for deadline := time.Now().Add(15 * time.Second); ; {
		status, raw := call(standby, http.MethodGet, "/v1/admin/projections", "")
		if status == http.StatusOK && strings.Count(string(raw), `"status":"running"`) == len(examples.All().Projections()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("admin view 15s after the take-over: %d %s", status, raw)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, stop := range []func() int{stopAPI, stopStandby} {
		if code := stop(); code != exitOK {
			t.Fatalf("serve exited %d", code)
		}
	}
}

func waitReady(t *testing.T, base string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := http.Get(base + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never became ready", base)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
