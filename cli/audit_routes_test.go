package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/internal/pgtest"
	"github.com/strata-es/strata/tenancy/platformapi"
)

type auditEntries struct {
	Entries []struct {
		ID      int64  `json:"id"`
		Subject string `json:"subject"`
		Action  string `json:"action"`
		Target  string `json:"target"`
		Tenant  string `json:"tenant"`
	} `json:"entries"`
}

// TestAuditRoutes: GET /v1/admin/audit answers the token's tenant's
// admin_audit only (row-level security), newest first, paged by before;
// GET /v1/platform/audit answers tenant_audit to the platform scope, one
// tenant's with ?tenant=, and records the read itself. Both refuse a token
// without their scope and malformed parameters. (Every answer is checked
// against openapi.json by startServe's watch.)
func TestAuditRoutes(t *testing.T) {
	base, _, stop := startServe(t, directoryVars(t, pgtest.NewDatabase(t)))
	defer stop()
	waitReady(t, base)
	provisionOver(t, base, "acme")
	provisionOver(t, base, "beta")
	acme, beta := tenantToken(t, "acme", auth.ScopeAdmin), tenantToken(t, "beta", auth.ScopeAdmin)
	get := func(tok, path string, want int) auditEntries {
		t.Helper()
		st, body, _ := apiCall(t, nil, base, tok, http.MethodGet, path, "")
		if st != want {
			t.Fatalf("GET %s: %d %s, want %d", path, st, body, want)
		}
		var out auditEntries
		if st == http.StatusOK {
			if err := json.Unmarshal(body, &out); err != nil {
				t.Fatal(err)
			}
		} else if errorCode(body) == "" {
			t.Fatalf("GET %s: %d without the error shape: %s", path, st, body)
		}
		return out
	}
	// Two audited admin actions in acme, one in beta (a retry with nothing
	// parked is refused, 409, but recorded first).
	for _, tok := range []string{acme, acme, beta} {
		if st, body, _ := apiCall(t, nil, base, tok, http.MethodPost, "/v1/admin/dead-letters/retry", `{"all":true}`); st != http.StatusConflict {
			t.Fatalf("retry all: %d %s", st, body)
		}
	}
	mine := get(acme, "/v1/admin/audit", http.StatusOK)
	if len(mine.Entries) != 2 || mine.Entries[0].Action != "retry" || mine.Entries[0].Subject != "ops" || mine.Entries[0].ID <= mine.Entries[1].ID {
		t.Fatalf("acme's trail: %+v", mine.Entries)
	}
	if theirs := get(beta, "/v1/admin/audit", http.StatusOK); len(theirs.Entries) != 1 {
		t.Fatalf("beta's trail: %+v", theirs.Entries)
	}
	page := get(acme, "/v1/admin/audit?limit=1", http.StatusOK)
	next := get(acme, "/v1/admin/audit?limit=1&before="+strconv.FormatInt(page.Entries[0].ID, 10), http.StatusOK)
	if len(page.Entries) != 1 || len(next.Entries) != 1 || next.Entries[0].ID != mine.Entries[1].ID {
		t.Fatalf("paging: %+v then %+v", page.Entries, next.Entries)
	}
	get(tenantToken(t, "acme"), "/v1/admin/audit", http.StatusForbidden)
	for _, q := range []string{"?limit=0", "?limit=1001", "?before=-1", "?tenant=beta"} {
		get(acme, "/v1/admin/audit"+q, http.StatusBadRequest)
	}

	ops := tenantToken(t, "ops", auth.ScopePlatform)
	all := get(ops, "/v1/platform/audit", http.StatusOK)
	provisions := map[string]bool{}
	for _, e := range all.Entries {
		if e.Action == "provision" {
			provisions[e.Tenant] = true
		}
	}
	if !provisions["acme"] || !provisions["beta"] {
		t.Fatalf("tenant_audit lacks the provisions: %+v", all.Entries)
	}
	one := get(ops, "/v1/platform/audit?tenant=acme", http.StatusOK)
	for _, e := range one.Entries {
		if e.Tenant != "acme" {
			t.Fatalf("?tenant=acme answered %+v", e)
		}
	}
	// Each read is recorded before it runs: the newest entry is this read,
	// the one before it the read of acme's entries.
	again := get(ops, "/v1/platform/audit?limit=2", http.StatusOK)
	if len(again.Entries) != 2 || again.Entries[0].Action != "audit_read" || again.Entries[0].Tenant != "" ||
		again.Entries[1].Action != "audit_read" || again.Entries[1].Tenant != "acme" {
		t.Fatalf("the reads of the trail are not recorded first: %+v", again.Entries)
	}
	get(acme, "/v1/platform/audit", http.StatusForbidden)
	for _, q := range []string{"?limit=0", "?tenant=Bad!", "?before=x", "?scope=all"} {
		get(ops, "/v1/platform/audit"+q, http.StatusBadRequest)
	}
}

