package telemetry

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/mux"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Metrics holds every series strata exports. Labels are bounded: routes,
// commands, outcomes, projections, pools. Tenant IDs are labels only on
// the tenant-aware series of EnableTenants, for cohort tenants within a
// cap (tenants.go); otherwise they appear in traces and logs.
type Metrics struct {
	Registry *prometheus.Registry

	HTTPRequests       *prometheus.CounterVec   // route, method, status
	HTTPDuration       *prometheus.HistogramVec // route, method
	Commands           *prometheus.CounterVec   // command, outcome
	CommandDuration    *prometheus.HistogramVec // command
	EventsAppended     prometheus.Counter
	IdempotencyReplays prometheus.Counter
	RateLimited        *prometheus.CounterVec // api
	LoadShed           prometheus.Counter
	TenantInFlight     *prometheus.CounterVec // class: requests refused by a tenant's in-flight limit
	ProjectionBatches  *prometheus.CounterVec // projection
	ProjectionEvents   *prometheus.CounterVec // projection

	pools   *poolCollector
	tenants atomic.Pointer[TenantMetrics] // EnableTenants (tenants.go)

	placed placedMetrics // ForPlacement (placements.go)
}

// NewMetrics registers strata's metrics and the Go runtime's.
func NewMetrics() *Metrics {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return newMetrics(r)
}

// newMetrics registers strata's own series in r.
func newMetrics(r *prometheus.Registry) *Metrics {
	m := &Metrics{
		Registry: r,
		HTTPRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_http_requests_total", Help: "HTTP requests by route, method and status.",
		}, []string{"route", "method", "status"}),
		HTTPDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "strata_http_request_duration_seconds", Help: "HTTP request latency by route and method.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"route", "method"}),
		Commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_commands_total", Help: "Commands handled by type and outcome (ok, replayed, rejected, conflict, not_found, invalid, unavailable, error).",
		}, []string{"command", "outcome"}),
		CommandDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "strata_command_duration_seconds", Help: "Command handling latency (load, decide, append) by type.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}, []string{"command"}),
		EventsAppended: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_events_appended_total", Help: "Events appended to the event store by this process.",
		}),
		IdempotencyReplays: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_idempotency_replays_total", Help: "Commands answered from a stored idempotency record.",
		}),
		RateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_rate_limited_total", Help: "Requests rejected with 429 by the per-tenant rate limit, by API.",
		}, []string{"api"}),
		LoadShed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_load_shed_total", Help: "Requests rejected with 503 by the in-flight cap.",
		}),
		TenantInFlight: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_tenant_in_flight_rejected_total", Help: "Requests rejected with 429 by a tenant's in-flight limit, by class (commands, queries, waits).",
		}, []string{"class"}),
		ProjectionBatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_projection_batches_total", Help: "Projection batches committed, by projection.",
		}, []string{"projection"}),
		ProjectionEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_projection_events_total", Help: "Events applied (or skipped as not handled) by projection.",
		}, []string{"projection"}),
	}
	m.pools = &poolCollector{}
	r.MustRegister(m.pools)
	r.MustRegister(m.HTTPRequests, m.HTTPDuration, m.Commands, m.CommandDuration, m.EventsAppended,
		m.IdempotencyReplays, m.RateLimited, m.LoadShed, m.TenantInFlight, m.ProjectionBatches, m.ProjectionEvents)
	return m
}

// PartitionsHeld reports, for a partitioned projection, how many of its
// partitions this process runs now (strata_projection_partitions_held):
// across the projector processes of a deployment the values add up to the
// partition count once the share has settled.
func (m *Metrics) PartitionsHeld(projection string, held func() int) {
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "strata_projection_partitions_held",
		Help:        "Partitions of a partitioned projection this process runs now.",
		ConstLabels: prometheus.Labels{"projection": projection},
	}, func() float64 { return float64(held()) }))
}

// Handler serves the registry, and every placement's (ForPlacement), in
// the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.gatherer(), promhttp.HandlerOpts{})
}

// HTTPMiddleware counts requests and their latency by mux route name.
func (m *Metrics) HTTPMiddleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r)
		route := "unmatched"
		if rt := mux.CurrentRoute(r); rt != nil && rt.GetName() != "" {
			route = rt.GetName()
		}
		m.HTTPRequests.WithLabelValues(route, r.Method, strconv.Itoa(sw.status)).Inc()
		m.HTTPDuration.WithLabelValues(route, r.Method).Observe(time.Since(start).Seconds())
	})
}

