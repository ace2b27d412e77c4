package cli

// Browser tests of the operator's console (docs/console.md): Debian's
// Chromium, headless, driven over the DevTools protocol by chromedp,
// against a real `strata serve` on a real PostgreSQL. Every wait is for a
// condition of the page's DOM (or of the API) with a timeout, never a
// sleep. Screenshots (full page, PNG) go to test-artifacts/console/ at the
// repository root, named by what they show.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/internal/pgtest"
)

// consoleArtifacts is where the browser tests put their screenshots
// (README "Console"), relative to this package's directory.
const consoleArtifacts = "../test-artifacts/console"

// chromiumPath finds Debian's chromium; a machine without it fails the
// test with what to run (it never skips: the console would go untested).
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/chromium"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	t.Fatal("the console's browser tests need Debian's chromium at /usr/bin/chromium: run `make deps` (as root it installs it with apt-get)")
	return ""
}

// browser is one headless Chromium tab of a test.
type browser struct {
	t    *testing.T
	ctx  context.Context
	name string // the test's prefix of screenshot names
	shot int
}

func newBrowser(t *testing.T, name string) *browser {
	t.Helper()
	path := chromiumPath(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // the tests may run as root (CI does); the page is our own
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900),
		chromedp.UserDataDir(t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	// The first action starts the browser, bound to ctx (not to a step's
	// timeout).
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium (%s): %v", path, err)
	}
	if err := os.MkdirAll(consoleArtifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	old, _ := filepath.Glob(filepath.Join(consoleArtifacts, name+"-*.png")) // an earlier run's
	for _, f := range old {
		os.Remove(f)
	}
	return &browser{t: t, ctx: ctx, name: name}
}

// do runs steps within 40 s; a failure saves a screenshot of the page as
// it was and fails the test.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 40*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.screenshot("FAILED-" + strings.ReplaceAll(what, " ", "-"))
		b.t.Fatalf("%s: %v (the page: %s)", what, err, b.text("document.body.innerText"))
	}
}

// until waits for a JavaScript condition of the page to hold.
func (b *browser) until(what, expr string) {
	b.t.Helper()
	b.do(what, chromedp.Action[chromedp.Void](func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(30*time.Second))(ctx, t)
		return chromedp.Void{}, err
	}))
}

// text evaluates a string expression in the page ("" on failure).
func (b *browser) text(expr string) string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return s
}

// screenshot saves the whole page as NN-<test>-<what>.png.
func (b *browser) screenshot(what string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Errorf("screenshot %s: %v", what, err)
		return
	}
	b.shot++
	name := filepath.Join(consoleArtifacts, fmt.Sprintf("%s-%02d-%s.png", b.name, b.shot, what))
	if err := os.WriteFile(name, png, 0o644); err != nil {
		b.t.Errorf("screenshot %s: %v", what, err)
		return
	}
	b.t.Logf("screenshot %s", name)
}

// has is a JavaScript condition: the element matching sel exists and its
// text contains s.
func has(sel, s string) string {
	q, _ := json.Marshal(sel)
	v, _ := json.Marshal(s)
	return fmt.Sprintf(`(() => { const e = document.querySelector(%s); return !!e && e.textContent.includes(%s); })()`, q, v)
}

// is is a JavaScript condition: the element matching sel exists and its
// text, trimmed, is s.
func is(sel, s string) string {
	q, _ := json.Marshal(sel)
	v, _ := json.Marshal(s)
	return fmt.Sprintf(`(() => { const e = document.querySelector(%s); return !!e && e.textContent.trim() === %s; })()`, q, v)
}

// consoleLogin runs `strata token --console` as an operator would and
// returns the login URL it prints.
func consoleLogin(t *testing.T, vars map[string]string, base string, args ...string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), append([]string{"token", "--console", "--addr", u.Host}, args...), testEnv(vars), &out, &errb); code != exitOK {
		t.Fatalf("strata token --console: %d %s", code, errb.String())
	}
	login := strings.TrimSpace(out.String())
	if !strings.HasPrefix(login, base+"/console/#token=") {
		t.Fatalf("strata token --console printed %q, want %s/console/#token=...", login, base)
	}
	return login
}

