package harness

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// testSeed is the subset's seed: fixed, so that `make test` makes the same
// random choices every time; CHAOS_SEED overrides it.
const testSeed = 20261129

// TestShortSubset runs the deterministic subset of the harness against a
// freshly built strata binary: R1 with two kill rounds and light load, R11
// and R12 with a few hundred requests each, and a small tenant-starvation
// case (STARVE). It keeps the harness from rotting; `make chaos` runs the
// full scenarios.
func TestShortSubset(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bin := buildStrata(ctx, t)
	cfg := Short()
	cfg.Strata = bin
	cfg.Seed = testSeed
	if v := os.Getenv("CHAOS_SEED"); v != "" {
		s, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("CHAOS_SEED=%q: %v", v, err)
		}
		cfg.Seed = s
	}
	out := &lineLogger{t: t}
	cfg.Out = out
	t.Logf("seed %d", cfg.Seed)
	results, err := Run(ctx, cfg)
	var table bytes.Buffer
	PrintNotes(&table, results)
	PrintTable(&table, results)
	if err != nil {
		t.Fatalf("harness: %v\n%s", err, table.String())
	}
	failed := len(results) != len(cfg.Scenarios)
	for _, r := range results {
		failed = failed || !r.Passed()
	}
	if failed {
		t.Fatalf("the short chaos subset failed (seed %d):\n%s", cfg.Seed, table.String())
	}
	t.Logf("\n%s", table.String())
}

// buildStrata builds cmd/strata into the test's temporary directory with the
// go command that runs the test.
func buildStrata(ctx context.Context, t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "strata")
	gocmd := filepath.Join(runtime.GOROOT(), "bin", "go")
	cmd := exec.CommandContext(ctx, gocmd, "build", "-o", bin, "./cmd/strata")
	cmd.Dir = filepath.Join("..", "..", "..") // the module root, from cmd/chaos/harness
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/strata: %v\n%s", err, out)
	}
	return bin
}

// lineLogger sends the harness's progress lines to t.Log.
type lineLogger struct {
	t   *testing.T
	mu  sync.Mutex
	buf []byte
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		l.t.Log(strings.TrimRight(string(l.buf[:i]), "\r"))
		l.buf = l.buf[i+1:]
	}
	return len(p), nil
}
