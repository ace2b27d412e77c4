package telemetry

import "github.com/prometheus/client_golang/prometheus"

// ReplicaMetrics are the query role's replicas' (STRATA_QUERY_DATABASE_URL):
// each replica's lag and state as last sampled, and where reads were
// answered from.
type ReplicaMetrics struct {
	lagSeconds *prometheus.GaugeVec   // replica
	lagBytes   *prometheus.GaugeVec   // replica
	usable     *prometheus.GaugeVec   // replica
	reads      *prometheus.CounterVec // source, fallback
}

// NewReplicaMetrics registers the replicas' metrics on m.
func (m *Metrics) NewReplicaMetrics() *ReplicaMetrics {
	rm := &ReplicaMetrics{
		lagSeconds: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "strata_query_replica_lag_seconds", Help: "How far a query replica's replay is behind the primary, in seconds (estimated from the primary's sampled WAL position).",
		}, []string{"replica"}),
		lagBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "strata_query_replica_lag_bytes", Help: "WAL the primary had written that a query replica had not replayed.",
		}, []string{"replica"}),
		usable: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "strata_query_replica_usable", Help: "1 when a query replica serves reads (streaming or paused within the maximum lag), else 0.",
		}, []string{"replica"}),
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_query_reads_total", Help: "Query reads by source (replica, primary) and why a read fell back to the primary (none, no_replica, replica_behind, replica_error).",
		}, []string{"source", "fallback"}),
	}
	m.Registry.MustRegister(rm.lagSeconds, rm.lagBytes, rm.usable, rm.reads)
	return rm
}

// Observe records a replica's sample.
func (rm *ReplicaMetrics) Observe(replica string, usable bool, lagSeconds float64, lagBytes int64) {
	rm.lagSeconds.WithLabelValues(replica).Set(lagSeconds)
	rm.lagBytes.WithLabelValues(replica).Set(float64(lagBytes))
	u := 0.0
	if usable {
		u = 1
	}
	rm.usable.WithLabelValues(replica).Set(u)
}

// Read counts a read answered from source.
func (rm *ReplicaMetrics) Read(source, fallback string) {
	if fallback == "" {
		fallback = "none"
	}
	rm.reads.WithLabelValues(source, fallback).Inc()
}
