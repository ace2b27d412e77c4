package telemetry

import (
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// placedMetrics are the Metrics of the placements a serve process serves
// besides its own database (ARCHITECTURE decision 14): each placement's
// runners, stores and process managers count into a registry of their
// own, exported with the parent's under the label placement.
type placedMetrics struct {
	mu       sync.Mutex
	children []placedRegistry
}

type placedRegistry struct {
	name string
	reg  *prometheus.Registry
}

// ForPlacement returns the Metrics of one placement: strata's series (not
// the Go runtime's, which are the process's), exported by m's Handler with
// placement="name" on every sample. Asking twice for a name returns a new
// registry exported under the same label: call it once per placement.
func (m *Metrics) ForPlacement(name string) *Metrics {
	r := prometheus.NewRegistry()
	child := newMetrics(r)
	m.placed.mu.Lock()
	m.placed.children = append(m.placed.children, placedRegistry{name, r})
	m.placed.mu.Unlock()
	return child
}

// gatherer is m's registry and its placements'.
func (m *Metrics) gatherer() prometheus.Gatherer {
	m.placed.mu.Lock()
	defer m.placed.mu.Unlock()
	if len(m.placed.children) == 0 {
		return m.Registry
	}
	gs := prometheus.Gatherers{m.Registry}
	for _, c := range m.placed.children {
		gs = append(gs, labelled{c.reg, c.name})
	}
	return gs
}

// labelled adds placement="name" to every sample its registry gathers.
type labelled struct {
	g    prometheus.Gatherer
	name string
}

func (l labelled) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := l.g.Gather()
	label := "placement"
	for _, mf := range mfs {
		for _, metric := range mf.Metric {
			metric.Label = append(metric.Label, &dto.LabelPair{Name: &label, Value: &l.name})
			sort.Slice(metric.Label, func(i, j int) bool { return metric.Label[i].GetName() < metric.Label[j].GetName() })
		}
	}
	return mfs, err
}