// TestPlatformRefusalsAreAudited (issue 29, finding 12): a platform call
// refused before it ran is recorded in tenant_audit as "refused" with its
// caller, the tenant of its path, its route, status and error code (never
// a message): a verified token without the platform scope (403) and a
// platform caller's malformed path, body or query (400). A request with no
// verified identity (401) writes nothing, and one subject's flood of
// refusals writes at most platformapi.RefusalBurst rows (plus one per
// refill). Every entry's detail is a JSON object, export_start's included
// (it was null, against the OpenAPI document, which the watch checks).
func TestPlatformRefusalsAreAudited(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := pgtest.NewDatabase(t)
	base, _, stop := startServe(t, directoryVars(t, url))
	defer stop()
	waitReady(t, base)
	provisionOver(t, base, "acme")
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	type row struct {
		Subject, Action, Tenant string
		Detail                  map[string]any
	}
	var mark int64
	reset := func() {
		t.Helper()
		if err := conn.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM strata.tenant_audit`).Scan(&mark); err != nil {
			t.Fatal(err)
		}
	}
	since := func() []row {
		t.Helper()
		rows, err := conn.Query(ctx, `SELECT subject, action, coalesce(tenant, ''), detail FROM strata.tenant_audit WHERE id > $1 ORDER BY id`, mark)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
			var x row
			err := r.Scan(&x.Subject, &x.Action, &x.Tenant, &x.Detail)
			return x, err
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	call := func(tok, method, path, body string, want int) {
		t.Helper()
		if st, raw, _ := apiCall(t, nil, base, tok, method, path, body); st != want {
			t.Fatalf("%s %s: %d %s, want %d", method, path, st, raw, want)
		}
	}
	ops, acmeAdmin := tenantToken(t, "ops", auth.ScopePlatform), tenantToken(t, "acme", auth.ScopeAdmin)

	t.Run("unauthenticated", func(t *testing.T) {
		reset()
		forged, err := auth.Sign([]byte("another secret of at least thirty-two bytes"), auth.Claims{Subject: "x", Tenant: "acme", Scopes: []string{auth.ScopePlatform}}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		call("not-a-token", http.MethodGet, "/v1/platform/tenants", "", http.StatusUnauthorized)
		call(forged, http.MethodPost, "/v1/platform/tenants/acme/suspend", "", http.StatusUnauthorized)
		if got := since(); len(got) != 0 {
			t.Errorf("401s wrote audit rows: %+v", got)
		}
	})

	t.Run("refused", func(t *testing.T) {
		reset()
		call(acmeAdmin, http.MethodPost, "/v1/platform/tenants/acme/suspend", "", http.StatusForbidden)
		call(ops, http.MethodPut, "/v1/platform/tenants/acme/quotas", `{"unknown":1}`, http.StatusBadRequest)
		call(ops, http.MethodGet, "/v1/platform/tenants/Not_A_Tenant", "", http.StatusBadRequest)
		call(ops, http.MethodGet, "/v1/platform/audit?limit=0", "", http.StatusBadRequest)
		want := []struct {
			subject, tenant, route, method, code string
			status                               float64
		}{
			{"api:ops@acme", "acme", "platform.tenant.suspend", "POST", "forbidden", 403},
			{"api:ops@ops", "acme", "platform.tenant.quotas", "PUT", "invalid_request", 400},
			{"api:ops@ops", "", "platform.tenant", "GET", "invalid_request", 400},
			{"api:ops@ops", "", "platform.audit", "GET", "invalid_request", 400},
		}
		got := since()
		if len(got) != len(want) {
			t.Fatalf("%d rows for %d refusals: %+v", len(got), len(want), got)
		}
		for i, w := range want {
			g := got[i]
			if g.Action != "refused" || g.Subject != w.subject || g.Tenant != w.tenant || g.Detail["route"] != w.route || g.Detail["method"] != w.method ||
				g.Detail["code"] != w.code || g.Detail["status"] != w.status || g.Detail["message"] != nil {
				t.Errorf("row %d: %+v, want %+v", i, g, w)
			}
		}
	})

	t.Run("flood", func(t *testing.T) {
		reset()
		start := time.Now()
		for range 100 {
			call(acmeAdmin, http.MethodGet, "/v1/platform/tenants", "", http.StatusForbidden)
		}
		bound := platformapi.RefusalBurst + int(time.Since(start)/platformapi.RefusalRefill) + 1
		if got := since(); len(got) == 0 || len(got) > bound {
			t.Errorf("100 refusals of one subject wrote %d rows, want 1 to %d", len(got), bound)
		}
	})

	t.Run("detail is an object", func(t *testing.T) {
		call(ops, http.MethodPost, "/v1/platform/tenants/acme/exports", "", http.StatusAccepted)
		st, raw, _ := apiCall(t, nil, base, ops, http.MethodGet, "/v1/platform/audit?tenant=acme", "")
		var out struct {
			Entries []struct {
				Action string          `json:"action"`
				Detail json.RawMessage `json:"detail"`
			} `json:"entries"`
		}
		if err := json.Unmarshal(raw, &out); err != nil || st != http.StatusOK {
			t.Fatalf("%d %s %v", st, raw, err)
		}
		seen := false
		for _, e := range out.Entries {
			seen = seen || e.Action == "export_start"
			if len(e.Detail) == 0 || e.Detail[0] != '{' {
				t.Errorf("%s: detail %s is not an object", e.Action, e.Detail)
			}
		}
		if !seen {
			t.Errorf("no export_start entry: %s", raw)
		}
	})
}
