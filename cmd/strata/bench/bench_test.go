package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAppendWorkloadWithPGStats runs `strata bench` (Command) on the
// append workload end to end on its own throwaway PostgreSQL, tiny: every
// writer count reports a measured throughput next to its raw baseline,
// --pg-stats prints the statements that ran, strata's append and the
// baseline's INSERT, and the results land where --out and --docs say
// (folders created).
func TestAppendWorkloadWithPGStats(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	out, docs := filepath.Join(dir, "results", "bench.json"), filepath.Join(dir, "docs")
	if err := os.MkdirAll(docs, 0o755); err != nil {
		t.Fatal(err)
	}
	var stdout, progress bytes.Buffer
	code := Command(ctx, []string{"--workloads", "append", "--runs", "1", "--duration", "300ms", "--warmup", "100ms", "--pg-stats", "5",
		"--out", out, "--docs", docs}, &stdout, &progress)
	if code != exitOK {
		t.Fatalf("exit %d:\n%s", code, progress.String())
	}
	if !strings.Contains(stdout.String(), "results written to "+out) {
		t.Errorf("stdout %q: want where the results went", stdout.String())
	}
	for _, f := range []string{"latest.md", "latency.png"} {
		if st, err := os.Stat(filepath.Join(docs, f)); err != nil || st.Size() == 0 {
			t.Errorf("--docs: %s: %v", f, err)
		}
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatalf("results file: %v", err)
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
	lines := progress.String()
	for _, want := range []string{"pg_stat_statements, append: top 5", "INSERT INTO public.raw_events", "WITH cur AS"} {
		if !strings.Contains(lines, want) {
			t.Errorf("progress lacks %q:\n%s", want, lines)
		}
	}
}
