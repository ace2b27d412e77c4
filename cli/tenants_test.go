package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/internal/pgtest"
	"github.com/strata-es/strata/tenancy/platformapi"
)

const tenantsSecret = "tenants-test-secret-0123456789abcdef"

func tenantToken(t *testing.T, tenant string, scopes ...string) string {
	t.Helper()
	tok, err := auth.Sign([]byte(tenantsSecret), auth.Claims{Subject: "ops", Tenant: domain.TenantID(tenant), Scopes: scopes}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// directoryVars serve with the tenant directory required, as on a new
// installation.
func directoryVars(t *testing.T, url string) map[string]string {
	return map[string]string{"DATABASE_URL": url, "STRATA_DATA_DIR": t.TempDir(), "STRATA_JWT_SECRET": tenantsSecret,
		"STRATA_LOG_LEVEL": "warn", "STRATA_REQUIRE_TENANT_DIRECTORY": "true"}
}

// errorCode returns the code of an error body ("" if none).
func errorCode(body []byte) string {
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	_ = json.Unmarshal(body, &e)
	return e.Error.Code
}

func platformCall(t *testing.T, base, method, path, body string) (int, []byte) {
	t.Helper()
	status, raw, _ := apiCall(t, nil, base, tenantToken(t, "ops", auth.ScopePlatform), method, path, body)
	return status, raw
}

// provisionOver provisions tenant through base's platform route and waits
// until base serves it: the directory's push reaches a serving process,
// the one that took the call included, after the commit (docs/tenants.md,
// the measured bound), so a request sent at once may still be refused.
func provisionOver(t *testing.T, base, tenant string) {
	t.Helper()
	if status, raw := platformCall(t, base, http.MethodPost, "/v1/platform/tenants", `{"id":"`+tenant+`","name":"Tenant `+tenant+`"}`); status != http.StatusOK {
		t.Fatalf("provision %s: %d %s", tenant, status, raw)
	}
	tok := tenantToken(t, tenant)
	waitUntil(t, 10*time.Second, func() bool {
		status, raw, _ := apiCall(t, nil, base, tok, http.MethodGet, "/v1/orders", "")
		return status != http.StatusForbidden || errorCode(raw) != "tenant_unknown"
	}, "serve admits the provisioned tenant "+tenant)
}

// TestTenantSuspensionReachesEveryServer: two serving processes on one
// database; a suspension made through one is enforced by both within the
// bound (measured from the suspend's commit to the first 403 on each);
// another tenant is never affected; resume restores service on both.
func TestTenantSuspensionReachesEveryServer(t *testing.T) {
	url := pgtest.NewDatabase(t)
	baseA, _, stopA := startServe(t, directoryVars(t, url))
	defer stopA()
	waitReady(t, baseA)
	baseB, _, stopB := startServe(t, directoryVars(t, url), "--roles", "command,query")
	defer stopB()
	waitReady(t, baseB)
	provisionOver(t, baseA, "acme")
	provisionOver(t, baseA, "beta")

	servers := map[string]string{"A": baseA, "B": baseB}
	// The provision's push reaches B too: both serve acme.
	for name, base := range servers {
		waitUntil(t, 5*time.Second, func() bool {
			status, _, _ := apiCall(t, nil, base, tenantToken(t, "acme"), http.MethodGet, "/v1/orders", "")
			return status == http.StatusOK
		}, "server "+name+" serves the provisioned tenant")
	}

	start := time.Now()
	status, raw := platformCall(t, baseA, http.MethodPost, "/v1/platform/tenants/acme/suspend", `{"reason":"chargeback"}`)
	committed := time.Now()
	if status != http.StatusOK || !strings.Contains(string(raw), `"status":"suspended"`) {
		t.Fatalf("suspend: %d %s", status, raw)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[string]time.Duration{}
	for name, base := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := committed.Add(5 * time.Second)
			for time.Now().Before(deadline) {
				st, body, _ := apiCall(t, nil, base, tenantToken(t, "acme"), http.MethodPost, "/v1/orders", `{"customer_id":"c-1","currency":"EUR"}`)
				if st == http.StatusForbidden && errorCode(body) == "tenant_suspended" {
					mu.Lock()
					seen[name] = time.Since(committed)
					mu.Unlock()
					return
				}
				if st != http.StatusCreated {
					t.Errorf("server %s: %d %s while suspending", name, st, body)
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, name := range []string{"A", "B"} {
		d, ok := seen[name]
		if !ok {
			t.Fatalf("server %s still served the suspended tenant 5s after the commit", name)
		}
		t.Logf("server %s: first 403 tenant_suspended %s after the suspend's commit returned (%s after it was sent)", name, d.Round(time.Microsecond), (d + committed.Sub(start)).Round(time.Microsecond))
		if d > time.Second {
			t.Errorf("server %s took %s, beyond the 1s bound", name, d)
		}
	}
	// Every serving path of the tenant refuses; the other tenant is served.
	for name, base := range servers {
		for _, c := range []struct{ method, path, body string }{
			{http.MethodGet, "/v1/orders", ""},
			{http.MethodGet, "/v1/orders/o-1", ""},
			{http.MethodPost, "/v1/orders", `{"customer_id":"c-1","currency":"EUR"}`},
		} {
			st, body, _ := apiCall(t, nil, base, tenantToken(t, "acme"), c.method, c.path, c.body)
			if st != http.StatusForbidden || errorCode(body) != "tenant_suspended" {
				t.Errorf("server %s %s %s of the suspended tenant: %d %s", name, c.method, c.path, st, body)
			}
		}
		if st, body, _ := apiCall(t, nil, base, tenantToken(t, "acme", auth.ScopeAdmin), http.MethodGet, "/v1/admin/projections", ""); st != http.StatusForbidden || errorCode(body) != "tenant_suspended" {
			t.Errorf("server %s admin route of the suspended tenant: %d %s", name, st, body)
		}
		if st, body, _ := apiCall(t, nil, base, tenantToken(t, "beta"), http.MethodPost, "/v1/orders", `{"customer_id":"c-1","currency":"EUR"}`); st != http.StatusCreated {
			t.Errorf("server %s refused the other tenant: %d %s", name, st, body)
		}
	}

	if status, raw := platformCall(t, baseB, http.MethodPost, "/v1/platform/tenants/acme/resume", `{"reason":"paid"}`); status != http.StatusOK {
		t.Fatalf("resume: %d %s", status, raw)
	}
	for name, base := range servers {
		waitUntil(t, 2*time.Second, func() bool {
			st, _, _ := apiCall(t, nil, base, tenantToken(t, "acme"), http.MethodPost, "/v1/orders", `{"customer_id":"c-1","currency":"EUR"}`)
			return st == http.StatusCreated
		}, "server "+name+" serves the resumed tenant")
	}
}

// TestTenantUnknownRefused: with the directory required a tenant not in it
// gets 403 tenant_unknown on commands and queries; with the setting off it
// is served as before. The development banner's tenant is provisioned by
// serve, so its printed curl works on a new installation.
func TestTenantUnknownRefused(t *testing.T) {
	for _, required := range []bool{true, false} {
		t.Run(fmt.Sprintf("required=%v", required), func(t *testing.T) {
			vars := directoryVars(t, pgtest.NewDatabase(t))
			vars["STRATA_REQUIRE_TENANT_DIRECTORY"] = fmt.Sprint(required)
			base, _, stop := startServe(t, vars)
			defer stop()
			waitReady(t, base)
			cmd, _, _ := apiCall(t, nil, base, tenantToken(t, "ghost"), http.MethodPost, "/v1/orders", `{"customer_id":"c-1","currency":"EUR"}`)
			query, body, _ := apiCall(t, nil, base, tenantToken(t, "ghost"), http.MethodGet, "/v1/orders", "")
			if required && (cmd != http.StatusForbidden || query != http.StatusForbidden || errorCode(body) != "tenant_unknown") {
				t.Fatalf("unknown tenant with the directory required: command %d, query %d %s", cmd, query, body)
			}
			if !required && (cmd != http.StatusCreated || query != http.StatusOK) {
				t.Fatalf("unknown tenant with the directory off: command %d, query %d %s", cmd, query, body)
			}
		})
	}
	t.Run("banner", func(t *testing.T) {
		// No STRATA_JWT_SECRET: the development secret and its banner token.
		vars := map[string]string{"DATABASE_URL": pgtest.NewDatabase(t), "STRATA_DATA_DIR": t.TempDir(), "STRATA_LOG_LEVEL": "warn",
			"STRATA_REQUIRE_TENANT_DIRECTORY": "true"}
		_, banner, stop := startServe(t, vars)
		defer stop()
		var curl string
		for _, l := range banner {
			if strings.HasPrefix(strings.TrimSpace(l), "curl ") {
				curl = strings.TrimSpace(l)
			}
		}
		res, err := http.DefaultClient.Do(parseCurl(t, curl))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusCreated {
			t.Fatalf("the banner's curl answered %d on a new installation", res.StatusCode)
		}
	})
}

// TestTenantPlatformRoutesNeedThePlatformScope: an admin token and a plain
// tenant token are refused (403 forbidden), each refusal in tenant_audit
// as "refused" up to the subject's throttle (issue 29, finding 12); the
// platform token's every call is in tenant_audit with who, what and which
// tenant.
func TestTenantPlatformRoutesNeedThePlatformScope(t *testing.T) {
	url := pgtest.NewDatabase(t)
	base, _, stop := startServe(t, directoryVars(t, url))
	defer stop()
	waitReady(t, base)
	provisionOver(t, base, "acme")
	want := []string{"api:ops@ops provision acme true"}
	recorded := map[string]int{}
	for _, tok := range []struct{ token, subject string }{{tenantToken(t, "acme", auth.ScopeAdmin), "api:ops@acme"}, {tenantToken(t, "acme"), "api:ops@acme"},
		{tenantToken(t, "ops", auth.ScopeAdmin), "api:ops@ops"}} {
		for _, c := range []struct{ method, path, body, tenant string }{
			{http.MethodGet, "/v1/platform/tenants", "", "-"},
			{http.MethodGet, "/v1/platform/tenants/acme", "", "acme"},
			{http.MethodPost, "/v1/platform/tenants", `{"id":"evil"}`, "-"},
			{http.MethodPost, "/v1/platform/tenants/acme/suspend", `{"reason":"x"}`, "acme"},
			{http.MethodPost, "/v1/platform/tenants/acme/resume", `{"reason":"x"}`, "acme"},
			{http.MethodPut, "/v1/platform/tenants/acme/quotas", `{}`, "acme"},
		} {
			st, body, _ := apiCall(t, nil, base, tok.token, c.method, c.path, c.body)
			if st != http.StatusForbidden || errorCode(body) != "forbidden" {
				t.Errorf("%s %s without the platform scope: %d %s", c.method, c.path, st, body)
			}
			if recorded[tok.subject] < platformapi.RefusalBurst { // the test takes well under RefusalRefill
				recorded[tok.subject]++
				want = append(want, tok.subject+" refused "+c.tenant+" true")
			}
		}
	}
	calls := []struct{ method, path, body string }{
		{http.MethodGet, "/v1/platform/tenants", ""},
		{http.MethodGet, "/v1/platform/tenants/acme", ""},
		{http.MethodPost, "/v1/platform/tenants/acme/suspend", `{"reason":"audit me"}`},
		{http.MethodPost, "/v1/platform/tenants/acme/resume", ""},
		{http.MethodPut, "/v1/platform/tenants/acme/quotas", `{"rate_queries":"50/s"}`},
	}
	for _, c := range calls {
		if st, body := platformCall(t, base, c.method, c.path, c.body); st != http.StatusOK {
			t.Fatalf("%s %s: %d %s", c.method, c.path, st, body)
		}
	}
	if st, body := platformCall(t, base, http.MethodGet, "/v1/platform/tenants/nobody", ""); st != http.StatusNotFound {
		t.Fatalf("show of an unknown tenant: %d %s", st, body)
	}
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(context.Background(), `SELECT subject || ' ' || action || ' ' || coalesce(tenant, '-') || ' ' || (request_id IS NOT NULL)::text
		FROM strata.tenant_audit WHERE subject LIKE 'api:%' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, "api:ops@ops list - true", "api:ops@ops show acme true", "api:ops@ops suspend acme true",
		"api:ops@ops resume acme true", "api:ops@ops set_quotas acme true", "api:ops@ops show nobody true")
	if !slices.Equal(got, want) {
		t.Fatalf("tenant_audit:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestTenantQuotasChangeAtRunTime: a quota set in the directory changes
// the tenant's rate limit on every serving process without a restart.
func TestTenantQuotasChangeAtRunTime(t *testing.T) {
	url := pgtest.NewDatabase(t)
	base, _, stop := startServe(t, directoryVars(t, url))
	defer stop()
	waitReady(t, base)
	provisionOver(t, base, "acme")
	provisionOver(t, base, "beta")
	query := func(tenant string) int {
		st, _, _ := apiCall(t, nil, base, tenantToken(t, tenant), http.MethodGet, "/v1/orders", "")
		return st
	}
	for i := 0; i < 20; i++ {
		if st := query("acme"); st != http.StatusOK {
			t.Fatalf("query %d under the default rate: %d", i, st)
		}
	}
	if st, body := platformCall(t, base, http.MethodPut, "/v1/platform/tenants/acme/quotas", `{"rate_queries":"1/h,burst=3"}`); st != http.StatusOK {
		t.Fatalf("set quotas: %d %s", st, body)
	}
	waitUntil(t, 2*time.Second, func() bool { return query("acme") == http.StatusTooManyRequests }, "the new rate limits acme")
	if st := query("beta"); st != http.StatusOK {
		t.Fatalf("beta under its own rate: %d", st)
	}
	if st, body := platformCall(t, base, http.MethodPut, "/v1/platform/tenants/acme/quotas", `{"rate_queries":"unlimited"}`); st != http.StatusOK {
		t.Fatalf("set quotas: %d %s", st, body)
	}
	waitUntil(t, 2*time.Second, func() bool { return query("acme") == http.StatusOK }, "the lifted rate serves acme again")
}

// TestTenantsCLI drives `strata tenants` against the database: provision,
// list, show, suspend, resume and quotas, as text and JSON.
func TestTenantsCLI(t *testing.T) {
	url := pgtest.NewDatabase(t)
	vars := map[string]string{"DATABASE_URL": url, "STRATA_DATA_DIR": t.TempDir(), "STRATA_RATE_OVERRIDES": "acme:commands=7/s"}
	if code := run(context.Background(), []string{"migrate", "up"}, testEnv(vars), &bytes.Buffer{}, &bytes.Buffer{}); code != exitOK {
		t.Fatal("migrate up failed")
	}
	cli := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := run(context.Background(), append([]string{"tenants"}, args...), testEnv(vars), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	code, out, errOut := cli("provision", "acme", "--name", "Acme Corp", "--json")
	if code != exitOK {
		t.Fatalf("provision: %d %s", code, errOut)
	}
	var v struct {
		Status       string            `json:"status"`
		Name         string            `json:"name"`
		StepsPending []string          `json:"steps_pending"`
		Quotas       map[string]string `json:"quotas"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.Status != "active" || v.Name != "Acme Corp" || len(v.StepsPending) != 0 || v.Quotas["rate_commands"] != "7/s,burst=7" {
		t.Fatalf("provision --json: %v %s", err, out)
	}
	if code, _, errOut := cli("suspend", "acme"); code != exitUsage || !strings.Contains(errOut, "--reason") {
		t.Fatalf("suspend without a reason: %d %s", code, errOut)
	}
	if code, out, errOut := cli("suspend", "acme", "--reason", "unpaid"); code != exitOK || !strings.Contains(out, "suspended (unpaid)") {
		t.Fatalf("suspend: %d %s %s", code, out, errOut)
	}
	if code, out, _ := cli("list"); code != exitOK || !strings.Contains(out, "acme") || !strings.Contains(out, "suspended") || !strings.Contains(out, "4/4") {
		t.Fatalf("list: %d %s", code, out)
	}
	if code, out, errOut := cli("resume", "acme", "--reason", "paid", "--json"); code != exitOK || !strings.Contains(out, `"status": "active"`) {
		t.Fatalf("resume: %d %s %s", code, out, errOut)
	}
	if code, out, errOut := cli("quotas", "acme", "rate_queries=5/s", "rate_commands="); code != exitOK || !strings.Contains(out, "rate_queries=5/s") || strings.Contains(out, "rate_commands") {
		t.Fatalf("quotas: %d %s %s", code, out, errOut)
	}
	if code, _, errOut := cli("quotas", "acme", "rate_queries=fast"); code != exitUsage {
		t.Fatalf("bad quota: %d %s", code, errOut)
	}
	if code, _, errOut := cli("show", "nobody"); code != exitFailure || !strings.Contains(errOut, "no such tenant") {
		t.Fatalf("show of an unknown tenant: %d %s", code, errOut)
	}
	if code, out, _ := cli("show", "acme"); code != exitOK || !strings.Contains(out, "activate 20") {
		t.Fatalf("show: %d %s", code, out)
	}
}

func waitUntil(t *testing.T, within time.Duration, ok func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
