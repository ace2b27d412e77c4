package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/strata-es/strata/auth"
)

// strata token --console prints a login URL whose token rides in the
// fragment, short-lived by default, with the console's defaults (tenant
// demo, admin scope) and the flags' values when given; --json prints the
// same as JSON.
func TestTokenConsoleURL(t *testing.T) {
	vars := map[string]string{"STRATA_JWT_SECRET": "token-console-test-secret-0123456789abcdef", "STRATA_ADDR": "0.0.0.0:9999"}
	v, err := auth.NewVerifier([]byte(vars["STRATA_JWT_SECRET"]), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args        []string
		base        string
		tenant      string
		scopes      []string
		ttl         time.Duration
		crossTenant bool
	}{
		{[]string{"--console"}, "http://127.0.0.1:9999", devTenant, []string{auth.ScopeAdmin}, consoleTTL, false},
		{[]string{"--console", "--addr", "ops.example:8443", "--tenant", "acme", "--scope", "admin,platform", "--ttl", "5m", "--cross-tenant"},
			"http://ops.example:8443", "acme", []string{auth.ScopeAdmin, auth.ScopePlatform}, 5 * time.Minute, true},
		{[]string{"--console", "--addr", "https://console.example/"}, "https://console.example", devTenant, []string{auth.ScopeAdmin}, consoleTTL, false},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), append([]string{"token"}, tc.args...), testEnv(vars), &out, &errb); code != exitOK {
			t.Fatalf("token %v: %d %s", tc.args, code, errb.String())
		}
		url := strings.TrimSpace(out.String())
		prefix := tc.base + "/console/#token="
		if !strings.HasPrefix(url, prefix) {
			t.Fatalf("token %v printed %q, want %s...", tc.args, url, prefix)
		}
		c, err := v.Parse(strings.TrimPrefix(url, prefix))
		if err != nil {
			t.Fatalf("token %v: the URL's token is refused: %v", tc.args, err)
		}
		if string(c.Tenant) != tc.tenant || strings.Join(c.Scopes, ",") != strings.Join(tc.scopes, ",") || c.CrossTenant != tc.crossTenant {
			t.Errorf("token %v: claims %+v", tc.args, c)
		}
		if d := time.Until(c.ExpiresAt); d > tc.ttl || d < tc.ttl-time.Minute {
			t.Errorf("token %v expires in %s, want %s", tc.args, d, tc.ttl)
		}
	}

	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"token", "--console", "--json"}, testEnv(vars), &out, &errb); code != exitOK {
		t.Fatalf("token --console --json: %d %s", code, errb.String())
	}
	var j struct {
		Token      string `json:"token"`
		ExpiresAt  string `json:"expires_at"`
		ConsoleURL string `json:"console_url"`
	}
	if err := json.Unmarshal(out.Bytes(), &j); err != nil || j.ConsoleURL != "http://127.0.0.1:9999/console/#token="+j.Token || j.ExpiresAt == "" {
		t.Fatalf("token --console --json: %v %s", err, out.String())
	}
	if code := run(context.Background(), []string{"token", "--console", "--addr", "nonsense"}, testEnv(vars), &out, &errb); code != exitUsage {
		t.Errorf("token --console --addr nonsense exited %d, want %d", code, exitUsage)
	}
}
