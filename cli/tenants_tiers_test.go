package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/internal/pgtest"
)

// TestTenantTiersCLI drives `strata tenants tier|tiers|cohort|retention`,
// as text and JSON.
func TestTenantTiersCLI(t *testing.T) {
	url := pgtest.NewDatabase(t)
	vars := map[string]string{"DATABASE_URL": url, "STRATA_DATA_DIR": t.TempDir(), "STRATA_RETENTION_AUDIT": "100d"}
	if code := run(context.Background(), []string{"migrate", "up"}, testEnv(vars), &bytes.Buffer{}, &bytes.Buffer{}); code != exitOK {
		t.Fatal("migrate up failed")
	}
	cli := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := run(context.Background(), append([]string{"tenants"}, args...), testEnv(vars), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	if code, _, errOut := cli("provision", "acme"); code != exitOK {
		t.Fatalf("provision: %s", errOut)
	}
	if code, out, errOut := cli("tiers"); code != exitOK || !strings.Contains(out, "free") || !strings.Contains(out, "in_flight_commands=8") {
		t.Fatalf("tiers: %d %s %s", code, out, errOut)
	}
	if code, out, errOut := cli("tiers", "set", "gold", "rate_commands=1000/s", "--description", "big spenders", "--json"); code != exitOK ||
		!strings.Contains(out, `"rate_commands": "1000/s"`) || !strings.Contains(out, "big spenders") {
		t.Fatalf("tiers set: %d %s %s", code, out, errOut)
	}
	// set merges: the earlier key stays, k= removes one.
	if code, out, errOut := cli("tiers", "set", "gold", "in_flight_commands=64", "--json"); code != exitOK ||
		!strings.Contains(out, `"rate_commands": "1000/s"`) || !strings.Contains(out, `"in_flight_commands": "64"`) {
		t.Fatalf("tiers set again: %d %s %s", code, out, errOut)
	}
	if code, _, errOut := cli("tiers", "set", "gold", "rate_commands=fast"); code != exitUsage {
		t.Fatalf("a bad quota: %d %s", code, errOut)
	}
	if code, out, errOut := cli("tier", "acme", "gold"); code != exitOK || !strings.Contains(out, "gold") {
		t.Fatalf("tier: %d %s %s", code, out, errOut)
	}
	if code, _, errOut := cli("tier", "acme", "platinum"); code != exitFailure || !strings.Contains(errOut, "no such tier") {
		t.Fatalf("an unknown tier: %d %s", code, errOut)
	}
	if code, out, errOut := cli("cohort", "acme", "launch", "--json"); code != exitOK || !strings.Contains(out, `"cohort": "launch"`) || !strings.Contains(out, `"tier": "gold"`) {
		t.Fatalf("cohort: %d %s %s", code, out, errOut)
	}
	code, out, errOut := cli("retention", "acme", "--json")
	var v RetentionView
	if err := json.Unmarshal([]byte(out), &v); code != exitOK || err != nil {
		t.Fatalf("retention: %d %s %s", code, out, errOut)
	}
	if w := v.Windows["audit"]; w.Window != "100d" || w.Source != "default" {
		t.Fatalf("audit window %+v, want the environment's 100d", w)
	}
	if w := v.Windows["idempotency_records"]; w.Window != "30d" || w.Source != "default" {
		t.Fatalf("idempotency window %+v, want the built-in 30d", w)
	}
	if code, out, errOut := cli("retention", "acme", "idempotency_records=7d", "audit=keep"); code != exitOK ||
		!strings.Contains(out, "idempotency_records") || !strings.Contains(out, "7d") || !strings.Contains(out, "keep") {
		t.Fatalf("retention set: %d %s %s", code, out, errOut)
	}
	if code, out, _ := cli("retention", "acme", "audit=", "--json"); code != exitOK || !strings.Contains(out, `"window": "7d"`) || !strings.Contains(out, `"window": "100d"`) {
		t.Fatalf("retention audit= back to the default: %d %s", code, out)
	}
	if code, _, errOut := cli("retention", "acme", "idempotency_records=10m"); code != exitFailure || !strings.Contains(errOut, "shorter than") {
		t.Fatalf("a window below the minimum: %d %s", code, errOut)
	}
	if code, _, errOut := cli("tier", "acme"); code != exitUsage {
		t.Fatalf("tier without a name: %d %s", code, errOut)
	}
}

// TestTenantTiersOverHTTP: the platform routes of tiers, cohorts,
// retention and the heavy hitters (validated against openapi.json by
// apiCall), and the tenant-aware series in /metrics.
func TestTenantTiersOverHTTP(t *testing.T) {
	url := pgtest.NewDatabase(t)
	vars := directoryVars(t, url)
	vars["STRATA_METRICS_ADDR"] = "127.0.0.1:0"
	base, banner, stop := startServe(t, vars)
	defer stop()
	waitReady(t, base)
	provisionOver(t, base, "acme")
	provisionOver(t, base, "beta")
	for _, c := range []struct{ method, path, body, want string }{
		{http.MethodGet, "/v1/platform/tiers", "", `"name":"enterprise"`},
		{http.MethodPut, "/v1/platform/tiers/gold", `{"quotas":{"in_flight_commands":"64"},"description":"gold"}`, `"in_flight_commands":"64"`},
		{http.MethodPut, "/v1/platform/tenants/acme/tier", `{"tier":"gold"}`, `"tier":"gold"`},
		{http.MethodPut, "/v1/platform/tenants/beta/tier", `{"tier":"free"}`, `"tier":"free"`},
		{http.MethodPut, "/v1/platform/tenants/acme/cohort", `{"cohort":"launch"}`, `"cohort":"launch"`},
		{http.MethodPut, "/v1/platform/tenants/acme/retention", `{"idempotency_records":"14d"}`, `"idempotency_records":"14d"`},
	} {
		st, body := platformCall(t, base, c.method, c.path, c.body)
		if st != http.StatusOK || !strings.Contains(string(body), c.want) {
			t.Fatalf("%s %s: %d %s", c.method, c.path, st, body)
		}
	}
	for _, c := range []struct{ method, path, body string }{
		{http.MethodPut, "/v1/platform/tenants/acme/tier", `{"tier":"platinum"}`},
		{http.MethodPut, "/v1/platform/tenants/acme/retention", `{"events":"1d"}`},
		{http.MethodGet, "/v1/platform/heavy-hitters?top=0", ""},
	} {
		if st, body := platformCall(t, base, c.method, c.path, c.body); st != http.StatusBadRequest && st != http.StatusNotFound {
			t.Errorf("%s %s %s: %d %s, want 400 or 404", c.method, c.path, c.body, st, body)
		}
	}
	if st, body, _ := apiCall(t, nil, base, tenantToken(t, "acme", auth.ScopeAdmin), http.MethodGet, "/v1/platform/heavy-hitters", ""); st != http.StatusForbidden {
		t.Fatalf("heavy hitters with an admin token: %d %s", st, body)
	}

	// acme 3 commands, beta 1; then the heavy hitters rank them. The
	// tier and cohort reach the serving directory by a push: wait until
	// acme's queries are labelled gold/launch before counting commands.
	waitUntil(t, 5*time.Second, func() bool {
		st, _, _ := apiCall(t, nil, base, tenantToken(t, "beta"), http.MethodGet, "/v1/orders", "")
		return st == http.StatusOK
	}, "beta is served")
	waitUntil(t, 5*time.Second, func() bool {
		if st, _, _ := apiCall(t, nil, base, tenantToken(t, "acme"), http.MethodGet, "/v1/orders", ""); st != http.StatusOK {
			return false
		}
		_, metrics := scrape(t, banner)
		return strings.Contains(string(metrics), `strata_tenant_requests_total{api="queries",tenant_id="acme",tenant_tier="gold"}`)
	}, "acme's tier and cohort reach the serving directory")
	for tenant, n := range map[string]int{"acme": 3, "beta": 1} {
		for range n {
			if st, body, _ := apiCall(t, nil, base, tenantToken(t, tenant), http.MethodPost, "/v1/orders", `{"customer_id":"c-1","currency":"EUR"}`); st != http.StatusCreated {
				t.Fatalf("command of %s: %d %s", tenant, st, body)
			}
		}
	}
	st, raw := platformCall(t, base, http.MethodGet, "/v1/platform/heavy-hitters?top=5", "")
	var hh struct {
		Top map[string][]struct {
			Tenant string `json:"tenant"`
			Count  int    `json:"count"`
		} `json:"top"`
	}
	if err := json.Unmarshal(raw, &hh); st != http.StatusOK || err != nil {
		t.Fatalf("heavy hitters: %d %s", st, raw)
	}
	if c := hh.Top["commands"]; len(c) != 2 || c[0].Tenant != "acme" || c[0].Count != 3 || c[1].Tenant != "beta" || c[1].Count != 1 {
		t.Fatalf("heavy hitters by commands %+v, want acme 3 then beta 1", c)
	}
	if e := hh.Top["events"]; len(e) < 1 || e[0].Tenant != "acme" || e[0].Count < 3 {
		t.Fatalf("heavy hitters by events %+v, want acme first", e)
	}

	st, metrics := scrape(t, banner)
	if st != http.StatusOK {
		t.Fatalf("/metrics: %d", st)
	}
	for _, want := range []string{
		`strata_tenant_commands_total{outcome="ok",tenant_id="acme",tenant_tier="gold"} 3`, // a cohort tenant
		`strata_tenant_commands_total{outcome="ok",tenant_id="",tenant_tier="free"} 1`,     // not in a cohort
		`strata_tenant_heavy_hitter{kind="commands",rank="1",tenant_id="acme"} 3`,
		`strata_tenant_requests_total{api="commands",tenant_id="acme",tenant_tier="gold"} 3`,
		`strata_retention_deleted_total{kind="idempotency_records"} 0`,
		`strata_tenant_in_flight_rejected_total{class="pool_share"} 0`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	for _, line := range strings.Split(string(metrics), "\n") {
		if strings.Contains(line, `tenant_id="beta"`) && !strings.HasPrefix(line, "strata_tenant_heavy_hitter{") {
			t.Errorf("beta, in no cohort, carries tenant_id outside the heavy hitters: %s", line)
		}
	}
}
