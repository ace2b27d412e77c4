package bench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"
)

// Exit codes of Command, as the engine's command line's.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// Command is `strata bench ARGS`: it parses the flags, runs the workloads
// (Execute) and writes the table, the JSON results and, with --docs, the
// markdown table and the plot. It returns the exit code.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == minimalArgs {
		return runMinimalHandler(ctx, args[1:], stderr) // the baseline's own process (minimal.go)
	}
	if len(args) > 0 && args[0] == projectorChildArgs {
		return runProjectorChild(ctx, args[1:], stderr) // a projector process of the partitions workload (partitions.go)
	}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "a one-minute smoke run of every workload")
	out := fs.String("out", "bench-results/bench.json", "JSON results file")
	docs := fs.String("docs", "", "also write DIR/latest.md (the table) and DIR/latency.png (the plot)")
	only := fs.String("workloads", "", "comma-separated subset of: "+strings.Join(Names(), ","))
	runs := fs.Int("runs", 0, "repetitions per variant (default 3, quick 1)")
	dur := fs.Duration("duration", 0, "measured time per run (default 10s, quick 2s)")
	warmup := fs.Duration("warmup", 0, "unmeasured time before each run (default 2s, quick 500ms)")
	events := fs.Int("events", 0, "events seeded for the catch-up and rebuild workloads (default 1,000,000, quick 20,000)")
	pgStats := fs.Int("pg-stats", 0, "load pg_stat_statements and print each workload's top N statements by execution time")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of this process (the in-process workloads: append, catchup, rebuild, verify) to FILE")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(stderr, "strata bench:", err)
			return exitFailure
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "strata bench:", err)
			return exitFailure
		}
		defer pprof.StopCPUProfile()
	}
	cfg := Full()
	if *quick {
		cfg = Quick()
	}
	if *runs > 0 {
		cfg.Runs = *runs
	}
	if *dur > 0 {
		cfg.Duration = *dur
	}
	if *warmup > 0 {
		cfg.Warmup = *warmup
	}
	if *only != "" {
		cfg.Workloads = strings.Split(*only, ",")
	}
	if *events > 0 {
		cfg.CatchUp = *events
	}
	cfg.PGStats = *pgStats
	cfg.Progress = stderr
	if exe, err := os.Executable(); err == nil {
		cfg.StrataPath = exe
	}
	dir, err := os.MkdirTemp("", "strata-bench-")
	if err != nil {
		fmt.Fprintln(stderr, "strata bench:", err)
		return exitFailure
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil { // the postgres user must traverse it
		fmt.Fprintln(stderr, "strata bench:", err)
		return exitFailure
	}
	rep, err := Execute(ctx, dir+"/pg", cfg)
	if rep != nil && len(rep.Results) > 0 {
		rep.WriteTable(stdout)
		if *out != "" {
			if mkErr := os.MkdirAll(dirOf(*out), 0o755); mkErr == nil {
				if werr := rep.WriteJSON(*out); werr != nil {
					fmt.Fprintln(stderr, "strata bench: write results:", werr)
				} else {
					fmt.Fprintln(stdout, "results written to", *out)
				}
			}
		}
		if *docs != "" {
			if werr := rep.WriteMarkdown(*docs + "/latest.md"); werr != nil {
				fmt.Fprintln(stderr, "strata bench: write table:", werr)
			}
			if werr := rep.WritePlot(*docs + "/latency.png"); werr != nil {
				fmt.Fprintln(stderr, "strata bench: plot:", werr)
			} else {
				fmt.Fprintf(stdout, "table and plot written to %s/latest.md and %s/latency.png\n", *docs, *docs)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "strata bench:", err)
		return exitFailure
	}
	return exitOK
}

func dirOf(path string) string {
	if i := strings.LastIndexByte(path, '/'); i > 0 {
		return path[:i]
	}
	return "."
}
