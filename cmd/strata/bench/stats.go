package bench

import (
	"math"
	"slices"
	"sort"
	"sync"
	"time"
)

// Run is one measured repetition of a workload variant.
type Run struct {
	Ops        int64   `json:"ops"`
	Errors     int64   `json:"errors"`
	Seconds    float64 `json:"seconds"`
	Throughput float64 `json:"throughput"` // ops/s
	P50ms      float64 `json:"p50_ms"`
	P95ms      float64 `json:"p95_ms"`
	P99ms      float64 `json:"p99_ms"`
}

// Summary is the median run (by throughput) with the spread over runs.
type Summary struct {
	Runs          []Run   `json:"runs"`
	Median        Run     `json:"median"`
	MinThroughput float64 `json:"min_throughput"`
	MaxThroughput float64 `json:"max_throughput"`
}

func summarize(runs []Run) Summary {
	s := Summary{Runs: runs}
	if len(runs) == 0 {
		return s
	}
	sorted := slices.Clone(runs)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Throughput < sorted[j].Throughput })
	s.Median = sorted[len(sorted)/2]
	s.MinThroughput = sorted[0].Throughput
	s.MaxThroughput = sorted[len(sorted)-1].Throughput
	return s
}

// recorder collects latencies from many goroutines.
type recorder struct {
	mu     sync.Mutex
	lat    []time.Duration
	errors int64
}

func (r *recorder) add(d time.Duration) {
	r.mu.Lock()
	r.lat = append(r.lat, d)
	r.mu.Unlock()
}

// done counts the operations recorded so far, failed ones included.
func (r *recorder) done() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return int64(len(r.lat)) + r.errors
}

func (r *recorder) fail() {
	r.mu.Lock()
	r.errors++
	r.mu.Unlock()
}

func (r *recorder) run(elapsed time.Duration) Run {
	r.mu.Lock()
	defer r.mu.Unlock()
	slices.Sort(r.lat)
	run := Run{Ops: int64(len(r.lat)), Errors: r.errors, Seconds: elapsed.Seconds()}
	if elapsed > 0 {
		run.Throughput = float64(len(r.lat)) / elapsed.Seconds()
	}
	run.P50ms = percentile(r.lat, 0.50)
	run.P95ms = percentile(r.lat, 0.95)
	run.P99ms = percentile(r.lat, 0.99)
	return run
}

func percentile(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	i = max(0, min(i, len(sorted)-1))
	return float64(sorted[i].Microseconds()) / 1000
}
