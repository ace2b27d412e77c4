package cli

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/strata-es/strata/internal/pgtest"
)

// scrape GETs the metrics URL that serve's banner names.
func scrape(t *testing.T, banner []string) (int, []byte) {
	t.Helper()
	u := metricsURL(banner)
	if u == "" {
		t.Fatalf("the banner names no metrics URL:\n%s", strings.Join(banner, "\n"))
	}
	res, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return res.StatusCode, raw
}

var metricsLine = regexp.MustCompile(`^metrics: (http://\S+/metrics) `)

func metricsURL(banner []string) string {
	for _, l := range banner {
		if m := metricsLine.FindStringSubmatch(l); m != nil {
			return m[1]
		}
	}
	return ""
}

// TestMetricsAddress: /metrics is not on the API's address (where anyone
// could read every tenant's traffic without a token), is off by default,
// and is served without authentication on STRATA_METRICS_ADDR.
func TestMetricsAddress(t *testing.T) {
	url := pgtest.NewDatabase(t)
	vars := map[string]string{"DATABASE_URL": url, "STRATA_DATA_DIR": t.TempDir(), "STRATA_LOG_LEVEL": "warn"}
	apiMetrics := func(base string) int {
		t.Helper()
		res, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}

	base, banner, stop := startServe(t, vars)
	if status := apiMetrics(base); status != http.StatusNotFound {
		t.Errorf("GET /metrics on the API address: %d, want 404", status)
	}
	if u := metricsURL(banner); u != "" {
		t.Errorf("metrics served at %s without STRATA_METRICS_ADDR", u)
	}
	if code := stop(); code != exitOK {
		t.Fatalf("serve exited %d", code)
	}

	vars["STRATA_METRICS_ADDR"] = "127.0.0.1:0"
	base, banner, stop = startServe(t, vars)
	defer stop()
	if status := apiMetrics(base); status != http.StatusNotFound {
		t.Errorf("GET /metrics on the API address with STRATA_METRICS_ADDR set: %d, want 404", status)
	}
	status, raw := scrape(t, banner)
	if status != http.StatusOK || !strings.Contains(string(raw), "# TYPE strata_rate_limited_total ") {
		t.Errorf("GET %s: %d %.300s", metricsURL(banner), status, raw)
	}
	if !strings.HasPrefix(metricsURL(banner), "http://127.0.0.1:") || metricsURL(banner) == base+"/metrics" {
		t.Errorf("metrics URL %s, API %s", metricsURL(banner), base)
	}
}
