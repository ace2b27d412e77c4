// Package cli is strata's composition root (ARCHITECTURE decision 15):
// the whole strata command line — the command and query HTTP APIs and the
// projectors (serve), schema migrations (migrate), the replay/backfill tool
// (replay), the tenant directory (tenants), placements, tokens — run with
// the modules an application hands it. It is the only place that reads
// flags and the environment and chooses concrete adapters. An application's
// main calls strata.Main (the root package), which calls Main here; the
// strata binary (cmd/strata) is such a main with the example modules. It
// never names a module itself.
package cli

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/strata-es/strata/module"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // the operation failed; the message says why and what to do
	exitUsage   = 2 // bad flags or arguments
)

// Main runs the command line args (os.Args[1:]) of an application made
// of mods, with the process's environment and standard output and error,
// and returns the exit code. ctx ends the command (a signal, say).
func Main(ctx context.Context, args []string, mods ...module.Module) int {
	return Run(ctx, args, os.Getenv, os.Stdout, os.Stderr, mods...)
}

const usage = `strata — an event-sourced CQRS service

Usage:
  strata serve   [--addr :8080] [--roles command,query,projector]   run the APIs and projectors
  strata migrate up|status|down [--steps N]                         manage the database schema
  strata replay  status|rebuild|dlq ...                             projections' status, rebuilds, dead letters (replay help)
  strata tenants list|show|provision|suspend|resume|quotas ...      the tenant directory (tenants help)
  strata placements add|list|status ...                             the databases tenants are placed in (placements help)
  strata subjects erase T SUBJECT --reason R [--json]               forget one data subject of a tenant (subjects help)
  strata keys    status|rotate [--json]                             the keys of personal data: status, rotation (keys help)
  strata token   --tenant T [--sub S] [--ttl 24h] [--scope admin]   print a development token (--scope platform: the directory's routes)
  strata token   --console [--tenant T --scope admin,platform]     print a login URL of the console (/console, docs/console.md)
  strata db      reset                                              stop the embedded PostgreSQL and delete its data
  strata config  [--json]                                           every setting of the engine and of each module, and which are set
  strata version                                                    print the version

Configuration comes from the environment; see README.md ("Configuration").
With no DATABASE_URL, strata runs a private PostgreSQL under $STRATA_DATA_DIR (default ./.strata).
`

// Run is Main without the process: tests and embedding programs call it
// with their own environment and output.
func Run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, mods ...module.Module) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	set := module.Set(mods)
	if err := set.Check(); err != nil {
		fmt.Fprintln(stderr, "strata: the application's modules:", err)
		return exitFailure
	}
	env := newEnv(getenv, set)
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
	case "keys":
		return cmdKeys(ctx, args[1:], env, stdout, stderr)
	case "subjects":
		return cmdSubjects(ctx, args[1:], env, stdout, stderr)
	case "token":
		return cmdToken(args[1:], env, stdout, stderr)
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

// version is set at build time with -ldflags
// "-X github.com/strata-es/strata/cli.version=...".
var version = "dev"
