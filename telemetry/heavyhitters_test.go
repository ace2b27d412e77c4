package telemetry

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/strata-es/strata/domain"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func TestHeavyHittersRankOverTheRollingWindow(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 12, 1, 12, 0, 30, 0, time.UTC)}
	h := NewHeavyHitters(HeavyHittersConfig{Window: 5 * time.Minute, Bucket: time.Minute, MaxTenants: 4, NowFunc: clock.now})
	// Minute 0: big leads commands; minute 2: mid catches up; ties sort by ID.
	for _, x := range []struct {
		tenant domain.TenantID
		n      int
	}{{"big", 100}, {"mid", 40}, {"small", 5}, {"tie-b", 7}, {"tie-a", 7}} {
		for range x.n {
			h.Record(x.tenant, HitCommands, 1)
		}
	}
	h.Record("mid", HitEvents, 1000)
	clock.t = clock.t.Add(2 * time.Minute)
	h.Record("mid", HitCommands, 80)
	h.Record("q", HitQueries, 3)

	top, other, total := h.Top(HitCommands, 3)
	if got := fmt.Sprint(top); got != "[{mid 120} {big 100} {tie-b 7}]" {
		t.Fatalf("top commands %s", got)
	}
	// MaxTenants 4: the fifth tenant of minute 0 (tie-a) went to other,
	// uncounted by name but in the total.
	if total != 100+40+5+7+7+80 || other != 7 {
		t.Fatalf("total %d other %d", total, other)
	}
	if top, _, _ := h.Top(HitEvents, 10); fmt.Sprint(top) != "[{mid 1000}]" {
		t.Fatalf("top events %v", top)
	}
	if top, _, _ := h.Top(HitQueries, 10); fmt.Sprint(top) != "[{q 3}]" {
		t.Fatalf("top queries %v", top)
	}

	// Four minutes later minute 0 has left the window; minute 2 has not.
	clock.t = clock.t.Add(4 * time.Minute)
	if top, other, _ := h.Top(HitCommands, 3); fmt.Sprint(top) != "[{mid 80}]" || other != 0 {
		t.Fatalf("after minute 0 expired: %v other %d", top, other)
	}
	clock.t = clock.t.Add(2 * time.Minute)
	if top, _, total := h.Top(HitCommands, 3); len(top) != 0 || total != 0 {
		t.Fatalf("after the whole window: %v %d", top, total)
	}
}

func TestTenantMetricsLabelsAreBounded(t *testing.T) {
	m := NewMetrics()
	clock := &fakeClock{t: time.Now()}
	hh := NewHeavyHitters(HeavyHittersConfig{Top: 2, NowFunc: clock.now})
	tiers := map[domain.TenantID]string{"c1": "pro", "c2": "pro", "c3": "free", "p": "free"}
	tm := m.EnableTenants(TenantMetricsConfig{CohortCap: 2, Hitters: hh, Labels: func(id domain.TenantID) (string, bool) {
		return tiers[id], strings.HasPrefix(string(id), "c")
	}})
	h := tm.Middleware("queries")(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, id := range []domain.TenantID{"c1", "c2", "c3", "p", "x", "c1", "c1"} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		h.ServeHTTP(httptest.NewRecorder(), r.WithContext(domain.NewContext(r.Context(), id)))
	}
	tm.appended("c2", 5)
	tm.Waited("c1", 30*time.Millisecond)
	tm.Waited("p", 2*time.Second)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`strata_tenant_requests_total{api="queries",tenant_id="c1",tenant_tier="pro"} 3`,
		`strata_tenant_requests_total{api="queries",tenant_id="c2",tenant_tier="pro"} 1`,
		`strata_tenant_requests_total{api="queries",tenant_id="",tenant_tier="free"} 2`, // c3 over the cap, p not in a cohort
		`strata_tenant_requests_total{api="queries",tenant_id="",tenant_tier="none"} 1`,
		`strata_tenant_cohort_over_cap_total 1`,
		`strata_tenant_events_appended_total{tenant_id="c2",tenant_tier="pro"} 5`,
		`strata_tenant_heavy_hitter{kind="queries",rank="1",tenant_id="c1"} 3`,
		`strata_tenant_heavy_hitter{kind="events",rank="1",tenant_id="c2"} 5`,
		`strata_tenant_consistency_wait_seconds_count{tenant_id="c1",tenant_tier="pro"} 1`,
		`strata_tenant_consistency_wait_seconds_bucket{tenant_id="",tenant_tier="free",le="1"} 0`,
		`strata_tenant_consistency_wait_seconds_bucket{tenant_id="",tenant_tier="free",le="2.5"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if n := strings.Count(body, `strata_tenant_heavy_hitter{kind="queries"`); n != 2 {
		t.Errorf("%d heavy-hitter series of queries, want the top 2 only", n)
	}
	if strings.Contains(body, `tenant_id="c3"`) || strings.Contains(body, `tenant_id="p"`) {
		t.Error("a tenant over the cap or outside any cohort has a tenant_id label")
	}
}
