package cli

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/internal/pgtest"
)

// TestServeAdminWiring checks that serve mounts the replay routes (admin
// scope only) and exports strata_dead_letters per projection.
func TestServeAdminWiring(t *testing.T) {
	url := pgtest.NewDatabase(t)
	secret := "serve-admin-test-secret-0123456789abcdef"
	base, banner, stop := startServe(t, map[string]string{"DATABASE_URL": url, "STRATA_DATA_DIR": t.TempDir(), "STRATA_JWT_SECRET": secret,
		"STRATA_LOG_LEVEL": "warn", "STRATA_PROJECTION_RETRY_ATTEMPTS": "3", "STRATA_METRICS_ADDR": "127.0.0.1:0"})
	defer func() {
		if code := stop(); code != exitOK {
			t.Errorf("serve exited %d", code)
		}
	}()
	waitReady(t, base)
	get := func(path string, scopes ...string) (int, string) {
		t.Helper()
		tok, err := auth.Sign([]byte(secret), auth.Claims{Subject: "ops", Tenant: "acme", Scopes: scopes}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(raw)
	}
	if status, body := get("/v1/admin/dead-letters", auth.ScopeAdmin); status != http.StatusOK || !strings.Contains(body, `"dead_letters":[]`) {
		t.Errorf("dead letters: %d %s", status, body)
	}
	if status, _ := get("/v1/admin/dead-letters"); status != http.StatusForbidden {
		t.Errorf("dead letters without the admin scope: %d, want 403", status)
	}
	if status, body := get("/v1/admin/projections/order_list", auth.ScopeAdmin); status != http.StatusOK || !strings.Contains(body, `"dead_letters":0`) {
		t.Errorf("projection status: %d %s", status, body)
	}
	_, raw := scrape(t, banner)
	for _, want := range []string{`strata_dead_letters{projection="order_details"} 0`, `strata_projection_lag_events{projection="daily_revenue"}`} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
