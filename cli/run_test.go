package cli

import (
	"context"
	"io"

	"github.com/strata-es/strata/examples"
)

// run is Run with the example modules, as the strata binary runs it: the
// command-line tests drive the engine through them.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	return Run(ctx, args, getenv, stdout, stderr, examples.All()...)
}

// exampleEnv is newEnv with the example modules.
func exampleEnv(getenv func(string) string) env { return newEnv(getenv, examples.All()) }
