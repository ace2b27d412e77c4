package telemetry

import (
	"github.com/prometheus/client_golang/prometheus"
)

// MoveSample is one unfinished tenant move as the control plane records it
// (tenant_moves): its phase and progress, and the write freeze once
// measured (FreezeSeconds < 0: not yet).
type MoveSample struct {
	Tenant, Source, Target, Phase string
	Copied, Remaining             int64
	FreezeSeconds                 float64
}

// MoveMetrics are the gauges of the tenant moves not yet finished
// (docs/scaling.md, "Moving a tenant"). A move runs in the `strata tenants
// move` process, which lives too short to be scraped; the serving processes
// read the moves' records every STRATA_PLACEMENT_RELOAD and export them. The
// tenant label's values are the tenants being moved: a handful at a time.
type MoveMetrics struct {
	Open      *prometheus.GaugeVec // tenant, source, target, phase
	Copied    *prometheus.GaugeVec // tenant
	Remaining *prometheus.GaugeVec // tenant
	Freeze    *prometheus.GaugeVec // tenant
}

// EnableMoves registers the move gauges on m.
func (m *Metrics) EnableMoves() *MoveMetrics {
	mm := &MoveMetrics{
		Open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "strata_tenant_move_open", Help: "1 per tenant move not yet finished, by tenant, source and target placement and phase (copying, frozen, switched).",
		}, []string{"tenant", "source", "target", "phase"}),
		Copied: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "strata_tenant_move_copied_events", Help: "Events of the moving tenant the target placement holds.",
		}, []string{"tenant"}),
		Remaining: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "strata_tenant_move_remaining_events", Help: "Events of the moving tenant still to copy, at the move's last batch.",
		}, []string{"tenant"}),
		Freeze: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "strata_tenant_move_freeze_seconds", Help: "The moving tenant's write freeze, from the freeze to the acknowledged switch, once measured.",
		}, []string{"tenant"}),
	}
	m.Registry.MustRegister(mm.Open, mm.Copied, mm.Remaining, mm.Freeze)
	return mm
}

// Set replaces every gauge with the moves given: a move that finished or
// went back disappears from the series.
func (mm *MoveMetrics) Set(moves []MoveSample) {
	mm.Open.Reset()
	mm.Copied.Reset()
	mm.Remaining.Reset()
	mm.Freeze.Reset()
	for _, mv := range moves {
		mm.Open.WithLabelValues(mv.Tenant, mv.Source, mv.Target, mv.Phase).Set(1)
		mm.Copied.WithLabelValues(mv.Tenant).Set(float64(mv.Copied))
		mm.Remaining.WithLabelValues(mv.Tenant).Set(float64(mv.Remaining))
		if mv.FreezeSeconds >= 0 {
			mm.Freeze.WithLabelValues(mv.Tenant).Set(mv.FreezeSeconds)
		}
	}
}
