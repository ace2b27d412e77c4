package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/strata-es/strata/replay"
)

// exitIncomplete: verify found a projection whose ledger disagrees with the
// store.
const exitIncomplete = 5

// replayVerify recomputes every projection's completeness ledger from the
// store and reports, per projection and tenant, complete or the first event
// missing or extra (docs/replay.md, "Verifying completeness").
func replayVerify(ctx context.Context, args []string, e env, stdout, stderr io.Writer) int {
	fs := newFlags("verify", stderr)
	names := fs.String("projection", "", "projection(s) to verify, comma-separated (default: all)")
	tenant := fs.String("tenant", "", "verify one tenant only")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	deep := fs.Bool("deep", false, "also rebuild each projection into shadow tables at its checkpoint and diff the rows (the live tables are not touched)")
	if pos, err := parseArgs(fs, args); err != nil {
		return exitUsage
	} else if len(pos) > 0 {
		return usageError(stderr, "verify takes no arguments")
	}
	var o replay.VerifyOptions
	if *names != "" {
		for _, n := range strings.Split(*names, ",") {
			o.Projections = append(o.Projections, strings.TrimSpace(n))
		}
	}
	o.Tenant = *tenant
	re, err := openReplay(ctx, e, stderr, 0)
	if err != nil {
		return replayError(stderr, err)
	}
	defer re.close()
	began := time.Now()
	vs, err := re.svc.Verify(ctx, o)
	if err != nil {
		return replayError(stderr, err)
	}
	took := time.Since(began)
	bad := 0
	for _, v := range vs {
		if !v.Complete {
			bad++
		}
	}
	var deeps []replay.DeepVerdict
	unequal := 0
	if *deep {
		if deeps, err = re.svc.VerifyDeep(ctx, o); err != nil {
			return replayError(stderr, err)
		}
		for _, d := range deeps {
			if !d.Equal {
				unequal++
			}
		}
	}
	if *asJSON {
		out := map[string]any{"complete": bad == 0 && unequal == 0, "verdicts": vs, "took_ms": time.Since(began).Milliseconds()}
		if *deep {
			out["deep"] = deeps
		}
		writeJSON(stdout, out)
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PROJECTION\tTENANT\tCHECKPOINT\tEVENTS\tAPPLIED\tPARKED\tSKIPPED\tVERDICT")
		for _, v := range vs {
			verdict := "complete"
			if !v.Complete {
				verdict = v.Problem
				if v.Event != nil {
					verdict += fmt.Sprintf(": event %s (%s v%d, %s, position %s)", v.Event.ID, v.Event.Stream, v.Event.Version, v.Event.Type, v.Event.Position)
				}
				if v.Missing > 1 {
					verdict += fmt.Sprintf(" and the %d events of the tenant after it", v.Missing-1)
				}
				verdict += " after " + v.After
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", v.Projection, v.Tenant, v.Checkpoint, v.StoreEvents, v.Applied, v.Parked, v.Skipped, verdict)
		}
		tw.Flush()
		if bad == 0 {
			fmt.Fprintf(stdout, "\nevery ledger agrees with the store (%d projection-tenant pairs, %s)\n", len(vs), took.Round(time.Millisecond))
		} else {
			fmt.Fprintf(stdout, "\n%d of %d projection-tenant pairs are NOT complete: rebuild them (strata replay rebuild --projection P --tenant T) and report the event (%s)\n",
				bad, len(vs), took.Round(time.Millisecond))
		}
		if *deep {
			fmt.Fprintln(stdout)
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "PROJECTION\tAT\tROWS\tDIFFERING\tVS REBUILT")
			for _, d := range deeps {
				verdict := "equal"
				if !d.Equal {
					verdict = "different"
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", d.Projection, d.Checkpoint, d.Rows, d.Differing, verdict)
			}
			tw.Flush()
			for _, d := range deeps {
				if f := d.First; f != nil {
					fmt.Fprintf(stdout, "\n%s: first differing row: table %s, tenant %s, key %s\n  live:    %s\n  rebuilt: %s\n",
						d.Projection, f.Table, f.Tenant, f.Key, orNone(f.Live), orNone(f.Rebuilt))
				}
			}
		}
	}
	if bad > 0 || unequal > 0 {
		return exitIncomplete
	}
	return exitOK
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
