package projectiontest

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/replay"
)

// RewriteEnv names the environment variable that makes Check write the
// golden file instead of comparing with it (STRATA_REWRITE_GOLDEN=1 go
// test ./...).
const RewriteEnv = "STRATA_REWRITE_GOLDEN"

// Config is one projection and the history to run it over.
type Config struct {
	// Projection writes into its live tables.
	Projection projections.Projection
	// Registry decodes the events (the module's codecs suffice).
	Registry *event.Registry
	// Lines are the migration lines its tables need (the module's own).
	Lines []db.Line
	// Events is the history, in log order (Load a recorded one).
	Events []Recorded
	// Golden, when set, is the file the rows must equal (see RewriteEnv).
	Golden string
}

// Check runs the projection over the history against real PostgreSQL in
// every way the engine runs it and requires the same rows from each:
//
//   - event by event (the path that attributes a failure to one event);
//   - set-based, when it is a projections.BatchProjection: in one large
//     batch (every row made within the batch) and in batches of 13 events
//     (rows made in one batch and changed in later ones); a set-based batch
//     that fails and is applied event by event instead fails the test, since
//     the runner's fallback would otherwise hide it;
//   - rebuilt by `strata replay rebuild` (shadow tables swapped in) after
//     the event-by-event run, when it is a projections.Retargetable; a
//     projections.Folder's rebuild must fold the whole log, and a second
//     rebuild folds the first read alone and applies the rest.
//
// No event may park: a valid history applies cleanly. It returns the rows
// (Dump's format), compared with the golden file when one is named.
func Check(t *testing.T, cfg Config) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := cfg.Projection

	perEvent, d := run(ctx, t, cfg, projections.RunnerConfig{BatchSize: 7, PerEvent: true})
	if _, ok := p.(projections.Retargetable); ok {
		_, folds := p.(projections.Folder)
		// A rebuild as the operator runs it (a Folder folds the whole log),
		// then one that folds only the first read of 13 events and applies
		// the rest.
		for _, rc := range []struct {
			name     string
			foldRows int
			runner   projections.RunnerConfig
		}{{"rebuilt", 0, projections.RunnerConfig{}}, {"rebuilt with a fold of one read", 1, projections.RunnerConfig{BatchSize: 7, CatchUpBatch: 13}}} {
			if rc.foldRows != 0 && !folds {
				continue
			}
			svc, err := replay.New(replay.Config{Pool: d.Projector, App: d.App, Log: postgres.New(d.App, d.Projector),
				Projections: []projections.Projection{p}, Registry: cfg.Registry, Logger: quiet(), FoldRows: rc.foldRows, Runner: rc.runner})
			if err != nil {
				t.Fatal(err)
			}
			res, err := svc.Rebuild(ctx, replay.RebuildOptions{Projections: []string{p.Name()}})
			if err != nil {
				t.Fatalf("rebuild %s: %v", p.Name(), err)
			}
			if folds {
				r := res.Projections[0]
				switch {
				case r.Folded == 0:
					t.Errorf("%s: the rebuild folded nothing: %v", rc.name, r.Notes)
				case rc.foldRows == 0 && r.Folded != r.Events:
					t.Errorf("%s: the rebuild folded %d of %d events", rc.name, r.Folded, r.Events)
				case rc.foldRows != 0 && r.Folded >= r.Events:
					t.Errorf("%s: the rebuild folded all %d events, want the first read only", rc.name, r.Events)
				}
			}
			rebuilt := Dump(ctx, t, d.AdminURL, p.Tables()...)
			if rebuilt != perEvent {
				t.Errorf("%s rows differ from event-by-event rows:\n%s", rc.name, Diff(perEvent, rebuilt))
			}
			// The rebuilt generation's ledger counts every event.
			verdicts, err := svc.Verify(ctx, replay.VerifyOptions{Projections: []string{p.Name()}})
			if err != nil {
				t.Fatalf("%s: verify: %v", rc.name, err)
			}
			if len(verdicts) == 0 {
				t.Errorf("%s: verify gave no verdict", rc.name)
			}
			for _, v := range verdicts {
				if !v.Complete || v.LedgerEvents != v.StoreEvents {
					t.Errorf("%s: verify of tenant %s: %+v", rc.name, v.Tenant, v)
				}
			}
		}
	}
	if _, ok := p.(projections.BatchProjection); ok {
		for _, size := range []int{1000, 13} {
			warnings := &warningLog{}
			setBased, _ := run(ctx, t, cfg, projections.RunnerConfig{BatchSize: size, Logger: slog.New(warnings)})
			if setBased != perEvent {
				t.Errorf("set-based rows (batches of %d) differ from event-by-event rows:\n%s", size, Diff(perEvent, setBased))
			}
			for _, w := range warnings.all() {
				t.Errorf("set-based run (batches of %d) warned: %s", size, w)
			}
		}
	}
	if cfg.Golden != "" {
		compareGolden(t, cfg.Golden, perEvent)
	}
	return perEvent
}

