package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/placement"
)

// Fleet-wide migrations (issue 32 §2): `strata migrate up` migrates the
// control plane (DATABASE_URL) and then every placement of its registry,
// one at a time; `strata migrate status` says how far each one is. A
// placement that cannot be migrated (unreachable, a failing migration) is
// reported and the others are migrated all the same; running the command
// again resumes where each database stands (a migration is one
// transaction, recorded with it).

// otherPlacements lists the registry's placements other than the pool (of
// every status: a retired placement still holds its tenants' history and
// is migrated too), on the control plane's owner URL.
func otherPlacements(ctx context.Context, ownerURL string) ([]placement.Placement, error) {
	pool, err := db.OpenPool(ctx, ownerURL, db.PoolConfig{Role: db.RoleProjector, MaxConns: 2, AppName: "strata-migrate"})
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	list, err := placement.NewRegistry(pool).List(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the placements: %w", err)
	}
	var out []placement.Placement
	for _, p := range list {
		if p.Name != placement.Pool {
			out = append(out, p)
		}
	}
	return out, nil
}

// migratePlacements migrates every placement after the control plane.
func migratePlacements(ctx context.Context, e env, ownerURL string, stdout io.Writer) error {
	ps, err := otherPlacements(ctx, ownerURL)
	if err != nil {
		return err
	}
	var failed []string
	for _, p := range ps {
		fmt.Fprintf(stdout, "placement %s (%s):\n", p.Name, p.Redacted())
		logf := func(format string, args ...any) { fmt.Fprintf(stdout, "  "+format+"\n", args...) }
		if err := migratePlacement(ctx, e, p.URL, logf); err != nil {
			fmt.Fprintf(stdout, "  not migrated: %v\n", err)
			failed = append(failed, p.Name)
			continue
		}
		fmt.Fprintf(stdout, "  schema current\n")
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d placements not migrated (%s); the others are: run `strata migrate up` again once the cause is fixed, it resumes",
			len(failed), len(ps), strings.Join(failed, ", "))
	}
	return nil
}

// placementSchema is one placement's line of `migrate status`.
type placementSchema struct {
	name, status string
	pending      int
	err          error
}

// placementsSchema reads every placement's migration status.
func placementsSchema(ctx context.Context, e env, ownerURL string) ([]placementSchema, error) {
	ps, err := otherPlacements(ctx, ownerURL)
	if err != nil {
		return nil, err
	}
	out := make([]placementSchema, 0, len(ps))
	for _, p := range ps {
		s := placementSchema{name: p.Name, status: p.Status}
		st, err := db.Status(ctx, p.URL, e.mods.Lines()...)
		if err != nil {
			s.err = err
		}
		for _, m := range st {
			if m.AppliedAt.IsZero() {
				s.pending++
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// printPlacementsSchema writes the placements' table of `migrate status`
// and returns how many are not current.
func printPlacementsSchema(stdout io.Writer, ps []placementSchema) (behind int) {
	if len(ps) == 0 {
		return 0
	}
	fmt.Fprintln(stdout)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PLACEMENT\tSTATUS\tSCHEMA")
	for _, p := range ps {
		schema := "current"
		switch {
		case p.err != nil:
			schema, behind = "unknown: "+oneLineErr(p.err), behind+1
		case p.pending > 0:
			schema, behind = fmt.Sprintf("%d migrations pending: run `strata migrate up`", p.pending), behind+1
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", p.name, p.status, schema)
	}
	tw.Flush()
	return behind
}

func oneLineErr(err error) string {
	s := strings.ReplaceAll(err.Error(), "\n", " ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// enablePartitionLogs adds the partition log to the control plane and to
// every placement (`strata migrate partition-log`), one at a time; a
// placement that fails does not stop the others.
func enablePartitionLogs(ctx context.Context, ownerURL string, stdout io.Writer) error {
	ps, err := otherPlacements(ctx, ownerURL)
	if err != nil {
		return err
	}
	targets := append([]placement.Placement{{Name: placement.Pool, URL: ownerURL}}, ps...)
	var failed []string
	for _, p := range targets {
		fmt.Fprintf(stdout, "placement %s: ", p.Name)
		added, err := db.EnablePartitionLog(ctx, p.URL)
		switch {
		case err != nil:
			fmt.Fprintf(stdout, "not done: %v\n", err)
			failed = append(failed, p.Name)
		case added:
			fmt.Fprintln(stdout, "partition log added (events.bucket and events_partition_log)")
		default:
			fmt.Fprintln(stdout, "partition log present")
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d databases without the partition log (%s): run it again once the cause is fixed", len(failed), len(targets), strings.Join(failed, ", "))
	}
	return nil
}
