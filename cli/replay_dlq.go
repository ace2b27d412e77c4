package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/replay"
	"github.com/strata-es/strata/replay/adminapi"
)

func parseStatuses(s string) ([]projections.LetterStatus, error) {
	switch s {
	case "", "parked":
		return []projections.LetterStatus{projections.LetterParked}, nil
	case "all":
		return []projections.LetterStatus{}, nil
	}
	var out []projections.LetterStatus
	for _, v := range strings.Split(s, ",") {
		st := projections.LetterStatus(strings.TrimSpace(v))
		switch st {
		case projections.LetterParked, projections.LetterRetried, projections.LetterDiscarded, projections.LetterSuperseded:
			out = append(out, st)
		default:
			return nil, fmt.Errorf("--status %q: want parked, retried, discarded, superseded or all", v)
		}
	}
	return out, nil
}

func dlqList(ctx context.Context, args []string, e env, stdout, stderr io.Writer) int {
	fs := newFlags("dlq list", stderr)
	projection := fs.String("projection", "", "only this projection")
	tenant := fs.String("tenant", "", "only this tenant (default: every tenant)")
	stream := fs.String("stream", "", "only this stream")
	status := fs.String("status", "parked", "parked, retried, discarded, superseded (comma-separated) or all")
	limit := fs.Int("limit", 100, "at most this many letters per tenant")
	asJSON := fs.Bool("json", false, "print JSON (with the events' data)")
	if pos, err := parseArgs(fs, args); err != nil {
		return exitUsage
	} else if len(pos) > 0 {
		return usageError(stderr, "dlq list takes no arguments")
	}
	statuses, err := parseStatuses(*status)
	if err != nil {
		return usageError(stderr, "%v", err)
	}
	if *limit < 1 || *limit > 10000 {
		return usageError(stderr, "--limit %d: want 1 to 10000", *limit)
	}
	re, err := openReplay(ctx, e, stderr, 0)
	if err != nil {
		return replayError(stderr, err)
	}
	defer re.close()
	o := replay.ListOptions{Tenant: *tenant, Stream: *stream, Statuses: statuses, Limit: *limit}
	if *projection != "" {
		o.Projections = []string{*projection}
	}
	letters, err := re.svc.DeadLetters(ctx, o)
	if err != nil {
		return replayError(stderr, err)
	}
	if *asJSON {
		out := make([]adminapi.Letter, 0, len(letters))
		for _, l := range letters {
			out = append(out, adminapi.LetterView(l))
		}
		writeJSON(stdout, map[string]any{"dead_letters": out})
		return exitOK
	}
	if len(letters) == 0 {
		fmt.Fprintln(stdout, "no dead letters")
		return exitOK
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPROJECTION\tTENANT\tSTREAM\tVERSION\tTYPE\tSTATUS\tATTEMPTS\tLAST FAILURE\tERROR")
	for _, l := range letters {
		last := "-"
		if !l.LastFailedAt.IsZero() {
			last = l.LastFailedAt.UTC().Format("2006-01-02 15:04:05Z")
		}
		status := string(l.Status)
		if l.Head && !l.NextAttemptAt.IsZero() {
			status += " (retrying)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\t%d\t%s\t%s\n", l.ID, l.Projection, l.Tenant, l.Event.Stream, l.Event.Version,
			l.Event.Type, status, l.Attempts, last, shorten(l.Error, 60))
	}
	tw.Flush()
	return exitOK
}

// letterID parses the one positional ID.
func letterID(pos []string) (int64, bool) {
	if len(pos) != 1 {
		return 0, false
	}
	id, err := strconv.ParseInt(pos[0], 10, 64)
	return id, err == nil && id > 0
}

func dlqShow(ctx context.Context, args []string, e env, stdout, stderr io.Writer) int {
	fs := newFlags("dlq show", stderr)
	tenant := fs.String("tenant", "", "the letter's tenant (default: search every tenant)")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitUsage
	}
	id, ok := letterID(pos)
	if !ok {
		return usageError(stderr, "dlq show needs one dead letter ID (a number from `dlq list`)")
	}
	re, err := openReplay(ctx, e, stderr, 0)
	if err != nil {
		return replayError(stderr, err)
	}
	defer re.close()
	l, err := re.svc.DeadLetter(ctx, *tenant, id)
	if err != nil {
		return replayError(stderr, err)
	}
	if *asJSON {
		writeJSON(stdout, adminapi.LetterView(l))
		return exitOK
	}
	j := adminapi.LetterView(l)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	ts := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.Format(time.RFC3339Nano)
	}
	row("dead letter", j.ID)
	row("status", j.Status)
	row("projection", j.Projection)
	row("tenant", j.Tenant)
	row("stream", fmt.Sprintf("%s (version %d%s)", j.Stream, j.Version, map[bool]string{true: ", head of the parked stream", false: ""}[j.Head]))
	row("event", fmt.Sprintf("%s %s v%d", j.EventID, j.Type, j.SchemaVersion))
	row("position", j.Position)
	row("recorded at", j.RecordedAt.Format(time.RFC3339Nano))
	row("attempts", j.Attempts)
	row("first failure", ts(j.FirstFailedAt))
	row("last failure", ts(j.LastFailedAt))
	row("next attempt", ts(j.NextAttemptAt))
	row("parked at", j.ParkedAt.Format(time.RFC3339Nano))
	if j.ResolvedAt != nil {
		row("resolved", fmt.Sprintf("%s by %s", ts(j.ResolvedAt), j.ResolvedBy))
	}
	if j.Reason != "" {
		row("reason", j.Reason)
	}
	tw.Flush()
	fmt.Fprintf(stdout, "\nerror:\n  %s\n", j.Error)
	meta, _ := json.MarshalIndent(j.Metadata, "  ", "  ")
	data, _ := json.MarshalIndent(j.Data, "  ", "  ")
	fmt.Fprintf(stdout, "\nmetadata:\n  %s\n\ndata:\n  %s\n", meta, data)
	if l.Status == projections.LetterParked {
		fmt.Fprintf(stdout, "\nnext: fix the projection and `strata replay dlq retry %d`, or `strata replay dlq discard %d --reason TEXT`\n", l.ID, l.ID)
	}
	return exitOK
}

