package telemetry

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestForPlacementExportsUnderItsLabel: a placement's series come out of
// the parent's handler labelled placement="eu", beside the parent's own
// unlabelled ones of the same name, and the scrape succeeds.
func TestForPlacementExportsUnderItsLabel(t *testing.T) {
	m := NewMetrics()
	eu := m.ForPlacement("eu")
	m.ProjectionBatches.WithLabelValues("order_list").Add(2)
	eu.ProjectionBatches.WithLabelValues("order_list").Add(5)
	eu.EventsAppended.Add(3)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := rec.Body.String()
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape: %d %s", rec.Code, body)
	}
	for _, want := range []string{
		`strata_projection_batches_total{projection="order_list"} 2`,
		`strata_projection_batches_total{placement="eu",projection="order_list"} 5`,
		`strata_events_appended_total{placement="eu"} 3`,
		`strata_events_appended_total 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	if strings.Contains(body, `go_goroutines{placement="eu"}`) {
		t.Error("a placement exports the Go runtime's series again")
	}
}
