package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

func replayStatus(ctx context.Context, args []string, e env, stdout, stderr io.Writer) int {
	fs := newFlags("status", stderr)
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if pos, err := parseArgs(fs, args); err != nil {
		return exitUsage
	} else if len(pos) > 0 {
		return usageError(stderr, "status takes no arguments")
	}
	re, err := openReplay(ctx, e, stderr, 0)
	if err != nil {
		return replayError(stderr, err)
	}
	defer re.close()
	list, err := re.svc.Status(ctx)
	if err != nil {
		return replayError(stderr, err)
	}
	others, err := re.svc.OtherCheckpoints(ctx)
	if err != nil {
		return replayError(stderr, err)
	}
	consumers, err := re.svc.Consumers(ctx)
	if err != nil {
		return replayError(stderr, err)
	}
	if *asJSON {
		out := make([]statusJSON, 0, len(list))
		for _, s := range list {
			j := statusJSON{Name: s.Name, State: string(s.State), Checkpoint: s.Checkpoint.Token(), Head: s.Head.Token(),
				LagEvents: s.LagEvents, LagSeconds: s.LagSeconds, ParkedStreams: s.ParkedStreams, DeadLetters: s.ParkedLetters,
				LastError: s.LastError, Generation: s.Generation, Leftovers: s.Leftovers, TenantRebuilds: len(s.TenantRebuilds)}
			if r := s.Rebuild; r != nil {
				j.Rebuild = &rebuildJSON{Scope: r.Scope, Running: r.Active, Checkpoint: r.Checkpoint.Token(), LagEvents: r.LagEvents,
					PendingIndexes: r.PendingIndexes, Tables: r.Tables, StartedAt: r.StartedAt}
			}
			out = append(out, j)
		}
		type other struct {
			Name          string `json:"name"`
			State         string `json:"state"`
			Checkpoint    string `json:"checkpoint"`
			ParkedStreams int64  `json:"parked_streams"`
			DeadLetters   int64  `json:"dead_letters"`
		}
		rows := []other{}
		for _, cp := range others {
			rows = append(rows, other{cp.Projection, string(cp.Status), cp.Position.Token(), cp.ParkedStreams, cp.ParkedLetters})
		}
		type consumer struct {
			Name          string   `json:"name"`
			Projection    string   `json:"projection"`
			Tables        []string `json:"tables"`
			ParkedStreams int64    `json:"parked_streams"`
			DeadLetters   int64    `json:"dead_letters"`
			Retryable     bool     `json:"retryable"`
		}
		cs := []consumer{}
		for _, c := range consumers {
			cs = append(cs, consumer{c.Name, c.Projection, c.Tables, c.ParkedStreams, c.ParkedLetters, c.Retryable})
		}
		writeJSON(stdout, map[string]any{"projections": out, "other_checkpoints": rows, "consumers": cs})
		return exitOK
	}
	if len(list) > 0 {
		fmt.Fprintf(stdout, "log head %s\n\n", list[0].Head.Token())
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROJECTION\tSTATE\tCHECKPOINT\tLAG\tLAG AGE\tPARKED STREAMS\tDEAD LETTERS\tREBUILD")
	for _, s := range list {
		rb := "-"
		if s.Rebuild != nil {
			rb = s.Rebuild.String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%d\t%s\n", s.Name, s.State, s.Checkpoint.Token(), s.LagEvents,
			(time.Duration(s.LagSeconds * float64(time.Second))).Round(time.Millisecond), s.ParkedStreams, s.ParkedLetters, rb)
	}
	tw.Flush()
	if len(others) > 0 {
		fmt.Fprintln(stdout, "\nother readers of the log (not projections of this strata):")
		tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		for _, cp := range others {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d parked streams, %d dead letters\n", cp.Projection, cp.Status, cp.Position.Token(), cp.ParkedStreams, cp.ParkedLetters)
		}
		tw.Flush()
		// A relay parks the streams of events it cannot publish.
		for _, cp := range others {
			if cp.ParkedStreams > 0 {
				fmt.Fprintf(stdout, "\n%s has %d parked streams: see `strata replay dlq list --projection %s`\n", cp.Projection, cp.ParkedStreams, cp.Projection)
			}
		}
	}
	if len(consumers) > 0 {
		fmt.Fprintln(stdout, "\nbroker-fed consumers (their dead letters are in `strata replay dlq list`):")
		tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  CONSUMER\tAPPLIES\tPARKED STREAMS\tDEAD LETTERS")
		for _, c := range consumers {
			applies := fmt.Sprintf("%s (%s)", c.Projection, strings.Join(c.Tables, ", "))
			if !c.Retryable {
				applies += ", unknown here: list and discard only"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\n", c.Name, applies, c.ParkedStreams, c.ParkedLetters)
		}
		tw.Flush()
		for _, c := range consumers {
			if c.ParkedStreams > 0 {
				fmt.Fprintf(stdout, "\n%s has %d parked streams: see `strata replay dlq list --projection %s`\n", c.Name, c.ParkedStreams, c.Name)
			}
		}
	}
	for _, s := range list {
		if s.LastError != "" {
			fmt.Fprintf(stdout, "\n%s is stuck: %s\n", s.Name, s.LastError)
		}
		if n := len(s.TenantRebuilds); n > 0 {
			fmt.Fprintf(stdout, "\n%s: %d rebuilds of single tenants in progress or interrupted (each resumes when started again; `replay rebuild --projection %s --tenant T --abort` drops one)\n", s.Name, n, s.Name)
		}
		if len(s.Leftovers) > 0 {
			fmt.Fprintf(stdout, "\n%s: tables left by an earlier swap: %s (the next rebuild drops them)\n", s.Name, strings.Join(s.Leftovers, ", "))
		}
		if s.ParkedStreams > 0 {
			fmt.Fprintf(stdout, "\n%s has %d parked streams: see `strata replay dlq list --projection %s`\n", s.Name, s.ParkedStreams, s.Name)
		}
	}
	return exitOK
}

// ----- rebuild -----