// run applies the history in a fresh database with one runner configured
// by rc and returns the rows.
func run(ctx context.Context, t *testing.T, cfg Config, rc projections.RunnerConfig) (string, *testdb.DB) {
	t.Helper()
	d := testdb.New(t, cfg.Lines...)
	store := postgres.New(d.App, d.Projector)
	head, err := Append(ctx, store, cfg.Events)
	if err != nil {
		t.Fatal(err)
	}
	rc.Registry, rc.DeadLetters = cfg.Registry, true
	if rc.Logger == nil {
		rc.Logger = quiet()
	}
	rc.Failures = projections.FailurePolicy{Attempts: 1}
	r, err := projections.NewRunner(cfg.Projection, store, d.Projector, rc)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.CatchUp(ctx, head); err != nil {
		t.Fatalf("%s over %d events: %v", cfg.Projection.Name(), len(cfg.Events), err)
	}
	if cp := Checkpoint(ctx, t, d.AdminURL, cfg.Projection.Name()); cp.Position != head {
		t.Fatalf("%s stopped at %s, the history ends at %s", cfg.Projection.Name(), cp.Position, head)
	}
	var parked int
	conn := connect(ctx, t, d.AdminURL)
	defer conn.Close(context.Background())
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM strata.dead_letters WHERE projection = $1`, cfg.Projection.Name()).Scan(&parked); err != nil {
		t.Fatal(err)
	}
	if parked > 0 {
		t.Fatalf("%s parked %d event(s) of a valid history (see strata.dead_letters)", cfg.Projection.Name(), parked)
	}
	return Dump(ctx, t, d.AdminURL, cfg.Projection.Tables()...), d
}

func compareGolden(t *testing.T, path, got string) {
	t.Helper()
	if os.Getenv(RewriteEnv) != "" {
		// A module's first golden file: its folder may not exist yet.
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with %s=1 to write it)", err, RewriteEnv)
	}
	if string(want) != got {
		t.Errorf("rows differ from %s (run with %s=1 to accept):\n%s", path, RewriteEnv, Diff(string(want), got))
	}
}

// Diff lists the lines only in want (-) and only in got (+), at most 40 of
// each.
func Diff(want, got string) string {
	in := func(s string) map[string]int {
		m := map[string]int{}
		for _, l := range strings.Split(s, "\n") {
			m[l]++
		}
		return m
	}
	w, g := in(want), in(got)
	var b strings.Builder
	n := 0
	for _, l := range strings.Split(want, "\n") {
		if g[l] < w[l] && n < 40 {
			b.WriteString("- " + l + "\n")
			n++
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if w[l] < g[l] && n < 80 {
			b.WriteString("+ " + l + "\n")
			n++
		}
	}
	return b.String()
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// warningLog is a slog.Handler keeping the messages of warnings and errors.
type warningLog struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warningLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warningLog) WithAttrs([]slog.Attr) slog.Handler           { return w }
func (w *warningLog) WithGroup(string) slog.Handler                { return w }
func (w *warningLog) Handle(_ context.Context, r slog.Record) error {
	msg := r.Message
	r.Attrs(func(a slog.Attr) bool {
		msg += " " + a.String()
		return true
	})
	w.mu.Lock()
	w.msgs = append(w.msgs, msg)
	w.mu.Unlock()
	return nil
}

func (w *warningLog) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.msgs...)
}
