package strata_test

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/strata-es/strata"
	"github.com/strata-es/strata/examples/inventory"
	"github.com/strata-es/strata/examples/orders"
)

// An application's main, in its own Go module: strata's whole command line
// (serve, migrate, replay, tenants, placements, token, config) with the
// application's modules. `go build -o shop . && ./shop serve` serves them
// on a private PostgreSQL; `./shop migrate up` applies the engine's
// migration line and each module's.
func ExampleMain() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(strata.Main(ctx, os.Args[1:], orders.Module(), inventory.Module()))
}

// Main returns the exit code rather than exiting, so a program can run a
// command and go on. Commands that need no database run without one.
func ExampleMain_version() {
	code := strata.Main(context.Background(), []string{"version"}, orders.Module())
	fmt.Println("exit code:", code)
	// Output:
	// strata dev
	// exit code: 0
}
