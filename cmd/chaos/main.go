// Command chaos is strata's fault harness (`make chaos`, docs/chaos.md): it
// runs the strata binary under faults, checks the recorded history against
// the event store and the read models, and prints a result table. It is a
// second binary, not part of strata; the library is cmd/chaos/harness.
//
// Exit codes: 0 every scenario passed, 1 a scenario failed (the checker
// found a violation), 2 the harness could not run (bad flags, no
// PostgreSQL, no binary).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	chaos "github.com/strata-es/strata/cmd/chaos/harness"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := chaos.Full()
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.Strata, "strata", "bin/strata", "the strata binary under test")
	seed := fs.Int64("seed", 0, "seed of every random choice (0: $CHAOS_SEED, else the time); printed, so a run can be repeated")
	scenarios := fs.String("scenarios", strings.Join(chaos.AllScenarios, ","), "scenarios to run, in order")
	fs.IntVar(&cfg.PGPort, "pg-port", cfg.PGPort, "PostgreSQL port on 127.0.0.1 (0: any free port)")
	fs.StringVar(&cfg.WorkDir, "workdir", "", "work directory (default: a new one under $TMPDIR, removed when every scenario passes)")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the work directory even when every scenario passes")
	fs.BoolVar(&cfg.Discard, "discard", false, "remove the work directory even when a scenario fails")
	fs.StringVar(&cfg.LogLevel, "log-level", "warn", "STRATA_LOG_LEVEL of the strata processes")
	soak := fs.Duration("soak", 0, "how long R18 (the soak) runs its open loop (default 3m; make soak: $SOAK, 30m); faults, sampling and the RSS criterion scale with it")
	fs.StringVar(&cfg.DocsDir, "docs", "", "also write R18's plot and summary (soak.png, latest.md) into this directory (make soak: docs/soak)")
	restoreEvents := fs.Int("restore-events", chaos.DefaultRestore().SeedEvents, "events seeded into RESTORE's log before the load, so that the restore is timed on a log of that size")
	short := fs.Bool("short", false, "the small sizes of the test subset (R1 with two kill rounds; R11, R12 with 300 requests; a 7 s STARVE)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *short {
		keep := cfg
		cfg = chaos.Short()
		cfg.Strata, cfg.PGPort, cfg.WorkDir, cfg.Keep, cfg.Discard, cfg.LogLevel = keep.Strata, keep.PGPort, keep.WorkDir, keep.Keep, keep.Discard, keep.LogLevel
		cfg.DocsDir = keep.DocsDir
	}
	if cfg.Restore.Processes == 0 {
		cfg.Restore = chaos.DefaultRestore()
	}
	cfg.Restore.SeedEvents = *restoreEvents
	if *soak != 0 {
		cfg.R18.Duration = *soak
	}
	cfg.Scenarios = nil
	for _, s := range strings.Split(*scenarios, ",") {
		if s = strings.ToUpper(strings.TrimSpace(s)); s != "" {
			cfg.Scenarios = append(cfg.Scenarios, s)
		}
	}
	cfg.Seed = *seed
	if cfg.Seed == 0 {
		if v := os.Getenv("CHAOS_SEED"); v != "" {
			if _, err := fmt.Sscan(v, &cfg.Seed); err != nil {
				fmt.Fprintf(stderr, "chaos: CHAOS_SEED=%q: want an integer\n", v)
				return 2
			}
		} else {
			cfg.Seed = time.Now().UnixNano() % 1_000_000_007
		}
	}
	cfg.Out = stdout
	began := time.Now()
	fmt.Fprintf(stdout, "chaos: seed %d (repeat with --seed %d or CHAOS_SEED=%d)\n", cfg.Seed, cfg.Seed, cfg.Seed)
	results, err := chaos.Run(ctx, cfg)
	if len(results) > 0 {
		fmt.Fprintln(stdout)
		chaos.PrintNotes(stdout, results)
		fmt.Fprintln(stdout)
		chaos.PrintTable(stdout, results)
	}
	fmt.Fprintf(stdout, "\nchaos: seed %d, %d scenario(s) in %s\n", cfg.Seed, len(results), time.Since(began).Round(time.Second))
	if err != nil && len(results) == 0 {
		fmt.Fprintln(stderr, "chaos:", err)
		return 2
	}
	failed := err != nil || len(results) < len(cfg.Scenarios)
	for _, r := range results {
		failed = failed || !r.Passed()
	}
	if failed {
		fmt.Fprintln(stdout, "chaos: FAIL")
		return 1
	}
	fmt.Fprintln(stdout, "chaos: PASS")
	return 0
}
