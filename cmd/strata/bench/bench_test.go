package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestAppendWorkloadWithPGStats runs the append workload end to end on its
// own throwaway PostgreSQL, tiny: every writer count reports a measured
// throughput next to its raw baseline, and --pg-stats prints the
// statements that ran, strata's append and the baseline's INSERT.
func TestAppendWorkloadWithPGStats(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	cfg := Config{Runs: 1, Duration: 300 * time.Millisecond, Warmup: 100 * time.Millisecond,
		Workloads: []string{"append"}, Progress: &progress, PGStats: 5}
	dir, err := os.MkdirTemp("", "strata-bench-test-") // t.TempDir's parent is private: the postgres user must traverse it when we are root
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	rep, err := Execute(ctx, dir+"/pg", cfg)
	if err != nil {
		t.Fatalf("execute: %v\n%s", err, progress.String())
	}
	if got := rep.PostgreSQL["shared_preload_libraries"]; got != "pg_stat_statements" {
		t.Errorf("settings in the report: shared_preload_libraries = %q, want pg_stat_statements", got)
	}
	var writers []string
	for _, r := range rep.Results {
		writers = append(writers, fmt.Sprintf("%s/%d", r.Workload, r.Concurrency))
		if r.Strata.Median.Throughput <= 0 || r.Raw == nil || r.Raw.Median.Throughput <= 0 || r.Ratio <= 0 {
			t.Errorf("append at %d writers: strata %+v raw %+v ratio %v: want positive measurements",
				r.Concurrency, r.Strata.Median, r.Raw, r.Ratio)
		}
		if r.Strata.Median.Errors > 0 || r.Raw != nil && r.Raw.Median.Errors > 0 {
			t.Errorf("%s at %d writers: %d failed appends, %d failed baseline operations", r.Workload, r.Concurrency, r.Strata.Median.Errors, r.Raw.Median.Errors)
		}
	}
	var want []string
	for _, n := range []int{1, 8, 32} {
		for _, w := range []string{"append", "append grouped vs ungrouped", "append vs watermill-sql", "append vs 10-per-tx"} {
			want = append(want, fmt.Sprintf("%s/%d", w, n))
		}
	}
	if strings.Join(writers, ",") != strings.Join(want, ",") {
		t.Errorf("append results %v, want %v", writers, want)
	}
	out := progress.String()
	for _, want := range []string{"pg_stat_statements, append: top 5", "INSERT INTO public.raw_events", "WITH cur AS"} {
		if !strings.Contains(out, want) {
			t.Errorf("progress lacks %q:\n%s", want, out)
		}
	}
}