func dlqRetry(ctx context.Context, args []string, e env, stdout, stderr io.Writer) int {
	fs := newFlags("dlq retry", stderr)
	stream := fs.String("stream", "", "retry this stream")
	all := fs.Bool("all", false, "retry every parked stream")
	projection := fs.String("projection", "", "with --stream or --all: only this projection")
	tenant := fs.String("tenant", "", "only this tenant (with an ID: the letter's tenant, to skip the search)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitUsage
	}
	spec := replay.RetrySpec{Stream: *stream, All: *all, Tenant: *tenant, Actor: actor()}
	if len(pos) > 0 {
		id, ok := letterID(pos)
		if !ok {
			return usageError(stderr, "dlq retry takes one dead letter ID (a number from `dlq list`)")
		}
		spec.ID = id
	}
	if *projection != "" {
		spec.Projections = []string{*projection}
	}
	if n := btoi(spec.ID != 0) + btoi(spec.Stream != "") + btoi(spec.All); n != 1 {
		return usageError(stderr, "dlq retry needs exactly one of: an ID, --stream S, --all")
	}
	re, err := openReplay(ctx, e, stderr, 0)
	if err != nil {
		return replayError(stderr, err)
	}
	defer re.close()
	report, err := re.svc.Retry(ctx, spec)
	if err != nil {
		return replayError(stderr, err)
	}
	failed := report.Failed()
	if *asJSON {
		type streamJSON struct {
			Projection    string           `json:"projection"`
			Tenant        string           `json:"tenant"`
			Stream        string           `json:"stream"`
			Applied       []int64          `json:"applied"`
			Unparked      bool             `json:"unparked"`
			Failed        *adminapi.Letter `json:"failed"`
			NextAttemptAt *time.Time       `json:"next_attempt_at"`
		}
		out := []streamJSON{}
		for _, s := range report.Streams {
			j := streamJSON{Projection: s.Projection, Tenant: s.Tenant, Stream: s.Stream, Applied: s.Applied, Unparked: s.Unparked,
				NextAttemptAt: timePtr(s.NextAttemptAt)}
			if j.Applied == nil {
				j.Applied = []int64{}
			}
			if s.Failed != nil {
				f := adminapi.LetterView(*s.Failed)
				j.Failed = &f
			}
			out = append(out, j)
		}
		writeJSON(stdout, map[string]any{"streams": out, "applied": report.Applied(), "failed": len(failed)})
	} else {
		for _, s := range report.Streams {
			if s.Unparked {
				fmt.Fprintf(stdout, "%s: stream %s of tenant %s: %d letters applied, unparked\n", s.Projection, s.Stream, s.Tenant, len(s.Applied))
				continue
			}
			fmt.Fprintf(stdout, "%s: stream %s of tenant %s: %d letters applied, then letter %d (version %d) failed again: %s\n",
				s.Projection, s.Stream, s.Tenant, len(s.Applied), s.Failed.ID, s.Failed.Event.Version, shorten(s.Failed.Error, 200))
		}
		fmt.Fprintf(stdout, "%d streams unparked, %d still parked\n", len(report.Streams)-len(failed), len(failed))
	}
	if len(failed) > 0 {
		fmt.Fprintln(stderr, "strata replay: some streams are still parked: fix the projection and retry them, or discard their head letters (`strata replay dlq discard ID --reason TEXT`)")
		return exitFailure
	}
	return exitOK
}

func dlqDiscard(ctx context.Context, args []string, e env, stdout, stderr io.Writer) int {
	fs := newFlags("dlq discard", stderr)
	reason := fs.String("reason", "", "why the event is never to be applied (recorded; required)")
	tenant := fs.String("tenant", "", "the letter's tenant (default: search every tenant)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitUsage
	}
	id, ok := letterID(pos)
	if !ok {
		return usageError(stderr, "dlq discard needs one dead letter ID (a number from `dlq list`)")
	}
	if strings.TrimSpace(*reason) == "" {
		return usageError(stderr, "dlq discard needs --reason TEXT: a discard is recorded, never silent")
	}
	re, err := openReplay(ctx, e, stderr, 0)
	if err != nil {
		return replayError(stderr, err)
	}
	defer re.close()
	l, err := re.svc.Discard(ctx, *tenant, id, actor(), *reason)
	if err != nil {
		return replayError(stderr, err)
	}
	fmt.Fprintf(stdout, "discarded dead letter %d (%s, stream %s of tenant %s, version %d) by %s: %s\n", l.ID, l.Projection,
		l.Event.Stream, l.Tenant, l.Event.Version, l.ResolvedBy, l.Reason)
	left, err := re.svc.DeadLetters(ctx, replay.ListOptions{Projections: []string{l.Projection}, Tenant: l.Tenant, Stream: l.Event.Stream})
	if err == nil {
		if len(left) == 0 {
			fmt.Fprintln(stdout, "the stream has no parked letters left and is unparked")
		} else {
			fmt.Fprintf(stdout, "%d letters of the stream are still parked: apply them with `strata replay dlq retry --stream %s --tenant %s --projection %s`\n",
				len(left), l.Event.Stream, l.Tenant, l.Projection)
		}
	}
	return exitOK
}
