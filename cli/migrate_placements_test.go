package cli

import (
	"bytes"
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/examples"
	"github.com/strata-es/strata/module"
)

// TestMigrationsReachEveryPlacement (issue 32 §2): an upgrade adds a
// migration to a module's line. `strata migrate status` shows it pending
// in the control plane and in each placement; `strata migrate up`
// migrates the control plane and every placement, and one placement
// whose migration fails does not stop the others (exit 1, naming it).
// While that placement is behind, serve (without auto-migration) does not
// serve it: its tenant's requests get a 503 that says why, /readyz names
// it, and the other placement's tenant is served. Once the cause is gone,
// `migrate up` again resumes, and the placement is served at the next
// reload.
func TestMigrationsReachEveryPlacement(t *testing.T) {
	_, euURL, second, vars, cli := twoPlacements(t)
	execOn(t, second.URL(), `CREATE DATABASE ap`)
	apURL := second.URLFor("ap")
	for name, u := range map[string]string{"eu": euURL, "ap": apURL} {
		if code, _, errOut := cli("placements", "add", name, "--url", u); code != exitOK {
			t.Fatalf("placements add %s: %s", name, errOut)
		}
	}
	for tenant, where := range map[string]string{"zeta": "eu", "apex": "ap"} {
		if code, _, errOut := cli("tenants", "provision", tenant, "--placement", where); code != exitOK {
			t.Fatalf("provision %s in %s: %s", tenant, where, errOut)
		}
	}

	// The upgrade: a module whose line has a migration none has run.
	upgraded := append(examples.All(), module.Module{Name: "fleet", Codecs: func() []event.Codec { return nil },
		Migrations: &db.Line{Name: "fleet", FS: fstest.MapFS{
			"001_fleet_probe.up.sql":   {Data: []byte(`CREATE TABLE fleet_probe (id int PRIMARY KEY);`)},
			"001_fleet_probe.down.sql": {Data: []byte(`DROP TABLE fleet_probe;`)},
		}, Tables: []db.Table{db.GlobalTable("fleet_probe", "a test of fleet-wide migrations")}}})
	cliUp := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Run(context.Background(), args, testEnv(vars), &out, &errOut, upgraded...)
		return code, out.String(), errOut.String()
	}
	code, out, errOut := cliUp("migrate", "status")
	if code != exitOK || !strings.Contains(out, "fleet") || strings.Count(out, "1 migrations pending") != 2 {
		t.Fatalf("migrate status after the upgrade: %d\n%s%s", code, out, errOut)
	}

	// ap's migration fails (its table is there already): eu is migrated
	// all the same.
	execOn(t, apURL, `CREATE TABLE strata.fleet_probe (other text)`)
	code, out, errOut = cliUp("migrate", "up")
	if code != exitFailure || !strings.Contains(errOut, "1 of 2 placements not migrated (ap)") || !strings.Contains(out, "placement eu") {
		t.Fatalf("migrate up with ap failing: %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = cliUp("migrate", "status")
	if code != exitOK || !regexpLine(out, `^eu\s+active\s+current$`) || !regexpLine(out, `^ap\s+active\s+1 migrations pending`) {
		t.Fatalf("migrate status with ap behind: %d\n%s%s", code, out, errOut)
	}

	// serve refuses ap's tenant, says why, and serves eu's.
	vars["STRATA_AUTO_MIGRATE"] = "false"
	vars["STRATA_PLACEMENT_RELOAD"] = "300ms"
	base, _, stop := startServeOf(t, upgraded, vars)
	defer stop()
	tokens := map[string]string{}
	for _, tenant := range []string{"zeta", "apex"} {
		tok, err := auth.Sign([]byte(tenantsSecret), auth.Claims{Subject: "ops", Tenant: domain.TenantID(tenant), Scopes: []string{auth.ScopeAdmin}}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		tokens[tenant] = tok
	}
	create := func(tenant, id string) (int, string) {
		status, raw, _ := apiCall(t, nil, base, tokens[tenant], http.MethodPost, "/v1/orders", `{"order_id":"`+id+`","customer_id":"c-1","currency":"EUR"}`)
		return status, string(raw)
	}
	if status, raw := create("zeta", "z-1"); status != http.StatusCreated {
		t.Fatalf("zeta (eu, migrated): %d %s", status, raw)
	}
	if status, raw := create("apex", "a-1"); status != http.StatusServiceUnavailable || !strings.Contains(raw, "placement ap has an older schema") ||
		!strings.Contains(raw, "strata migrate up") {
		t.Fatalf("apex (ap, behind): %d %s", status, raw)
	}
	if status, raw, _ := apiCall(t, nil, base, "", http.MethodGet, "/readyz", ""); status != http.StatusServiceUnavailable ||
		!strings.Contains(string(raw), "placement ap") || !strings.Contains(string(raw), "migrate up") {
		t.Fatalf("readyz with ap behind: %d %s", status, raw)
	}

	// The cause gone, migrate up resumes; ap is served at the next reload.
	execOn(t, apURL, `DROP TABLE strata.fleet_probe`)
	if code, out, errOut := cliUp("migrate", "up"); code != exitOK || strings.Count(out, "schema current") != 2 {
		t.Fatalf("migrate up again: %d\n%s%s", code, out, errOut)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		status, raw := create("apex", "a-2")
		if status == http.StatusCreated {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("apex after ap was migrated: %d %s", status, raw)
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitReady(t, base)
}

// regexpLine reports whether a line of out matches pattern.
func regexpLine(out, pattern string) bool {
	re := regexp.MustCompile(pattern)
	for _, l := range strings.Split(out, "\n") {
		if re.MatchString(strings.TrimRight(l, " ")) {
			return true
		}
	}
	return false
}