// TestConsoleDeadLetterRetryAndRebuild: log in through the URL of `strata
// token --console`; a poison event (a line added to an order that, as far
// as order_details knows, was never created: its row was deleted by
// mistake) parks order_details' stream; the page shows the dead letter
// and a retry that fails again; once the cause is fixed (the row
// restored) a retry from the page applies it; the projection shows no
// parked stream and no lag; a rebuild started from the page finishes; the
// audit page shows who did it.
func TestConsoleDeadLetterRetryAndRebuild(t *testing.T) {
	b := newBrowser(t, "deadletters")
	dbURL := pgtest.NewDatabase(t)
	vars := directoryVars(t, dbURL)
	vars["STRATA_PROJECTION_RETRY_ATTEMPTS"] = "1" // park on the first failure
	base, _, stop := startServe(t, vars)
	defer stop()
	waitReady(t, base)
	provisionOver(t, base, "acme")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	acme := tenantToken(t, "acme", auth.ScopeAdmin)
	command := func(path, body string) {
		t.Helper()
		if st, raw, _ := apiCall(t, nil, base, acme, http.MethodPost, path, body); st != http.StatusCreated && st != http.StatusOK {
			t.Fatalf("POST %s: %d %s", path, st, raw)
		}
	}

	// The order is created and projected; then its order_details row is
	// deleted by mistake (kept aside, as a backup would), so that the
	// next line added to it is a poison event for order_details.
	command("/v1/orders", `{"order_id":"ghost","customer_id":"c-1","currency":"EUR"}`)
	waitUntil(t, 15*time.Second, func() bool {
		st, _, _ := apiCall(t, nil, base, acme, http.MethodGet, "/v1/orders/ghost", "")
		return st == http.StatusOK
	}, "the order is projected")
	if _, err := conn.Exec(ctx, `CREATE TEMP TABLE saved_order AS SELECT * FROM strata.order_details WHERE tenant_id = 'acme' AND order_id = 'ghost'`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `DELETE FROM strata.order_details WHERE tenant_id = 'acme' AND order_id = 'ghost'`); err != nil {
		t.Fatal(err)
	}
	command("/v1/orders/ghost/lines", `{"product_id":"p-1","quantity":1,"unit_price":{"amount":100,"currency":"EUR"}}`)

	login := consoleLogin(t, vars, base, "--tenant", "acme", "--scope", "admin", "--sub", "alice")
	b.do("open the login URL", chromedp.Navigate(login))
	b.until("the projections page after login", `document.querySelector('#projections tr[data-projection="order_details"] td[data-col="state"]')?.textContent !== ''`)
	if h := b.text("location.hash"); strings.Contains(h, "token") {
		t.Fatalf("the token stayed in the address bar: %q", h)
	}
	if s := b.text(`sessionStorage.getItem('strata.console.token') || ''`); s == "" || login != base+"/console/#token="+s {
		t.Fatalf("the token was not kept in sessionStorage: %q", s)
	}
	b.until("order_details shows its parked stream", is(`#projections tr[data-projection="order_details"] td[data-col="parked"]`, "1"))
	b.until("order_details shows its dead letter", has(`#projections tr[data-projection="order_details"] td[data-col="letters"]`, "1 parked"))
	b.screenshot("projections-order-details-parked")

	b.do("open the dead letters of order_details", chromedp.Click(`#projections tr[data-projection="order_details"] td[data-col="letters"] a`))
	b.until("the dead letter is listed", has("#dead-letters tbody", "order-ghost"))
	b.screenshot("dead-letters-list")
	b.do("open the letter", chromedp.Click(`#dead-letters tbody a`))
	b.until("the letter's page", has("#letter-error", "order"))
	if s := b.text(`document.querySelector('#letter').textContent`); !strings.Contains(s, "parked") || !strings.Contains(s, "order.line_added") {
		t.Fatalf("the letter page lacks its status or type: %q", s)
	}
	b.screenshot("dead-letter-detail")

	// At 200 % zoom (half the CSS width) nothing runs off the page.
	b.do("zoom to 200 %", chromedp.EmulateViewport(640, 900, chromedp.EmulateScale(2)))
	if s := b.text(`String(document.documentElement.scrollWidth <= window.innerWidth) + ' ' + document.documentElement.scrollWidth + ' ' + window.innerWidth`); !strings.HasPrefix(s, "true") {
		t.Errorf("at 200 %% zoom the page is wider than the window (scrollWidth, innerWidth): %s", s)
	}
	b.screenshot("dead-letter-detail-200-percent")
	b.do("zoom back", chromedp.EmulateViewport(1280, 900))

	// A retry before the cause is fixed: the page says it failed again.
	b.do("retry the letter", chromedp.Click("#retry-one"))
	b.until("the retry's result", has("#retry-summary", "applied 0 event(s); 1 stream(s) still parked"))
	b.screenshot("retry-fails-again")

	// The fix: the order's row is restored; the retry applies the line.
	if _, err := conn.Exec(ctx, `INSERT INTO strata.order_details SELECT * FROM saved_order`); err != nil {
		t.Fatal(err)
	}
	b.do("retry the stream", chromedp.Click("#retry-stream"))
	b.until("the retry applied the line", has("#retry-summary", "applied 1 event(s); 0 stream(s) still parked")+" && "+has("#retry-result", "unparked")+" && "+
		has("#letter", "retried"))
	b.screenshot("retry-applied")
	if st, body, _ := apiCall(t, nil, base, acme, http.MethodGet, "/v1/orders/ghost", ""); st != http.StatusOK || !strings.Contains(string(body), `"p-1"`) {
		t.Fatalf("the order after the retry: %d %s", st, body)
	}

	// Lag, deterministically: a transaction holds the order's row, so
	// order_details cannot apply the next line; the page shows it behind,
	// then caught up once the transaction ends.
	b.do("back to the projections", chromedp.Navigate(base+"/console/#/projections"))
	hold, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(ctx)
	if _, err := hold.Exec(ctx, `SELECT 1 FROM strata.order_details WHERE tenant_id = 'acme' AND order_id = 'ghost' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	command("/v1/orders/ghost/lines", `{"product_id":"p-2","quantity":1,"unit_price":{"amount":50,"currency":"EUR"}}`)
	b.until("order_details is behind", `Number(document.querySelector('#projections tr[data-projection="order_details"] td[data-col="lag_events"]')?.textContent) > 0`)
	b.screenshot("projections-lag-behind")
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	b.until("no parked stream, no dead letter, no lag", is(`#projections tr[data-projection="order_details"] td[data-col="parked"]`, "0")+` && `+
		is(`#projections tr[data-projection="order_details"] td[data-col="letters"]`, "0")+` && `+
		is(`#projections tr[data-projection="order_details"] td[data-col="lag_events"]`, "0"))
	b.screenshot("projections-lag-zero")

	// A rebuild "from" a malformed token: the API's error message shows.
	b.do("a rebuild from a malformed token",
		chromedp.SetValue("#rebuild-projection", "order_details"), chromedp.SetValue("#rebuild-scope", "from"),
		chromedp.SendKeys("#rebuild-from", "not-a-token"), chromedp.Click("#rebuild-start"))
	b.until("the error", has("#rebuild-job", "error: from must be a consistency token"))
	b.screenshot("rebuild-error-shown")
	// The rebuild of the tenant's rows, started by keyboard.
	b.do("start a rebuild", chromedp.SetValue("#rebuild-scope", "tenant"), chromedp.Focus("#rebuild-start"), chromedp.KeyEvent("\r"))
	b.until("the rebuild finishes", `document.querySelector('#rebuild-job')?.dataset.state === 'done'`)
	b.screenshot("rebuild-done")

	// A second poison, discarded with a reason from the page.
	if _, err := conn.Exec(ctx, `DELETE FROM strata.order_details WHERE tenant_id = 'acme' AND order_id = 'ghost'`); err != nil {
		t.Fatal(err)
	}
	command("/v1/orders/ghost/lines", `{"product_id":"p-3","quantity":1,"unit_price":{"amount":10,"currency":"EUR"}}`)
	waitUntil(t, 15*time.Second, func() bool {
		_, body, _ := apiCall(t, nil, base, acme, http.MethodGet, "/v1/admin/dead-letters?projection=order_details", "")
		return strings.Contains(string(body), `"status":"parked"`)
	}, "the second poison is parked")
	b.do("the parked letters", chromedp.Navigate(base+"/console/#/dead-letters?projection=order_details"))
	b.until("the new letter is listed", `document.querySelectorAll('#dead-letters tbody a').length === 1`)
	b.do("open it", chromedp.Click(`#dead-letters tbody a`))
	b.until("its page", has("#letter", "parked"))
	b.do("discard it", chromedp.SendKeys("#discard-reason", "the order's row is gone for good"), chromedp.Click("#discard"))
	b.until("discarded", has("#discard-result", "discarded by api:alice@acme: the order's row is gone for good")+" && "+has("#letter", "discarded"))
	b.screenshot("discarded")

	// The process managers' page answers (no process runs in this test:
	// an empty list, counted).
	b.do("open the process managers", chromedp.Navigate(base+"/console/#/processes"))
	b.until("the instances", has("#pm-instances", "0 instance(s)"))

	b.do("open who did what", chromedp.Navigate(base+"/console/#/audit"))
	b.until("the audit trail", has("#audit-admin-table", "retry")+" && "+has("#audit-admin-table", "rebuild")+" && "+
		has("#audit-admin-table", "discard")+" && "+has("#audit-admin-table", "alice"))
	b.until("the platform trail is refused without the platform scope", has("#audit-platform", "error:"))
	b.screenshot("audit")
}

