package main

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"

	"github.com/strata-es/strata/internal/auth"
	"github.com/strata-es/strata/internal/pgtest"
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
