package cli

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/httpapi"
	"github.com/strata-es/strata/telemetry"
	"github.com/strata-es/strata/tenancy"
	"github.com/strata-es/strata/tenancy/retention"
)

// wireTenantMetrics turns on the tenant-aware series (tenant_tier, and
// tenant_id for cohort tenants up to STRATA_METRICS_COHORT_CAP) and the
// heavy hitters of a serving process, labelled from its directory.
func wireTenantMetrics(a *app, dir *tenancy.Directory) (*telemetry.TenantMetrics, *telemetry.HeavyHitters, error) {
	window, err := a.env.duration("STRATA_HEAVY_HITTERS_WINDOW", telemetry.DefaultHitWindow)
	if err != nil {
		return nil, nil, err
	}
	if window < telemetry.DefaultHitBucket {
		return nil, nil, fmt.Errorf("STRATA_HEAVY_HITTERS_WINDOW=%s: want at least %s", window, telemetry.DefaultHitBucket)
	}
	top, err := a.env.integer("STRATA_HEAVY_HITTERS_TOP", telemetry.DefaultHitTop)
	if err != nil || top < 1 || top > 100 {
		return nil, nil, fmt.Errorf("STRATA_HEAVY_HITTERS_TOP: want 1 to 100")
	}
	cohortCap, err := a.env.integer("STRATA_METRICS_COHORT_CAP", telemetry.DefaultCohortCap)
	if err != nil || cohortCap < 1 || cohortCap > 1000 {
		return nil, nil, fmt.Errorf("STRATA_METRICS_COHORT_CAP: want 1 to 1000")
	}
	hh := telemetry.NewHeavyHitters(telemetry.HeavyHittersConfig{Window: window.Truncate(telemetry.DefaultHitBucket), Top: top})
	tm := a.metrics.EnableTenants(telemetry.TenantMetricsConfig{CohortCap: cohortCap, Hitters: hh,
		Labels: func(id domain.TenantID) (string, bool) {
			e, ok := dir.Lookup(id)
			return e.Tier, ok && e.Cohort != ""
		}})
	return tm, hh, nil
}

// tenantRequests counts a serving API's requests by tenant tier (a
// pass-through for a process without the directory).
func (t tenantWiring) requests(api string) func(http.Handler) http.Handler {
	if t.metrics == nil {
		return func(h http.Handler) http.Handler { return h }
	}
	return t.metrics.Middleware(api)
}

// waited records a consistency wait of the request's tenant.
func (t tenantWiring) waited(r *http.Request, d time.Duration) {
	if tenant, ok := domain.TenantFromContext(r.Context()); ok {
		t.metrics.Waited(tenant, d)
	}
}

// newPoolShare is one tenant's cap on the serving pool
// (STRATA_TENANT_POOL_SHARE of STRATA_DB_MAX_CONNS).
func newPoolShare(e env, poolSize int, m *telemetry.Metrics) (*httpapi.PoolShare, error) {
	share := httpapi.DefaultPoolShare
	if v := e.str("STRATA_TENANT_POOL_SHARE", ""); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, fmt.Errorf("STRATA_TENANT_POOL_SHARE=%q: want a fraction in (0, 1]", v)
		}
		share = f
	}
	wait, err := e.duration("STRATA_TENANT_POOL_WAIT", httpapi.DefaultPoolShareWait)
	if err != nil {
		return nil, err
	}
	m.TenantInFlight.WithLabelValues("pool_share") // exported from zero
	p, err := httpapi.NewPoolShare(httpapi.PoolShareConfig{PoolSize: poolSize, Share: share, Wait: wait,
		RejectFunc: func(*http.Request) { m.TenantInFlight.WithLabelValues("pool_share").Inc() }})
	if err != nil {
		return nil, fmt.Errorf("STRATA_TENANT_POOL_SHARE: %w", err)
	}
	return p, nil
}

// retentionDefaults are the installation's windows: tenancy's defaults
// under STRATA_RETENTION_*.
func retentionDefaults(e env) (tenancy.Windows, error) {
	w := tenancy.DefaultWindows()
	for key, name := range map[string]string{
		tenancy.RetainIdempotency: "STRATA_RETENTION_IDEMPOTENCY_RECORDS",
		tenancy.RetainDeadLetters: "STRATA_RETENTION_RESOLVED_DEAD_LETTERS",
		tenancy.RetainAudit:       "STRATA_RETENTION_AUDIT",
	} {
		if v := e.str(name, ""); v != "" {
			win, err := tenancy.ParseWindow(v)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			w[key] = win
		}
	}
	return w, nil
}

// wireRetention runs the retention job in the projector role
// (docs/tenants.md, "Retention"): leader-elected, so any number of
// projector processes run one pass at a time between them; one per
// placement.
func wireRetention(a *app) error {
	switch v := a.env.str("STRATA_RETENTION", "on"); v {
	case "on":
	case "off":
		a.logger.Info("retention job off (STRATA_RETENTION=off)")
		return nil
	default:
		return fmt.Errorf("STRATA_RETENTION=%q: want on or off", v)
	}
	defaults, err := retentionDefaults(a.env)
	if err != nil {
		return err
	}
	interval, err := a.env.duration("STRATA_RETENTION_INTERVAL", retention.DefaultInterval)
	if err != nil {
		return err
	}
	batch, err := a.env.integer("STRATA_RETENTION_BATCH", retention.DefaultBatch)
	if err != nil || batch < 1 || batch > 100_000 {
		return fmt.Errorf("STRATA_RETENTION_BATCH: want 1 to 100000")
	}
	deleted := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "strata_retention_deleted_total", Help: "Rows the retention job deleted, by kind (idempotency_records, resolved_dead_letters, audit).",
	}, []string{"kind"})
	for _, k := range retention.Kinds() {
		deleted.WithLabelValues(k)
	}
	if err := a.metrics.Registry.Register(deleted); err != nil {
		return err
	}
	cfg := retention.Config{Pool: a.projPool, Defaults: defaults, Interval: interval, Batch: batch, Logger: a.logger,
		DeletedFunc: func(kind string, _ domain.TenantID, n int64) { deleted.WithLabelValues(kind).Add(float64(n)) }}
	if a.placement != "" {
		// A placement's job keeps the tenants placed there, read from the
		// directory of the control plane.
		cfg.Directory, cfg.Placement = a.directory, a.placement
	}
	job, err := retention.New(cfg)
	if err != nil {
		return err
	}
	a.workers = append(a.workers, worker{name: "retention", run: job.Run})
	return nil
}
