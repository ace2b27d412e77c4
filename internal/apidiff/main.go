package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run is main without the process, for the tests. Only bad flags give a
// non-zero exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("apidiff", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	fs.StringVar(&c.apidiff, "apidiff", "", "the golang.org/x/exp/cmd/apidiff binary (required)")
	fs.StringVar(&c.dir, "C", ".", "the repository's root, where go.mod is")
	fs.StringVar(&c.base, "base", "", "the old version, a git revision (default: the previous commit of main, see chooseBase)")
	fs.StringVar(&c.head, "head", "", "the new version, a git revision (default: the working tree)")
	fs.StringVar(&c.mainRef, "main", "main", "the main branch's name")
	fs.StringVar(&c.cacheDir, "cache", "", "where the base's export data is kept (default: the user's cache directory)/strata-apidiff")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if c.apidiff == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: apidiff -apidiff PATH [-C dir] [-base rev] [-head rev] [-main branch] [-cache dir]")
		return 2
	}
	if err := compare(ctx, c, stdout); err != nil {
		var none errNothingToCompare
		if errors.As(err, &none) {
			fmt.Fprintf(stdout, "apidiff: nothing to compare: %v\n", err)
		} else {
			fmt.Fprintf(stdout, "apidiff: not compared: %v\n", err)
		}
	}
	return 0
}

// config is one comparison.
type config struct {
	dir      string
	apidiff  string
	base     string
	head     string
	mainRef  string
	cacheDir string
}

// errNothingToCompare: the history holds no base (the first commit, a
// shallow clone). Not a fault of the tree: the message says what to do.
type errNothingToCompare struct{ why string }

func (e errNothingToCompare) Error() string { return e.why }
