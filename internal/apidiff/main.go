package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
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

// compare runs one comparison and prints it.
func compare(ctx context.Context, c config, w io.Writer) error {
	if c.cacheDir == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			dir = os.TempDir()
		}
		c.cacheDir = filepath.Join(dir, "strata-apidiff")
	}
	if err := os.MkdirAll(c.cacheDir, 0o755); err != nil {
		return err
	}
	// apidiff runs in other directories (the base's tree): an absolute path.
	bin, err := filepath.Abs(c.apidiff)
	if err != nil {
		return err
	}
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("the apidiff binary: %w", err)
	}
	c.apidiff = bin
	b, err := chooseBase(ctx, c.dir, c.base, c.mainRef)
	if err != nil {
		return err
	}
	oldFile, oldMains, err := oldAPI(ctx, c, b.commit, w)
	if err != nil {
		return err
	}
	newDir, newName := c.dir, "the working tree"
	if c.head != "" {
		head, err := commitOf(ctx, c.dir, c.head)
		if err != nil {
			return fmt.Errorf("head %s: not a commit here: %w", c.head, err)
		}
		dir, unlock, err := tree(ctx, c, head, "head")
		if err != nil {
			return err
		}
		defer unlock()
		newDir, newName = dir, c.head+" ("+short(head)+")"
	}
	text, newMains, err := newAPI(ctx, c, newDir, oldFile)
	if err != nil {
		return err
	}
	module, err := modulePath(newDir)
	if err != nil {
		return err
	}
	changes := parse(text, module)
	changes = slices.DeleteFunc(changes, func(ch change) bool { return oldMains[ch.pkg] || newMains[ch.pkg] })

	fmt.Fprintf(w, "apidiff: the exported API of %s, %s against %s (%s)\n", module, newName, short(b.commit), b.why)
	incompatible := render(w, changes, module)
	if incompatible == 0 {
		return nil
	}
	changed, err := changelogChanged(ctx, c.dir, b.commit, c.head)
	switch {
	case err != nil:
		fmt.Fprintf(w, "apidiff: could not tell whether CHANGELOG.md changed: %v\n", err)
	case !changed:
		fmt.Fprintf(w, "apidiff: REMINDER: %d incompatible change(s) and CHANGELOG.md is the same as in %s: "+
			"a breaking change is a decision, recorded under \"Unreleased\" in CHANGELOG.md.\n", incompatible, short(b.commit))
	default:
		fmt.Fprintf(w, "apidiff: CHANGELOG.md changed since %s: check that it names the incompatible change(s) above.\n", short(b.commit))
	}
	return nil
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
