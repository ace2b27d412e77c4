package telemetry

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ProcessMetrics are the process managers' metrics (issue 14): their steps
// by outcome (commands and provider calls), how late deadlines fire, and,
// computed at scrape time, instances by status and overdue deadlines.
type ProcessMetrics struct {
	Steps        *prometheus.CounterVec   // process, kind, name, outcome
	StepDuration *prometheus.HistogramVec // process, kind, name
	DeadlineLag  *prometheus.HistogramVec // process
}

// NewProcessMetrics registers the process managers' counters on m.
func (m *Metrics) NewProcessMetrics() *ProcessMetrics {
	pm := &ProcessMetrics{
		Steps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_process_steps_total", Help: "Executions of process-manager steps (commands and provider calls) by process, kind, name and outcome (ok, rejected, error, parked).",
		}, []string{"process", "kind", "name", "outcome"}),
		StepDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "strata_process_step_duration_seconds", Help: "Duration of one execution of a process-manager step.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"process", "kind", "name"}),
		DeadlineLag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "strata_process_deadline_lag_seconds", Help: "How long after it was due a process-manager deadline fired.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"process"}),
	}
	m.Registry.MustRegister(pm.Steps, pm.StepDuration, pm.DeadlineLag)
	return pm
}

// ProcessStat is one process's figures at scrape time.
type ProcessStat struct {
	Process string
	// ByStatus counts instances by status (with "parked" counted apart).
	ByStatus map[string]int64
	// Overdue counts pending deadlines past due; OldestOverdue is how far
	// past due the oldest is.
	Overdue       int64
	OldestOverdue time.Duration
}

// RegisterProcesses exports strata_process_instances{process,status} and
// strata_process_deadlines_overdue{process} (and the oldest one's age),
// computed by stats at scrape time.
func (m *Metrics) RegisterProcesses(stats func(ctx context.Context) ([]ProcessStat, error)) {
	m.Registry.MustRegister(&processCollector{stats: stats})
}

var (
	procInstances = prometheus.NewDesc("strata_process_instances", "Process-manager instances by process and status.", []string{"process", "status"}, nil)
	procOverdue   = prometheus.NewDesc("strata_process_deadlines_overdue", "Pending process-manager deadlines past due.", []string{"process"}, nil)
	procOverdueS  = prometheus.NewDesc("strata_process_deadline_overdue_seconds", "How far past due the oldest pending deadline is.", []string{"process"}, nil)
)

type processCollector struct {
	stats func(ctx context.Context) ([]ProcessStat, error)
}

func (c *processCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- procInstances
	ch <- procOverdue
	ch <- procOverdueS
}

func (c *processCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	stats, err := c.stats(ctx)
	if err != nil {
		return // absent during an outage, never wrong
	}
	for _, s := range stats {
		for status, n := range s.ByStatus {
			ch <- prometheus.MustNewConstMetric(procInstances, prometheus.GaugeValue, float64(n), s.Process, status)
		}
		ch <- prometheus.MustNewConstMetric(procOverdue, prometheus.GaugeValue, float64(s.Overdue), s.Process)
		ch <- prometheus.MustNewConstMetric(procOverdueS, prometheus.GaugeValue, s.OldestOverdue.Seconds(), s.Process)
	}
}
