package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/examples"
	"github.com/strata-es/strata/internal/pgembed"
	"github.com/strata-es/strata/internal/pgtest"
)

// TestPlacementsServeEachTenantFromItsDatabase: a second PostgreSQL
// cluster is added as the placement eu (`strata placements add` migrates
// it); one tenant is provisioned in the pool and one in eu. A serving
// process (command, query and projector roles) routes each tenant's
// commands, queries (read-your-writes by consistency token) and admin
// calls to its own database, runs the projections in both, and neither
// database holds a row of the other's tenant. Two processes, one of them
// projector-only, run eu's runners with one active under its lease.
func TestPlacementsServeEachTenantFromItsDatabase(t *testing.T) {
	poolURL, euURL, second, vars, cli := twoPlacements(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// Adding: migrated and registered; again is a no-op; the same name
	// with another URL, the pool's own database and a bad name are refused.
	if code, out, errOut := cli("placements", "add", "eu", "--url", euURL, "--note", "EU customers"); code != exitOK || !strings.Contains(out, "placement eu added") {
		t.Fatalf("placements add: %d %s %s", code, out, errOut)
	}
	if code, out, errOut := cli("placements", "add", "eu", "--url", euURL); code != exitOK || !strings.Contains(out, "already registered") {
		t.Fatalf("placements add again: %d %s %s", code, out, errOut)
	}
	if code, _, errOut := cli("placements", "add", "eu", "--url", second.URL()); code != exitFailure || !strings.Contains(errOut, "exists with another URL") {
		t.Fatalf("placements add eu with another URL: %d %s", code, errOut)
	}
	if code, _, errOut := cli("placements", "add", "self", "--url", poolURL); code != exitFailure || !strings.Contains(errOut, `the placement "pool"`) {
		t.Fatalf("placements add of the pool's own database: %d %s", code, errOut)
	}
	if code, _, errOut := cli("placements", "add", "EU!", "--url", euURL); code != exitFailure || !strings.Contains(errOut, "must match") {
		t.Fatalf("placements add with a bad name: %d %s", code, errOut)
	}

	// Tenants: acme in the pool, zeta in eu; an unknown placement is
	// refused, and provisioning cannot move a tenant.
	if code, _, errOut := cli("tenants", "provision", "acme"); code != exitOK {
		t.Fatalf("provision acme: %s", errOut)
	}
	if code, out, errOut := cli("tenants", "provision", "zeta", "--placement", "eu", "--json"); code != exitOK || !strings.Contains(out, `"placement": "eu"`) {
		t.Fatalf("provision zeta in eu: %d %s %s", code, out, errOut)
	}
	if code, _, errOut := cli("tenants", "provision", "nobody", "--placement", "mars"); code != exitFailure || !strings.Contains(errOut, `no placement "mars"`) {
		t.Fatalf("provision in an unknown placement: %d %s", code, errOut)
	}
	if code, _, errOut := cli("tenants", "provision", "acme", "--placement", "eu"); code != exitFailure || !strings.Contains(errOut, "tenants move") {
		t.Fatalf("provision moving acme: %d %s", code, errOut)
	}
	code, out, errOut := cli("placements", "list", "--json")
	var list struct {
		Placements []struct {
			Name, Status, URL, Note string
			Tenants                 int
		}
	}
	if code != exitOK || json.Unmarshal([]byte(out), &list) != nil || len(list.Placements) != 2 ||
		list.Placements[0].Name != "pool" || list.Placements[0].Tenants != 1 ||
		list.Placements[1].Name != "eu" || list.Placements[1].Tenants != 1 || list.Placements[1].Note != "EU customers" {
		t.Fatalf("placements list: %d %s %s", code, out, errOut)
	}

	vars["STRATA_RETENTION_INTERVAL"] = "300ms"
	base, _, stop := startServe(t, vars)
	defer stop()
	projector, _, stopProjector := startServe(t, vars, "--roles", "projector")
	defer stopProjector()
	waitReady(t, base)
	waitReady(t, projector)
	if status, raw, _ := apiCall(t, nil, base, "", http.MethodGet, "/readyz", ""); status != http.StatusOK || !strings.Contains(string(raw), `"placements":["pool","eu"]`) {
		t.Fatalf("readyz: %d %s", status, raw)
	}

	tokens, last := map[string]string{}, map[string]string{}
	for _, tenant := range []string{"acme", "zeta"} {
		tok, err := auth.Sign([]byte(tenantsSecret), auth.Claims{Subject: "ops", Tenant: domain.TenantID(tenant), Scopes: []string{auth.ScopeAdmin}}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		tokens[tenant] = tok
	}
	for i, tenant := range []string{"acme", "zeta", "zeta"} {
		id := tenant + "-o-" + string(rune('1'+i))
		status, raw, _ := apiCall(t, nil, base, tokens[tenant], http.MethodPost, "/v1/orders", `{"order_id":"`+id+`","customer_id":"c-1","currency":"EUR"}`)
		if status != http.StatusCreated {
			t.Fatalf("create %s for %s: %d %s", id, tenant, status, raw)
		}
		var created struct{ Position string }
		if err := json.Unmarshal(raw, &created); err != nil {
			t.Fatal(err)
		}
		status, raw, _ = apiCall(t, nil, base, tokens[tenant], http.MethodGet, "/v1/orders/"+id+"?wait=10s", "", "X-Consistency-Token", created.Position)
		if status != http.StatusOK || !strings.Contains(string(raw), `"order_id":"`+id+`"`) {
			t.Fatalf("read %s's own write %s: %d %s", tenant, id, status, raw)
		}
		// The same idempotency key again is answered from the record of
		// the tenant's own placement.
		status, raw, _ = apiCall(t, nil, base, tokens[tenant], http.MethodPost, "/v1/orders", `{"order_id":"`+id+`-k","customer_id":"c-1","currency":"EUR"}`, "Idempotency-Key", "k-"+id)
		status2, raw2, _ := apiCall(t, nil, base, tokens[tenant], http.MethodPost, "/v1/orders", `{"order_id":"`+id+`-k","customer_id":"c-1","currency":"EUR"}`, "Idempotency-Key", "k-"+id)
		if status != http.StatusCreated || status2 != status || !bytes.Equal(raw, raw2) {
			t.Fatalf("idempotent create for %s: %d %s, then %d %s", tenant, status, raw, status2, raw2)
		}
		if err := json.Unmarshal(raw, &created); err != nil {
			t.Fatal(err)
		}
		last[tenant] = created.Position
	}
	// Each tenant sees only its orders; the list of zeta is eu's.
	status, raw, _ := apiCall(t, nil, base, tokens["zeta"], http.MethodGet, "/v1/orders?wait=10s", "", "X-Consistency-Token", last["zeta"])
	if status != http.StatusOK || strings.Count(string(raw), `"order_id":"zeta-`) != 4 || strings.Contains(string(raw), "acme-") {
		t.Fatalf("zeta's orders: %d %s", status, raw)
	}
	// Admin calls are routed too: eu's projections all run, at the head.
	status, raw, _ = apiCall(t, nil, base, tokens["zeta"], http.MethodGet, "/v1/admin/projections", "")
	if status != http.StatusOK || strings.Count(string(raw), `"status":"running"`) != len(examples.All().Projections()) {
		t.Fatalf("zeta's admin view of projections: %d %s", status, raw)
	}

	// The databases: every event and read-model row where its tenant is.
	tenantsOf := func(url, table string) map[string]int {
		t.Helper()
		out := map[string]int{}
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		rows, err := conn.Query(ctx, `SELECT tenant_id, count(*) FROM strata.`+table+` GROUP BY tenant_id`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var tenant string
			var n int
			if err := rows.Scan(&tenant, &n); err != nil {
				t.Fatal(err)
			}
			out[tenant] = n
		}
		return out
	}
	for _, c := range []struct {
		url, table, tenant, other string
		want                      int
	}{
		{poolURL, "events", "acme", "zeta", 2},
		{euURL, "events", "zeta", "acme", 4},
		{poolURL, "idempotency_keys", "acme", "zeta", 1},
		{euURL, "idempotency_keys", "zeta", "acme", 2},
		{poolURL, "order_list", "acme", "zeta", 2},
		{euURL, "order_list", "zeta", "acme", 4},
	} {
		got := tenantsOf(c.url, c.table)
		if got[c.tenant] != c.want || got[c.other] != 0 {
			t.Errorf("%s in the %s database: %v, want %d of %s and none of %s", c.table, map[string]string{poolURL: "pool", euURL: "eu"}[c.url], got, c.want, c.tenant, c.other)
		}
	}

	// Status reads every placement as its serving logins.
	code, out, errOut = cli("placements", "status", "--json")
	var st struct {
		Placements []struct {
			Name        string
			Reachable   bool
			Schema      string
			Tenants     int
			Projections []struct {
				Name      string
				LagEvents int64 `json:"lag_events"`
			}
		}
	}
	if code != exitOK || json.Unmarshal([]byte(out), &st) != nil || len(st.Placements) != 2 {
		t.Fatalf("placements status: %d %s %s", code, out, errOut)
	}
	for _, p := range st.Placements {
		if !p.Reachable || p.Schema != "current" || p.Tenants != 1 || len(p.Projections) != len(examples.All().Projections()) {
			t.Errorf("placements status of %s: %+v", p.Name, p)
		}
		for _, r := range p.Projections {
			if r.LagEvents != 0 {
				t.Errorf("placement %s: projection %s lags %d events", p.Name, r.Name, r.LagEvents)
			}
		}
	}

	// The replay tool reaches a placement by name: eu's ledgers hold zeta
	// and not acme; the pool's (no --placement) the other way round.
	if code, out, errOut := cli("replay", "verify", "--placement", "eu", "--json"); code != exitOK || !strings.Contains(out, `"tenant": "zeta"`) || strings.Contains(out, `"tenant": "acme"`) {
		t.Errorf("replay verify --placement eu: %d %s %s", code, out, errOut)
	}
	if code, out, errOut := cli("replay", "verify", "--json"); code != exitOK || !strings.Contains(out, `"tenant": "acme"`) || strings.Contains(out, `"tenant": "zeta"`) {
		t.Errorf("replay verify on the pool: %d %s %s", code, out, errOut)
	}
	if code, out, errOut := cli("replay", "status", "--placement=eu", "--json"); code != exitOK || !strings.Contains(out, "order_details") {
		t.Errorf("replay status --placement=eu: %d %s %s", code, out, errOut)
	}
	if code, _, errOut := cli("replay", "status", "--placement", "mars"); code == exitOK || !strings.Contains(errOut, "mars") {
		t.Errorf("replay status --placement mars: %d %s", code, errOut)
	}

	// Retention runs per placement: an idempotency record of zeta in eu
	// past the 30-day default goes, its others stay (eu's job reads the
	// tenants placed there from the pool's directory).
	execOn(t, euURL, `UPDATE strata.idempotency_keys SET created_at = now() - interval '40 days' WHERE tenant_id = 'zeta' AND key = 'k-zeta-o-2'`)
	waitUntil(t, 20*time.Second, func() bool {
		var old, kept int64
		queryOn(t, euURL, `SELECT count(*) FILTER (WHERE key = 'k-zeta-o-2'), count(*) FILTER (WHERE key <> 'k-zeta-o-2') FROM strata.idempotency_keys WHERE tenant_id = 'zeta'`, nil, &old, &kept)
		return old == 0 && kept == 1
	}, "eu's retention job to delete zeta's expired idempotency record, and only it")
}

// twoPlacements migrates a test database (the pool) and starts a second
// PostgreSQL cluster with a database eu, not yet added; cli runs strata
// with vars.
func twoPlacements(t *testing.T) (poolURL, euURL string, second *pgembed.Server, vars map[string]string, cli func(args ...string) (int, string, string)) {
	t.Helper()
	poolURL = pgtest.NewDatabase(t)
	second = pgtest.StartPrivate(t, nil)
	execOn(t, second.URL(), `CREATE DATABASE eu`)
	euURL = second.URLFor("eu")
	vars = directoryVars(t, poolURL)
	cli = func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := run(context.Background(), args, testEnv(vars), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	if code, _, errOut := cli("migrate", "up"); code != exitOK {
		t.Fatalf("migrate up: %s", errOut)
	}
	return poolURL, euURL, second, vars, cli
}

// execOn runs one statement on url.
func execOn(t *testing.T, url, sql string) {
	t.Helper()
	withConn(t, url, func(ctx context.Context, conn *pgx.Conn) {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	})
}
