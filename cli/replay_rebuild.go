package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/replay"
)

func replayRebuild(ctx context.Context, args []string, e env, stdout, stderr io.Writer) int {
	fs := newFlags("rebuild", stderr)
	names := fs.String("projection", "", "projection(s) to rebuild, comma-separated")
	all := fs.Bool("all", false, "rebuild every projection")
	tenant := fs.String("tenant", "", "rebuild only this tenant's rows")
	from := fs.String("from", "", "re-derive only the streams with events after this consistency token (order_details and order_list only)")
	dry := fs.Bool("dry-run", false, "print what would happen and change nothing")
	abort := fs.Bool("abort", false, "drop an interrupted rebuild's shadow tables and checkpoint")
	batch := fs.Int("batch", 0, "events per transaction (default 5000)")
	asJSON := fs.Bool("json", false, "print the plan or result as JSON")
	if pos, err := parseArgs(fs, args); err != nil {
		return exitUsage
	} else if len(pos) > 0 {
		return usageError(stderr, "rebuild takes no arguments (name projections with --projection)")
	}
	if (*names == "") == !*all {
		return usageError(stderr, "rebuild needs --projection NAME or --all")
	}
	if *batch < 0 || *batch > 10000 {
		return usageError(stderr, "--batch %d: want 1 to 10000", *batch)
	}
	o := replay.RebuildOptions{Tenant: *tenant, Actor: actor()}
	if *names != "" {
		for _, n := range strings.Split(*names, ",") {
			if n = strings.TrimSpace(n); n != "" {
				o.Projections = append(o.Projections, n)
			}
		}
	}
	if *from != "" {
		pos, err := event.ParseToken(*from)
		if err != nil {
			return usageError(stderr, "--from %q is not a consistency token (the position a command returned, or a checkpoint from `replay status`)", *from)
		}
		o.From = &pos
	}
	if *abort && (*all || len(o.Projections) != 1 || *from != "" || *dry) {
		return usageError(stderr, "--abort takes exactly one --projection (and --tenant for a tenant's rebuild) and nothing else")
	}
	re, err := openReplay(ctx, e, stderr, *batch)
	if err != nil {
		return replayError(stderr, err)
	}
	defer re.close()
	if *abort {
		if err := re.svc.Abort(ctx, o.Projections[0], *tenant); err != nil {
			return replayError(stderr, err)
		}
		fmt.Fprintf(stdout, "dropped the interrupted rebuild of %s\n", o.Projections[0])
		return exitOK
	}
	if *dry {
		plan, err := re.svc.Plan(ctx, o)
		if err != nil {
			return replayError(stderr, err)
		}
		printPlan(stdout, plan, o, *asJSON)
		return exitOK
	}
	// A rebuild allocates briskly and lives briefly: collecting garbage
	// less often saves a fifth of strata's CPU for a few hundred MB more.
	// A fold holds up to replay.DefaultFoldRows rows per projection in
	// memory, though, and five times that live heap is too much: past a
	// soft limit of 2 GiB (unless GOMEMLIMIT says otherwise) the collector
	// works harder instead.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	if os.Getenv("GOMEMLIMIT") == "" {
		defer debug.SetMemoryLimit(debug.SetMemoryLimit(2 << 30))
	}
	bar := newProgressBar(stderr)
	o.Progress = bar.update
	res, err := re.svc.Rebuild(ctx, o)
	bar.end()
	if err != nil {
		printRebuilt(stdout, res, *asJSON)
		return replayError(stderr, err)
	}
	printRebuilt(stdout, res, *asJSON)
	return exitOK
}
