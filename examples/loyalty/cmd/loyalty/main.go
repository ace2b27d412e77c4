// Command loyalty is the loyalty service: strata's whole command line
// (serve, migrate, replay, tenants, token, ...) with the loyalty module.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/strata-es/strata"

	"example.com/loyalty"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(strata.Main(ctx, os.Args[1:], loyalty.Module()))
}
