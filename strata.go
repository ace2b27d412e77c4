// Package strata is an event-sourced CQRS engine as a Go library: a team
// brings its own bounded contexts as modules (package module) and runs them
// with Main from its own main package, in its own Go module:
//
//	func main() {
//		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
//		defer stop()
//		os.Exit(strata.Main(ctx, os.Args[1:], billing.Module()))
//	}
//
// The binary then has every command of strata — serve (the command and
// query HTTP APIs, the projectors, the process managers, the relay),
// migrate, replay, tenants, placements, token, config — with the engine's
// migrations and the modules'. docs/extending.md is the guide; the
// repository's cmd/strata is such a main with the example modules.
package strata

import (
	"context"

	"github.com/strata-es/strata/cli"
	"github.com/strata-es/strata/module"
)

// Module is one bounded context: its codecs, migration line, settings,
// command routes, projections, query routes and process managers.
type Module = module.Module

// Main runs the strata command line args (os.Args[1:]) with the
// application's modules, reading the process's environment and writing to
// its standard output and error, and returns the exit code for os.Exit.
// ctx ends a long command (serve, a rebuild) cleanly.
func Main(ctx context.Context, args []string, modules ...Module) int {
	return cli.Main(ctx, args, modules...)
}
