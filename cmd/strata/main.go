// Command strata is the one binary of strata: the command and query HTTP
// APIs and the projectors (serve), schema migrations (migrate), the
// replay/backfill tool (replay) and development helpers (token). This
// package is the composition root: the only place that reads flags and the
// environment and chooses concrete adapters.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // the operation failed; the message says why and what to do
	exitUsage   = 2 // bad flags or arguments
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

const usage = `strata — an event-sourced CQRS service

Usage:
  strata serve   [--addr :8080] [--roles command,query,projector]   run the APIs and projectors
  strata migrate up|status|down [--steps N]                         manage the database schema
  strata replay  status|rebuild|dlq ...                             projections' status, rebuilds, dead letters (replay help)
  strata tenants list|show|provision|suspend|resume|quotas ...      the tenant directory (tenants help)
  strata placements add|list|status ...                             the databases tenants are placed in (placements help)
  strata token   --tenant T [--sub S] [--ttl 24h] [--scope admin]   print a development token (--scope platform: the directory's routes)
  strata token   --console [--tenant T --scope admin,platform]     print a login URL of the console (/console, docs/console.md)
  strata bench   [--quick] [--out FILE] [--workloads a,b]          measure hot paths against raw PostgreSQL
  strata db      reset                                              stop the embedded PostgreSQL and delete its data
  strata config  [--json]                                           every setting of the engine and of each module, and which are set
  strata version                                                    print the version

Configuration comes from the environment; see README.md ("Configuration").
With no DATABASE_URL, strata runs a private PostgreSQL under $STRATA_DATA_DIR (default ./.strata).
`

// run is main without the process: tests call it with their own
// environment and output.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	env := newEnv(getenv)
	switch args[0] {
	case "serve":
		return cmdServe(ctx, args[1:], env, stdout, stderr)
	case "migrate":
		return cmdMigrate(ctx, args[1:], env, stdout, stderr)
	case "replay":
		return cmdReplay(ctx, args[1:], env, stdout, stderr)
	case "tenants":
		return cmdTenants(ctx, args[1:], env, stdout, stderr)
	case "placements":
		return cmdPlacements(ctx, args[1:], env, stdout, stderr)
	case "token":
		return cmdToken(args[1:], env, stdout, stderr)
	case "bench":
		return cmdBench(ctx, args[1:], stdout, stderr)
	case "db":
		return cmdDB(ctx, args[1:], env, stdout, stderr)
	case "config":
		return cmdConfig(args[1:], env, stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "strata", version)
		return exitOK
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "strata: unknown command %q\n\n%s", args[0], usage)
	return exitUsage
}

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"
