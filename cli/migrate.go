package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/strata-es/strata/db"
)

func cmdMigrate(ctx context.Context, args []string, e env, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: strata migrate up|status|down [--steps N] | partition-log")
		return exitUsage
	}
	fs := flag.NewFlagSet("migrate "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	steps := fs.Int("steps", 1, "down: how many migrations to revert")
	if err := fs.Parse(args[1:]); err != nil {
		return exitUsage
	}
	logger, err := newLogger(e, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "strata migrate:", err)
		return exitUsage
	}
	url, _, stopDB, err := e.database(ctx, logger) // the owner's URL: migrations create and alter the schema as strata_owner
	if err != nil {
		fmt.Fprintln(stderr, "strata migrate:", err)
		return exitFailure
	}
	defer stopDB()
	logf := func(format string, args ...any) { fmt.Fprintf(stdout, format+"\n", args...) }
	lines := e.mods.Lines()
	switch args[0] {
	case "up":
		if err = db.Up(ctx, url, logf, lines...); err == nil {
			err = provisionLogins(ctx, e, url, logf, stderr)
		}
		if err == nil {
			// Then every placement, one at a time (migrate_placements.go).
			err = migratePlacements(ctx, e, url, stdout)
		}
	case "partition-log":
		// The log by partition, which partitioned projections read
		// (db.EnablePartitionLog): the control plane's, then every
		// placement's. It rewrites each events table once.
		err = enablePartitionLogs(ctx, url, stdout)
	case "down":
		// The control plane's only: placements are reverted one by one
		// with their own URL as DATABASE_URL.
		err = db.Down(ctx, url, *steps, logf, lines...)
	case "status":
		var st []db.MigrationStatus
		if st, err = db.Status(ctx, url, lines...); err == nil {
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "LINE\tVERSION\tNAME\tAPPLIED")
			for _, m := range st {
				applied := "pending"
				if !m.AppliedAt.IsZero() {
					applied = m.AppliedAt.UTC().Format("2006-01-02 15:04:05Z")
				}
				if m.Adopted {
					applied += " (adopted: created by the engine's line before modules)"
				}
				if m.Modified {
					applied += " (modified since it was applied!)"
				}
				fmt.Fprintf(tw, "%s\t%03d\t%s\t%s\n", m.Line, m.Version, m.Name, applied)
			}
			tw.Flush()
			pending := 0
			for _, m := range st {
				if m.AppliedAt.IsZero() {
					pending++
				}
			}
			// Every placement's schema after the control plane's. A
			// control plane not migrated yet has no registry to read.
			if ps, perr := placementsSchema(ctx, e, url); perr != nil && pending == 0 {
				err = perr
			} else if perr == nil {
				printPlacementsSchema(stdout, ps)
			}
		}
	default:
		fmt.Fprintf(stderr, "strata migrate: unknown subcommand %q: want up, status, down or partition-log\n", args[0])
		return exitUsage
	}
	if err != nil {
		fmt.Fprintln(stderr, "strata migrate:", err)
		return exitFailure
	}
	return exitOK
}

// provisionLogins creates the serving logins serve will connect as (the
// configured STRATA_APP_DATABASE_URL and STRATA_PROJECTOR_DATABASE_URL,
// with their passwords, or the passwordless logins strata derives) and
// grants them their roles. Failing to create a configured login fails the
// command; failing to create a derived one (a DATABASE_URL login without
// CREATEROLE, whose operator manages roles) is a warning: serve says what
// to set if it needs them.
func provisionLogins(ctx context.Context, e env, owner string, logf db.Logf, stderr io.Writer) error {
	logins, err := e.servingLogins(owner)
	if err != nil {
		return err
	}
	var errs []error
	for i, l := range logins {
		variable := []string{"STRATA_APP_DATABASE_URL", "STRATA_PROJECTOR_DATABASE_URL"}[i]
		err := db.EnsureLogins(ctx, owner, []db.Login{l}, logf)
		switch {
		case err == nil:
		case e.str(variable, "") != "":
			errs = append(errs, fmt.Errorf("%s: %w", variable, err))
		default:
			fmt.Fprintf(stderr, "strata migrate: warning: %v (serve needs %s, or this login)\n", err, variable)
		}
	}
	return errors.Join(errs...)
}
