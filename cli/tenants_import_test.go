package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/strata-es/strata/internal/paysim"
	"github.com/strata-es/strata/internal/pgtest"
	"github.com/strata-es/strata/tenancy/portability"
	"github.com/strata-es/strata/tenancy/portability/archivetest"
)

// importCLI returns a migrated database's variables (no serve process:
// nothing runs the projections) and a runner of `strata tenants`.
func importCLI(t *testing.T) (map[string]string, func(args ...string) (int, string, string)) {
	t.Helper()
	url := pgtest.NewDatabase(t)
	vars := directoryVars(t, url)
	if code := run(context.Background(), []string{"migrate", "up"}, testEnv(vars), &bytes.Buffer{}, &bytes.Buffer{}); code != exitOK {
		t.Fatal("migrate up failed")
	}
	return vars, func(args ...string) (int, string, string) {
		t.Helper()
		var out, errb bytes.Buffer
		code := run(context.Background(), append([]string{"tenants"}, args...), testEnv(vars), &out, &errb)
		t.Logf("$ strata tenants %q => exit %d\n%s%s", args, code, out.String(), errb.String())
		return code, out.String(), errb.String()
	}
}

// writeArchive writes an archive into the test's directory.
func writeArchive(t *testing.T, a archivetest.Archive) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "archive.strata.tar.gz")
	if err := os.WriteFile(path, a.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// orderCreated is one order.created line of events.jsonl.
func orderCreated(ord int, id string) string {
	return fmt.Sprintf(`{"ordinal":%d,"stream":"order-%s","version":1,"event_id":"00000000-0000-4000-8000-%012d","type":"order.created","schema_version":1,`+
		`"data":{"order_id":%q,"customer_id":"c-1","currency":"EUR","at":"2026-01-01T00:00:00Z"},"metadata":{},"recorded_at":"2026-01-01T00:00:00Z"}`, ord, id, ord, id)
}

// TestTenantImportSaysWhatItCommitted (issue 29, finding 10): with no
// projector running, `import --wait` cannot verify the read models; the
// events are committed and the tenant served all the same, and the
// command says so, with its own exit code, instead of failing as if
// nothing had happened. A retry is refused as "not empty" and says the
// tenant already holds this archive.
func TestTenantImportSaysWhatItCommitted(t *testing.T) {
	_, cli := importCLI(t)
	file := writeArchive(t, archivetest.Archive{Tenant: "acme", Files: archivetest.Minimal(orderCreated(1, "a"), orderCreated(2, "b"))})
	code, out, errOut := cli("import", file, "--wait", "1s")
	if code != exitUnverified {
		t.Errorf("import --wait with no projector: exit %d, want %d (imported, not verified)", code, exitUnverified)
	}
	all := out + errOut
	for _, want := range []string{"imported 2 events into acme", "did not catch up within 1s", "the tenant is served", "strata replay status"} {
		if !strings.Contains(all, want) {
			t.Errorf("the output does not say %q:\n%s", want, all)
		}
	}
	code, _, errOut = cli("import", file, "--wait", "0")
	if code != exitFailure || !strings.Contains(errOut, "not empty") || !strings.Contains(errOut, "already imported") || !strings.Contains(errOut, "exactly this archive's 2 events") {
		t.Errorf("a retry: exit %d %s; want a refusal saying the tenant already holds this archive", code, errOut)
	}
	code, out, _ = cli("import", file, "--tenant", "acme-2", "--wait", "1s", "--json")
	var res portability.ImportResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != exitUnverified || !res.Complete || res.CaughtUp || res.Events != 2 {
		t.Errorf("import --json with no projector: exit %d, %+v %v", code, res, err)
	}
}

// TestTenantImportEscapesArchiveNames (issue 29, finding 15): nothing an
// archive names reaches the operator's terminal raw: a file name holding
// escape sequences is shown quoted.
func TestTenantImportEscapesArchiveNames(t *testing.T) {
	_, cli := importCLI(t)
	evil := "readmodels/\x1b]0;pwned\x07\x1b[31mred.jsonl"
	file := writeArchive(t, archivetest.Archive{Tenant: "acme", Files: append(archivetest.Minimal(orderCreated(1, "a")), archivetest.Entry(evil, `{}`))})
	for _, args := range [][]string{{"import", file, "--wait", "0"}, {"import", file, "--tenant", "acme-2", "--wait", "0", "--json"}} {
		_, out, errOut := cli(args...)
		if strings.ContainsAny(out+errOut, "\x1b\x07") {
			t.Errorf("%q printed a raw escape sequence:\n%q", args, out+errOut)
		}
		if !strings.Contains(out+errOut, `\x1b]0;pwned\a`) && !strings.Contains(out+errOut, `\x1b]0;pwned\x07`) && !strings.Contains(out+errOut, `\u001b]0;pwned\u0007`) {
			t.Errorf("%q does not show the name quoted:\n%s", args, out+errOut)
		}
	}
}

// TestTenantImportDoesNotReRunEffects (issue 29, findings 6 and 7): a
// tenant whose order was captured at the payment provider and fulfilled
// is exported and imported under a new tenant ID, with the process
// manager and the relay running. The copy's read models are built, but no
// process instance or step exists for it, the provider saw one capture,
// the copy's log holds the archive's events only, and the relay published
// none of them; their IDs are new.
func TestTenantImportDoesNotReRunEffects(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sim := paysim.Start(paysim.Config{Seed: 29})
	defer sim.Close()
	url := pgtest.NewDatabase(t)
	vars := directoryVars(t, url)
	for k, v := range map[string]string{"STRATA_PROCESSES": "all", "STRATA_PROCESS_POLL": "100ms", "STRATA_PAYMENT_PROVIDER": "http",
		"STRATA_PAYMENT_URL": sim.URL(), "STRATA_PAYMENT_HTTP_TIMEOUT": "2s", "STRATA_RELAY": "sql"} {
		vars[k] = v
	}
	base, _, stop := startServe(t, vars)
	defer stop()
	waitReady(t, base)
	provisionOver(t, base, "acme")
	call := func(tenant, method, path, body string) {
		t.Helper()
		if status, raw, _ := apiCall(t, nil, base, tenantToken(t, tenant), method, path, body); status >= 300 {
			t.Fatalf("%s %s %s: %d %s", tenant, method, path, status, raw)
		}
	}
	stage := func(tenant, id string) string {
		status, raw, _ := apiCall(t, nil, base, tenantToken(t, tenant), http.MethodGet, "/v1/orders/"+id+"/fulfilment", "")
		var f map[string]any
		if status != http.StatusOK || json.Unmarshal(raw, &f) != nil {
			return ""
		}
		s, _ := f["stage"].(string)
		return s
	}
	call("acme", "POST", "/v1/inventory/p-1/receive", `{"quantity":10}`)
	call("acme", "POST", "/v1/orders", `{"order_id":"o-1","customer_id":"c-1","currency":"EUR"}`)
	call("acme", "POST", "/v1/orders/o-1/lines", `{"product_id":"p-1","quantity":2,"unit_price":{"amount":210000,"currency":"EUR"}}`)
	call("acme", "POST", "/v1/orders/o-1/place", "")
	waitUntil(t, 30*time.Second, func() bool { return stage("acme", "o-1") == "completed" }, "o-1 captured and completed")
	if n := sim.Ledger().Captures("o-1"); n != 1 {
		t.Fatalf("captures of o-1 before the import: %d", n)
	}
	cli := func(args ...string) (int, string, string) {
		t.Helper()
		var out, errb bytes.Buffer
		code := run(ctx, append([]string{"tenants"}, args...), testEnv(vars), &out, &errb)
		t.Logf("$ strata tenants %q => exit %d\n%s%s", args, code, out.String(), errb.String())
		return code, out.String(), errb.String()
	}
	file := filepath.Join(t.TempDir(), "acme.strata.tar.gz")
	if code, _, errOut := cli("export", "acme", "--out", file, "--catch-up", "60s"); code != exitOK {
		t.Fatalf("export: %s", errOut)
	}
	archived := countEvents(t, url, "acme")
	if code, _, errOut := cli("import", file, "--tenant", "acme-copy", "--wait", "60s"); code != exitOK {
		t.Fatalf("import under a new tenant: %d %s", code, errOut)
	}
	waitServed(t, base, "acme-copy")
	// The read models are built from the imported history.
	if s := stage("acme-copy", "o-1"); s != "completed" {
		t.Errorf("the copy's fulfilment read model: stage %q, want completed", s)
	}
	status, raw, _ := apiCall(t, nil, base, tenantToken(t, "acme-copy"), http.MethodGet, "/v1/orders/o-1", "")
	if status != http.StatusOK || !strings.Contains(string(raw), `"paid"`) {
		t.Errorf("GET o-1 of the copy: %d %s", status, raw)
	}
	// Once the process runner and the relay are past the copy's events,
	// neither has acted on them.
	var head string
	queryOn(t, url, `SELECT tx_id::text || '/' || position FROM strata.events ORDER BY tx_id DESC, position DESC LIMIT 1`, nil, &head)
	waitUntil(t, 30*time.Second, func() bool {
		var at bool
		queryOn(t, url, `SELECT count(*) = 2 AND bool_and((pos_major, pos_minor) >= (split_part($1, '/', 1)::numeric, split_part($1, '/', 2)::numeric))
			FROM strata.projection_checkpoints WHERE projection = 'fulfilment' OR projection LIKE 'relay\_%'`, []any{head}, &at)
		return at
	}, "the fulfilment runner and the relay past the imported events")
	var instances, steps, published, sameIDs int64
	queryOn(t, url, `SELECT (SELECT count(*) FROM strata.process_instances WHERE tenant_id = 'acme-copy'), (SELECT count(*) FROM strata.process_steps WHERE tenant_id = 'acme-copy'),
		(SELECT count(*) FROM strata.watermill_strata_events WHERE metadata::jsonb->>'tenant' = 'acme-copy'),
		(SELECT count(*) FROM strata.events c JOIN strata.events a ON a.event_id = c.event_id AND a.tenant_id = 'acme' WHERE c.tenant_id = 'acme-copy')`, nil,
		&instances, &steps, &published, &sameIDs)
	if instances != 0 || steps != 0 {
		t.Errorf("the process manager acted on imported history: %d instances, %d steps of acme-copy", instances, steps)
	}
	if n := sim.Ledger().Captures("o-1"); n != 1 {
		t.Errorf("the provider saw %d captures of o-1, want 1: the import re-ran an external effect", n)
	}
	if n := countEvents(t, url, "acme-copy"); n != archived {
		t.Errorf("acme-copy holds %d events, the archive %d: something appended to the imported history", n, archived)
	}
	if published != 0 {
		t.Errorf("the relay published %d of acme-copy's imported events", published)
	}
	if sameIDs != 0 {
		t.Errorf("%d of acme-copy's events kept acme's event IDs", sameIDs)
	}
}

// TestTerminalSafe: what a terminal would interpret is escaped as %q
// does, C1 controls (a lone CSI, U+009B) included; text, newlines and
// tabs are left alone.
func TestTerminalSafe(t *testing.T) {
	for in, want := range map[string]string{
		"plain text: ü, 日本":        "plain text: ü, 日本",
		"two\nlines\tand a tab":    "two\nlines\tand a tab",
		"\x1b]0;pwned\x07":         `\x1b]0;pwned\a`,
		"csi \u009b31m red":        `csi \u009b31m red`,
		"del \x7f, bad \xff utf-8": `del \x7f, bad \ufffd utf-8`,
	} {
		if got := terminalSafe(in); got != want {
			t.Errorf("terminalSafe(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestByteSizeFlag: the import's size limits read as bytes or KiB, MiB,
// GiB, and print back the same way.
func TestByteSizeFlag(t *testing.T) {
	for in, want := range map[string]int64{"256KiB": 256 << 10, "1MiB": 1 << 20, "4GiB": 4 << 30, "1000": 1000} {
		var b byteSize
		if err := b.Set(in); err != nil || int64(b) != want || (b.String() != in && in != "1000") {
			t.Errorf("%s: %d %q %v", in, int64(b), b.String(), err)
		}
	}
	for _, in := range []string{"", "0", "-1KiB", "1TB", "lots"} {
		var b byteSize
		if err := b.Set(in); err == nil {
			t.Errorf("%q accepted as %d", in, int64(b))
		}
	}
}
