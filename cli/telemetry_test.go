package cli

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/internal/pgtest"
)

// TestOneTraceFromRequestToProjection sends a command with tracing to an
// in-memory exporter and follows one trace: the HTTP server span, the
// command span and the append span share it, and the projection batch that
// applied the event links to it (the event's metadata carries the trace
// context; a batch applies events of many traces, so it links to each).
// It then checks /metrics: the series exist and no label is a tenant.
func TestOneTraceFromRequestToProjection(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	testSpanExporter = keepSpans{exp}
	t.Cleanup(func() { testSpanExporter = nil; otel.SetTracerProvider(noop.NewTracerProvider()) })

	url := pgtest.NewDatabase(t)
	dataDir := t.TempDir()
	const tenant = "tenant-canary-7"
	base, banner, stop := startServe(t, map[string]string{"DATABASE_URL": url, "STRATA_DATA_DIR": dataDir, "STRATA_LOG_LEVEL": "error",
		"STRATA_METRICS_ADDR": "127.0.0.1:0"})
	secret, err := auth.LoadOrCreateSecret(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := auth.Sign(secret, auth.Claims{Subject: "tracer", Tenant: tenant}, time.Hour)
	do := func(method, path, body string, hdr ...string) (int, []byte) {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, b
	}
	status, body := do("POST", "/v1/orders", `{"order_id":"traced-1","customer_id":"c-1","currency":"EUR"}`, "Idempotency-Key", "trace-key")
	if status != 201 {
		t.Fatalf("create: %d %s", status, body)
	}
	var created struct{ Position string }
	json.Unmarshal(body, &created) //nolint:errcheck
	// Read our write: the projections have applied the event.
	if status, body := do("GET", "/v1/orders/traced-1?wait=10s", "", "X-Consistency-Token", created.Position); status != 200 {
		t.Fatalf("query: %d %s", status, body)
	}
	do("POST", "/v1/orders", `{"order_id":"traced-1","customer_id":"c-1","currency":"EUR"}`, "Idempotency-Key", "trace-key") // a replay

	status, metrics := scrape(t, banner)
	if status != 200 {
		t.Fatalf("/metrics: %d", status)
	}
	if code := stop(); code != exitOK { // flushes the spans
		t.Fatalf("serve exited %d", code)
	}

	spans := exp.GetSpans()
	var traceID string
	for _, s := range spans {
		if s.Name == "POST order.create" {
			traceID = s.SpanContext.TraceID().String()
			break
		}
	}
	if traceID == "" {
		names := map[string]bool{}
		for _, s := range spans {
			names[s.Name] = true
		}
		t.Fatalf("no HTTP server span for the command among %d spans: %v", len(spans), names)
	}
	want := map[string]bool{"command order.create": false, "eventstore.append": false}
	linked := false
	for _, s := range spans {
		if _, ok := want[s.Name]; ok && s.SpanContext.TraceID().String() == traceID {
			want[s.Name] = true
		}
		if strings.HasPrefix(s.Name, "projection.batch ") {
			for _, l := range s.Links {
				if l.SpanContext.TraceID().String() == traceID {
					linked = true
				}
			}
		}
	}
	for name, found := range want {
		if !found {
			t.Errorf("span %q is not in the request's trace %s", name, traceID)
		}
	}
	if !linked {
		t.Errorf("no projection batch span links to the request's trace %s", traceID)
	}

	text := string(metrics)
	for _, name := range []string{
		"strata_http_requests_total", "strata_http_request_duration_seconds", "strata_commands_total",
		"strata_command_duration_seconds", "strata_events_appended_total", "strata_idempotency_replays_total",
		"strata_projection_lag_events", "strata_projection_lag_seconds", "strata_dead_letters",
		"strata_projection_batches_total", "strata_db_pool_acquired_connections", "strata_rate_limited_total",
		"strata_load_shed_total", "strata_tenant_in_flight_rejected_total",
	} {
		if !regexp.MustCompile(`(?m)^# TYPE ` + name + ` `).MatchString(text) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	if !strings.Contains(text, `strata_commands_total{command="order.create",outcome="replayed"} 1`) {
		t.Errorf("the idempotent replay is not counted:\n%s", grep(text, "strata_commands_total"))
	}
	for _, line := range strings.Split(text, "\n") {
		// The heavy hitters are the one series that names tenants outside
		// a cohort: only the top N per kind (docs/tenants.md).
		if strings.HasPrefix(line, "#") || strings.HasPrefix(line, "strata_tenant_heavy_hitter{") {
			continue
		}
		if strings.Contains(line, tenant) || strings.Contains(line, "tenant=") {
			t.Errorf("a metric carries a tenant: %s", line)
		}
	}
}

func grep(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// keepSpans keeps the spans past serve's shutdown (the in-memory
// exporter's Shutdown forgets them).
type keepSpans struct{ *tracetest.InMemoryExporter }

func (keepSpans) Shutdown(context.Context) error { return nil }
