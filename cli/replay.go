package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/strata-es/strata/replay"
)

// Exit codes of `strata replay` beyond exitOK, exitFailure and exitUsage
// (docs/replay.md).
const (
	exitNothing = 3 // nothing to do, or not found: a retry of what is not parked, an unknown dead letter
	exitBusy    = 4 // another operation holds the projection, or its runner did not yield: retry later
)

const replayUsage = `strata replay — status, rebuilds and the dead-letter store of the read models

Usage:
  strata replay status [--json]
  strata replay rebuild --projection NAME[,NAME] | --all [--tenant T] [--from TOKEN] [--dry-run] [--json]
  strata replay rebuild --projection NAME [--tenant T] --abort
  strata replay verify [--projection P[,P]] [--tenant T] [--deep] [--json]
  strata replay processes list [--process P] [--status S] [--parked] [--stuck 5m] [--tenant T] [--limit N] [--json]
  strata replay processes show PROCESS INSTANCE --tenant T [--json]
  strata replay dlq list [--projection P] [--tenant T] [--stream S] [--status parked|retried|discarded|superseded|all] [--limit N] [--json]
  strata replay dlq show ID [--tenant T] [--json]
  strata replay dlq retry ID | --stream S | --all [--projection P] [--tenant T] [--json]
  strata replay dlq discard ID --reason TEXT [--tenant T]

It connects with DATABASE_URL (or the embedded PostgreSQL) and works as the
projector role (through STRATA_PROJECTOR_DATABASE_URL's login when set);
rebuilds create and swap tables as strata_owner on DATABASE_URL's
connection. --placement NAME (before or after the subcommand) runs it on a
placement's database instead, found in DATABASE_URL's registry (` + "`strata placements list`" + `).

Exit codes: 0 done; 1 failed (the message says what to do next); 2 bad usage;
3 nothing to do or not found; 4 busy (another operation holds the
projection): retry later; 5 verify found a ledger that disagrees with the
store. See docs/replay.md.
`

// replayError prints err with the prefix and returns its exit code.
func replayError(stderr io.Writer, err error) int {
	fmt.Fprintln(stderr, "strata replay:", err)
	switch {
	case errors.Is(err, replay.ErrInvalid):
		return exitUsage
	case errors.Is(err, replay.ErrNothingToDo), errors.Is(err, replay.ErrNotFound):
		return exitNothing
	case errors.Is(err, replay.ErrBusy):
		return exitBusy
	}
	return exitFailure
}

func usageError(stderr io.Writer, format string, args ...any) int {
	fmt.Fprintf(stderr, "strata replay: "+format+"\n\n", args...)
	fmt.Fprint(stderr, replayUsage)
	return exitUsage
}

func cmdReplay(ctx context.Context, args []string, e env, stdout, stderr io.Writer) int {
	args, e, err := replayPlacement(ctx, args, e, stderr)
	if err != nil {
		return replayError(stderr, err)
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, replayUsage)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, replayUsage)
		return exitOK
	case "status":
		return replayStatus(ctx, args[1:], e, stdout, stderr)
	case "rebuild":
		return replayRebuild(ctx, args[1:], e, stdout, stderr)
	case "verify":
		return replayVerify(ctx, args[1:], e, stdout, stderr)
	case "processes":
		return replayProcesses(ctx, args[1:], e, stdout, stderr)
	case "dlq":
		if len(args) < 2 {
			return usageError(stderr, "dlq needs a subcommand: list, show, retry or discard")
		}
		switch args[1] {
		case "list":
			return dlqList(ctx, args[2:], e, stdout, stderr)
		case "show":
			return dlqShow(ctx, args[2:], e, stdout, stderr)
		case "retry":
			return dlqRetry(ctx, args[2:], e, stdout, stderr)
		case "discard":
			return dlqDiscard(ctx, args[2:], e, stdout, stderr)
		}
		return usageError(stderr, "unknown dlq subcommand %q: want list, show, retry or discard", args[1])
	}
	return usageError(stderr, "unknown subcommand %q: want status, rebuild, verify, processes or dlq", args[0])
}

// parseArgs parses flags placed before and after positional arguments.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("replay "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}
