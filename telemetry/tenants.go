package telemetry

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-es/strata/domain"
)

// TenantLabelFunc gives a tenant's tier ("" for none) and whether it is in
// a cohort (its tenant_id is then a label, within the cap).
type TenantLabelFunc func(domain.TenantID) (tier string, cohort bool)

// NoTier is the tenant_tier label of a tenant without a tier (or unknown
// to the directory).
const NoTier = "none"

// DefaultCohortCap bounds the tenant_id label values one process exports.
const DefaultCohortCap = 50

// TenantMetricsConfig configures the tenant-aware series.
type TenantMetricsConfig struct {
	Labels TenantLabelFunc
	// CohortCap is the most tenants whose ID one process puts in a label
	// (DefaultCohortCap): the first that show up; cohort tenants beyond it
	// are counted with tenant_id="" and in strata_tenant_cohort_over_cap_total.
	CohortCap int
	// Hitters, if set, is fed by the same calls (commands, queries,
	// events) and exported as strata_tenant_heavy_hitter.
	Hitters *HeavyHitters
}

// TenantMetrics are the series labelled by tenant_tier and, for cohort
// tenants, tenant_id (docs/tenants.md, "Cohorts and tenant-aware metrics").
// Their cardinality is bounded: tiers are few (operators make them), and
// tenant_id takes at most CohortCap values plus "".
type TenantMetrics struct {
	cfg      TenantMetricsConfig
	Requests *prometheus.CounterVec // api, tenant_tier, tenant_id
	Commands *prometheus.CounterVec // outcome, tenant_tier, tenant_id
	Events   *prometheus.CounterVec // tenant_tier, tenant_id
	// Waits is the lag a tenant sees: how long its queries blocked for
	// their consistency token (read-your-writes), by tier.
	Waits   *prometheus.HistogramVec // tenant_tier, tenant_id
	OverCap prometheus.Counter

	mu       sync.Mutex
	labelled map[domain.TenantID]bool
}

// EnableTenants registers the tenant-aware series on m and has the command
// middleware and the instrumented store feed them.
func (m *Metrics) EnableTenants(cfg TenantMetricsConfig) *TenantMetrics {
	if cfg.CohortCap <= 0 {
		cfg.CohortCap = DefaultCohortCap
	}
	if cfg.Labels == nil {
		cfg.Labels = func(domain.TenantID) (string, bool) { return "", false }
	}
	t := &TenantMetrics{
		cfg: cfg,
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_tenant_requests_total", Help: "Command and query API requests by api, tenant tier and (cohort tenants only) tenant ID.",
		}, []string{"api", "tenant_tier", "tenant_id"}),
		Commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_tenant_commands_total", Help: "Commands handled by outcome, tenant tier and (cohort tenants only) tenant ID.",
		}, []string{"outcome", "tenant_tier", "tenant_id"}),
		Events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_tenant_events_appended_total", Help: "Events appended by tenant tier and (cohort tenants only) tenant ID.",
		}, []string{"tenant_tier", "tenant_id"}),
		Waits: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "strata_tenant_consistency_wait_seconds", Help: "How long queries blocked waiting for their consistency token (the projection lag the tenant saw), by tenant tier and (cohort tenants only) tenant ID.",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"tenant_tier", "tenant_id"}),
		OverCap: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_tenant_cohort_over_cap_total", Help: "Observations of cohort tenants counted without tenant_id because the process's cap of labelled tenants was reached.",
		}),
		labelled: map[domain.TenantID]bool{},
	}
	m.Registry.MustRegister(t.Requests, t.Commands, t.Events, t.Waits, t.OverCap)
	if cfg.Hitters != nil {
		m.Registry.MustRegister(&hitterCollector{h: cfg.Hitters})
	}
	m.tenants.Store(t)
	return t
}

// labels returns the tier and tenant_id label values of tenant.
func (t *TenantMetrics) labels(tenant domain.TenantID) (tier, id string) {
	tier, cohort := t.cfg.Labels(tenant)
	if tier == "" {
		tier = NoTier
	}
	if !cohort || tenant == "" {
		return tier, ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.labelled[tenant] {
		return tier, string(tenant)
	}
	if len(t.labelled) >= t.cfg.CohortCap {
		t.OverCap.Inc()
		return tier, ""
	}
	t.labelled[tenant] = true
	return tier, string(tenant)
}

func (t *TenantMetrics) command(ctx context.Context, outcome string) {
	if t == nil {
		return
	}
	tenant, _ := domain.TenantFromContext(ctx)
	tier, id := t.labels(tenant)
	t.Commands.WithLabelValues(outcome, tier, id).Inc()
	t.cfg.Hitters.Record(tenant, HitCommands, 1)
}

func (t *TenantMetrics) appended(tenant domain.TenantID, n int) {
	if t == nil || n == 0 {
		return
	}
	tier, id := t.labels(tenant)
	t.Events.WithLabelValues(tier, id).Add(float64(n))
	t.cfg.Hitters.Record(tenant, HitEvents, uint64(n))
}

// Waited records that a query of tenant blocked d for its consistency
// token.
func (t *TenantMetrics) Waited(tenant domain.TenantID, d time.Duration) {
	if t == nil {
		return
	}
	tier, id := t.labels(tenant)
	t.Waits.WithLabelValues(tier, id).Observe(d.Seconds())
}

// Middleware counts the requests of one API ("commands" or "queries") by
// the authenticated tenant; queries also feed the heavy hitters. Mount it
// after authentication.
func (t *TenantMetrics) Middleware(api string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if tenant, ok := domain.TenantFromContext(r.Context()); ok {
				tier, id := t.labels(tenant)
				t.Requests.WithLabelValues(api, tier, id).Inc()
				if api == "queries" {
					t.cfg.Hitters.Record(tenant, HitQueries, 1)
				}
			}
			next.ServeHTTP(w, r)
		})
	}
}

var hitterDesc = prometheus.NewDesc("strata_tenant_heavy_hitter",
	"The top tenants by commands, queries and appended events over the rolling window (rank 1 is the highest); only the top N are series.",
	[]string{"kind", "rank", "tenant_id"}, nil)

type hitterCollector struct{ h *HeavyHitters }

func (c *hitterCollector) Describe(ch chan<- *prometheus.Desc) { ch <- hitterDesc }

func (c *hitterCollector) Collect(ch chan<- prometheus.Metric) {
	for _, k := range HitKinds {
		top, _, _ := c.h.Top(k, c.h.cfg.Top)
		for i, x := range top {
			ch <- prometheus.MustNewConstMetric(hitterDesc, prometheus.GaugeValue, float64(x.Count), k.String(), strconv.Itoa(i+1), string(x.Tenant))
		}
	}
}
