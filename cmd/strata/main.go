// Command strata is the strata binary of this repository: the engine's
// command line (package cli, through strata.Main) run with the example
// modules (orders, inventory, fulfilment), plus `strata bench`, the
// benchmark harness, which measures the engine with those modules. An
// application's own main looks like this one with its own modules.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/strata-es/strata"
	"github.com/strata-es/strata/cmd/strata/bench"
	"github.com/strata-es/strata/examples"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) > 1 && os.Args[1] == "bench" {
		os.Exit(bench.Command(ctx, os.Args[2:], os.Stdout, os.Stderr))
	}
	os.Exit(strata.Main(ctx, os.Args[1:], examples.All()...))
}
