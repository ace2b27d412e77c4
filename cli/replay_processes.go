package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/strata-es/strata/commands/process"
	"github.com/strata-es/strata/replay"
)

// replayProcesses shows process managers' instances (issue 14): by
// status, the stuck ones, and one instance's whole history.
func replayProcesses(ctx context.Context, args []string, e env, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		return usageError(stderr, "processes needs a subcommand: list or show")
	}
	switch args[0] {
	case "list":
		return processesList(ctx, args[1:], e, stdout, stderr)
	case "show":
		return processesShow(ctx, args[1:], e, stdout, stderr)
	}
	return usageError(stderr, "unknown processes subcommand %q: want list or show", args[0])
}

func processesList(ctx context.Context, args []string, e env, stdout, stderr io.Writer) int {
	fs := newFlags("processes list", stderr)
	name := fs.String("process", "", "one process (default: all)")
	status := fs.String("status", "", "instances with this status only (e.g. awaiting_payment, completed)")
	parked := fs.Bool("parked", false, "parked instances only (their inputs wait in the dead-letter store)")
	stuck := fs.Duration("stuck", 0, "instances not done that made no progress for longer than this, e.g. 5m")
	tenant := fs.String("tenant", "", "one tenant (default: every tenant)")
	limit := fs.Int("limit", 100, "most instances per tenant (1..1000)")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if pos, err := parseArgs(fs, args); err != nil {
		return exitUsage
	} else if len(pos) > 0 {
		return usageError(stderr, "processes list takes no arguments")
	}
	re, err := openReplay(ctx, e, stderr, 0)
	if err != nil {
		return replayError(stderr, err)
	}
	defer re.close()
	o := replay.InstanceOptions{Tenant: *tenant, InstanceFilter: process.InstanceFilter{Process: *name, Status: *status, StuckFor: *stuck, Limit: *limit}}
	if *parked {
		o.Parked = parked
	}
	list, err := re.svc.Instances(ctx, o)
	if err != nil {
		return replayError(stderr, err)
	}
	if *asJSON {
		if list == nil {
			list = []process.Instance{}
		}
		writeJSON(stdout, map[string]any{"instances": list})
		return exitOK
	}
	byStatus := map[string]int{}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROCESS\tTENANT\tINSTANCE\tSTATUS\tPARKED\tPENDING STEPS\tNEXT DEADLINE\tLAST PROGRESS")
	now := time.Now()
	for _, in := range list {
		byStatus[in.Status]++
		next := "-"
		if in.NextDeadline != nil {
			next = in.NextDeadline.UTC().Format(time.RFC3339) + " (in " + in.NextDeadline.Sub(now).Round(time.Second).String() + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\t%d\t%s\t%s ago\n", in.Process, in.Tenant, in.Instance, in.Status, in.Parked, in.PendingSteps, next,
			now.Sub(in.LastProgressAt).Round(time.Second))
	}
	tw.Flush()
	var parts []string
	for s, n := range byStatus {
		parts = append(parts, fmt.Sprintf("%s %d", s, n))
	}
	fmt.Fprintf(stdout, "\n%d instances%s\n", len(list), summary(parts))
	return exitOK
}

func processesShow(ctx context.Context, args []string, e env, stdout, stderr io.Writer) int {
	fs := newFlags("processes show", stderr)
	tenant := fs.String("tenant", "", "the instance's tenant (required)")
	asJSON := fs.Bool("json", false, "print JSON instead of text")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) != 2 {
		return usageError(stderr, "processes show needs PROCESS INSTANCE, e.g. processes show fulfilment o-1 --tenant demo")
	}
	if *tenant == "" {
		return usageError(stderr, "processes show needs --tenant")
	}
	re, err := openReplay(ctx, e, stderr, 0)
	if err != nil {
		return replayError(stderr, err)
	}
	defer re.close()
	d, err := re.svc.Instance(ctx, *tenant, pos[0], pos[1])
	if err != nil {
		return replayError(stderr, err)
	}
	if *asJSON {
		writeJSON(stdout, d)
		return exitOK
	}
	fmt.Fprintf(stdout, "%s %s (tenant %s, stream %s): %s%s, %d inputs, created %s, last progress %s\n",
		d.Process, d.Instance.Instance, d.Tenant, d.Stream, d.Status, map[bool]string{true: " (done)", false: ""}[d.Done], d.Inputs,
		d.CreatedAt.UTC().Format(time.RFC3339), d.LastProgressAt.UTC().Format(time.RFC3339))
	if d.Parked {
		fmt.Fprintf(stdout, "PARKED: its inputs wait in the dead-letter store: strata replay dlq list --projection %s --tenant %s --stream %s\n", d.Process, d.Tenant, d.Stream)
	}
	fmt.Fprintf(stdout, "state: %s\n\nhistory:\n", d.State)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	for _, h := range d.History {
		note := ""
		if h.Note != "" {
			note = "  # " + h.Note
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t-> %s%s\n", h.At.UTC().Format("15:04:05.000"), h.Kind, h.Summary, h.StatusAfter, note)
	}
	tw.Flush()
	fmt.Fprintln(stdout, "\nsteps (commands and provider calls):")
	tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	for _, s := range d.Steps {
		extra := ""
		if s.LastError != "" {
			extra = "  last error: " + s.LastError
		}
		fmt.Fprintf(tw, "  %s\t%s %s\t%s\tattempts %d\tkey %s%s\n", s.Step, s.Kind, s.Name, s.Status, s.Attempts, s.Key, extra)
	}
	tw.Flush()
	fmt.Fprintln(stdout, "\ndeadlines:")
	for _, dl := range d.Deadlines {
		fired := ""
		if dl.FiredAt != nil {
			fired = fmt.Sprintf(", fired %s (%s after due)", dl.FiredAt.UTC().Format(time.RFC3339Nano), dl.FiredAt.Sub(dl.DueAt).Round(time.Millisecond))
		}
		fmt.Fprintf(stdout, "  %s due %s: %s%s\n", dl.Name, dl.DueAt.UTC().Format(time.RFC3339), dl.Status, fired)
	}
	return exitOK
}

func summary(parts []string) string {
	if len(parts) == 0 {
		return ""
	}
	slices.Sort(parts)
	return ": " + strings.Join(parts, ", ")
}