type statusWriter struct {
	http.ResponseWriter
	status      int
	wroteHeader bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		w.status, w.wroteHeader = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wroteHeader = true
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// RegisterPool exports a pgx pool's usage as strata_db_pool_* gauges
// labelled with the pool's name.
func (m *Metrics) RegisterPool(name string, pool *pgxpool.Pool) {
	m.pools.mu.Lock()
	defer m.pools.mu.Unlock()
	m.pools.pools = append(m.pools.pools, namedPool{name, pool})
}

var (
	poolAcquired = prometheus.NewDesc("strata_db_pool_acquired_connections", "Connections in use.", []string{"pool"}, nil)
	poolIdle     = prometheus.NewDesc("strata_db_pool_idle_connections", "Idle connections.", []string{"pool"}, nil)
	poolTotal    = prometheus.NewDesc("strata_db_pool_total_connections", "Open connections.", []string{"pool"}, nil)
	poolMax      = prometheus.NewDesc("strata_db_pool_max_connections", "Pool size limit.", []string{"pool"}, nil)
	poolWaits    = prometheus.NewDesc("strata_db_pool_empty_acquire_total", "Acquires that had to wait for a connection.", []string{"pool"}, nil)
	poolWaitSecs = prometheus.NewDesc("strata_db_pool_acquire_wait_seconds_total", "Time spent waiting for a connection.", []string{"pool"}, nil)
)

type namedPool struct {
	name string
	pool *pgxpool.Pool
}

type poolCollector struct {
	mu    sync.Mutex
	pools []namedPool
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{poolAcquired, poolIdle, poolTotal, poolMax, poolWaits, poolWaitSecs} {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.pools {
		s := p.pool.Stat()
		ch <- prometheus.MustNewConstMetric(poolAcquired, prometheus.GaugeValue, float64(s.AcquiredConns()), p.name)
		ch <- prometheus.MustNewConstMetric(poolIdle, prometheus.GaugeValue, float64(s.IdleConns()), p.name)
		ch <- prometheus.MustNewConstMetric(poolTotal, prometheus.GaugeValue, float64(s.TotalConns()), p.name)
		ch <- prometheus.MustNewConstMetric(poolMax, prometheus.GaugeValue, float64(s.MaxConns()), p.name)
		ch <- prometheus.MustNewConstMetric(poolWaits, prometheus.CounterValue, float64(s.EmptyAcquireCount()), p.name)
		ch <- prometheus.MustNewConstMetric(poolWaitSecs, prometheus.CounterValue, s.EmptyAcquireWaitTime().Seconds(), p.name)
	}
}

// ProjectionStat is one projection's state at scrape time.
type ProjectionStat struct {
	Name        string
	LagEvents   float64
	LagSeconds  float64
	DeadLetters float64
}

// RegisterProjections exports strata_projection_lag_events,
// strata_projection_lag_seconds and strata_dead_letters per projection,
// computed by stats at scrape time.
func (m *Metrics) RegisterProjections(stats func(ctx context.Context) ([]ProjectionStat, error)) {
	m.Registry.MustRegister(&projectionCollector{stats: stats})
}

var (
	projLagEvents = prometheus.NewDesc("strata_projection_lag_events", "Events in the log not yet applied by the projection.", []string{"projection"}, nil)
	projLagSecs   = prometheus.NewDesc("strata_projection_lag_seconds", "Age of the oldest event not yet applied by the projection.", []string{"projection"}, nil)
	deadLetters   = prometheus.NewDesc("strata_dead_letters", "Events parked in the dead-letter store, by projection.", []string{"projection"}, nil)
)

type projectionCollector struct {
	stats func(ctx context.Context) ([]ProjectionStat, error)
}

func (c *projectionCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- projLagEvents
	ch <- projLagSecs
	ch <- deadLetters
}

func (c *projectionCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	stats, err := c.stats(ctx)
	if err != nil {
		return // a scrape during an outage shows the series absent, not wrong
	}
	for _, s := range stats {
		ch <- prometheus.MustNewConstMetric(projLagEvents, prometheus.GaugeValue, s.LagEvents, s.Name)
		ch <- prometheus.MustNewConstMetric(projLagSecs, prometheus.GaugeValue, s.LagSeconds, s.Name)
		ch <- prometheus.MustNewConstMetric(deadLetters, prometheus.GaugeValue, s.DeadLetters, s.Name)
	}
}

// NameSpanByRoute renames the HTTP server span (started outside the router,
// before the route is known) to "METHOD route-name", so span names stay
// low-cardinality instead of carrying IDs from the path.
func NameSpanByRoute(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rt := mux.CurrentRoute(r); rt != nil && rt.GetName() != "" {
			span := trace.SpanFromContext(r.Context())
			span.SetName(r.Method + " " + rt.GetName())
			span.SetAttributes(attribute.String("http.route", rt.GetName()))
		}
		next.ServeHTTP(w, r)
	})
}