// TestConsoleTenantsSuspendResume: the paste-a-token login; the tenants
// page lists the directory; beta is suspended (by keyboard) and resumed
// from the page, the API agrees each time, and the platform audit shows
// both calls.
func TestConsoleTenantsSuspendResume(t *testing.T) {
	b := newBrowser(t, "tenants")
	vars := directoryVars(t, pgtest.NewDatabase(t))
	base, _, stop := startServe(t, vars)
	defer stop()
	waitReady(t, base)
	provisionOver(t, base, "acme")
	provisionOver(t, base, "beta")

	login := consoleLogin(t, vars, base, "--tenant", "ops", "--scope", "admin,platform", "--sub", "bob")
	tok := login[strings.Index(login, "#token=")+len("#token="):]
	b.do("open the console without a token", chromedp.Navigate(base+"/console/#/tenants"))
	b.until("the login form", `!document.querySelector('#login').hidden`)
	b.screenshot("login-form")
	b.do("paste the token", chromedp.SendKeys("#login-token", tok), chromedp.Click(`#login-form button[type="submit"]`))
	b.until("the tenants", has(`#tenants tr[data-tenant="beta"]`, "active")+" && "+has(`#tenants tr[data-tenant="acme"]`, "active"))
	b.screenshot("tenants-list")

	status := func(id string) string {
		st, body, _ := apiCall(t, nil, base, tok, http.MethodGet, "/v1/platform/tenants/"+id, "")
		var v struct{ Status string }
		if st != http.StatusOK || json.Unmarshal(body, &v) != nil {
			t.Fatalf("GET tenant %s: %d %s", id, st, body)
		}
		return v.Status
	}
	b.do("suspend beta by keyboard", chromedp.SendKeys("#reason-beta", "chargeback"), chromedp.Focus("#suspend-beta"), chromedp.KeyEvent("\r"))
	b.until("beta is suspended", `document.querySelector('#tenants tr[data-tenant="beta"] [data-status]')?.dataset.status === 'suspended'`+" && "+has(`#tenants tr[data-tenant="beta"]`, "chargeback"))
	if s := status("beta"); s != "suspended" {
		t.Fatalf("the page shows beta suspended, the API says %q", s)
	}
	if s := status("acme"); s != "active" {
		t.Fatalf("suspending beta changed acme: %q", s)
	}
	b.screenshot("tenant-beta-suspended")
	if f := b.text(`document.activeElement ? document.activeElement.id : ''`); f != "resume-beta" {
		t.Errorf("after suspending, the keyboard focus is on %q, want the resume button", f)
	}
	b.do("resume beta by keyboard", chromedp.KeyEvent("\r"))
	b.until("beta is active again", `document.querySelector('#tenants tr[data-tenant="beta"] [data-status]')?.dataset.status === 'active'`)
	if s := status("beta"); s != "active" {
		t.Fatalf("the page shows beta resumed, the API says %q", s)
	}
	b.screenshot("tenant-beta-resumed")

	// An export of acme, followed to its archive; beta's erasure status
	// (it has none: the API's 404 message shows).
	b.do("export acme", chromedp.Click("#export-acme"))
	b.until("the export is done", `document.querySelector('#archive-acme') !== null`)
	b.screenshot("tenant-acme-exported")
	b.do("erasure of beta", chromedp.Click("#erasure-beta"))
	b.until("no erasure of beta", has("#tenant-result", "error:")+" && "+has("#tenant-result", "HTTP 404"))
	b.screenshot("tenant-beta-no-erasure")
	// No archive store in this installation: the API's 503 shows.
	b.do("archive of beta", chromedp.Click("#archive-status-beta"))
	b.until("no archive store", has("#tenant-result", "error:")+" && "+has("#tenant-result", "no archive store"))

	b.do("open who did what", chromedp.Navigate(base+"/console/#/audit"))
	b.until("the platform trail", has("#audit-platform-table", "suspend")+" && "+has("#audit-platform-table", "resume")+" && "+
		has("#audit-platform-table", "export_start")+" && "+has("#audit-platform-table", "api:bob@ops"))
	b.screenshot("audit-platform")
}
