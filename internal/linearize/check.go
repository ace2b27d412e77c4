package linearize

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// OutputDirEnv names the directory where visualisations of checked
// histories are written; by default a strata-porcupine directory under
// the system's temporary directory, which outlives the test (t.TempDir is
// removed when the test ends, and with it the evidence).
const OutputDirEnv = "STRATA_PORCUPINE_DIR"

// OutputDir returns the directory for visualisations.
func OutputDir() string {
	if d := os.Getenv(OutputDirEnv); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "strata-porcupine")
}

// Verdict is porcupine's answer on one history.
type Verdict struct {
	// Result is porcupine.Ok, porcupine.Illegal, or porcupine.Unknown when
	// the check ran out of time (never to be read as Ok).
	Result porcupine.CheckResult
	// Operations and Partitions size the history.
	Operations, Partitions int
	// Elapsed is the checker's time.
	Elapsed time.Duration
	// Visualization is the path of porcupine's HTML rendering of the
	// history (partial linearizations, the illegal step), when written.
	Visualization string
	// Explain is, for a history that is not Ok, the end of the longest
	// linearization porcupine found in the first partition it could not
	// linearize: the steps after which no remaining operation can follow.
	Explain string
}

func (v Verdict) String() string {
	s := fmt.Sprintf("porcupine: %s (%d operations, %d partitions, checked in %s)", v.Result, v.Operations, v.Partitions, v.Elapsed.Round(time.Millisecond))
	if v.Explain != "" {
		s += "\n" + v.Explain
	}
	if v.Visualization != "" {
		s += "\nvisualisation: " + v.Visualization
	}
	return s
}

// Check runs porcupine over ops with model. When the history is not
// proven linearizable, or always is true, it writes the visualisation to
// dir/name.html (dir "" means OutputDir()).
func Check(model porcupine.Model, ops []porcupine.Operation, timeout time.Duration, dir, name string, always bool) (Verdict, error) {
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
	v := Verdict{Result: res, Operations: len(ops), Elapsed: time.Since(start), Partitions: 1}
	parts := [][]porcupine.Operation{ops}
	if model.Partition != nil {
		parts = model.Partition(ops)
		v.Partitions = len(parts)
	}
	if res != porcupine.Ok {
		v.Explain = explain(model, parts, info)
	}
	if res == porcupine.Ok && !always {
		return v, nil
	}
	if dir == "" {
		dir = OutputDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return v, fmt.Errorf("visualisation dir: %w", err)
	}
	path := filepath.Join(dir, fileName(name)+".html")
	if err := porcupine.VisualizePath(model, info, path); err != nil {
		return v, fmt.Errorf("visualise %s: %w", name, err)
	}
	v.Visualization = path
	return v, nil
}

// T is the part of testing.TB that Require uses (the package does not
// import testing: the fault harness is not a test).
type T interface {
	Helper()
	Name() string
	Logf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// Require fails t unless porcupine proves ops linearizable within timeout;
// the failure message names the saved visualisation.
func Require(t T, model porcupine.Model, ops []porcupine.Operation, timeout time.Duration) Verdict {
	t.Helper()
	v, err := Check(model, ops, timeout, "", t.Name(), false)
	if err != nil {
		t.Fatalf("%v (%v)", err, v)
	}
	if v.Result != porcupine.Ok {
		t.Fatalf("history is not proven linearizable: %v", v)
	}
	t.Logf("%v", v)
	return v
}

// explain describes the first partition without a full linearization.
func explain(model porcupine.Model, parts [][]porcupine.Operation, info porcupine.LinearizationInfo) string {
	describe := model.DescribeOperation
	if describe == nil {
		describe = func(in, out any) string { return fmt.Sprintf("%v -> %v", in, out) }
	}
	for p, partials := range info.PartialLinearizationsOperations() {
		if p >= len(parts) {
			break
		}
		var longest []porcupine.Operation
		for _, l := range partials {
			if len(l) > len(longest) {
				longest = l
			}
		}
		if len(longest) == len(parts[p]) {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "partition %d (%d operations): the longest linearization places %d; it ends", p, len(parts[p]), len(longest))
		from := max(0, len(longest)-4)
		for _, op := range longest[from:] {
			fmt.Fprintf(&b, "\n  c%d: %s", op.ClientId, describe(op.Input, op.Output))
		}
		b.WriteString("\n  and cannot go on with any of the operations left, the first of which are")
		placed := map[[2]int64]bool{}
		for _, op := range longest {
			placed[[2]int64{op.Call, op.Return}] = true
		}
		shown := 0
		for _, op := range parts[p] {
			if placed[[2]int64{op.Call, op.Return}] || shown == 3 {
				continue
			}
			fmt.Fprintf(&b, "\n  c%d: %s", op.ClientId, describe(op.Input, op.Output))
			shown++
		}
		return b.String()
	}
	return ""
}

func fileName(name string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, name)
}
