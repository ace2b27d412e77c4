package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/strata-es/strata/replay"
)

func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v) //nolint:errcheck
}

// ----- status -----

type statusJSON struct {
	Name          string       `json:"name"`
	State         string       `json:"state"`
	Checkpoint    string       `json:"checkpoint"`
	Head          string       `json:"head"`
	LagEvents     int64        `json:"lag_events"`
	LagSeconds    float64      `json:"lag_seconds"`
	ParkedStreams int64        `json:"parked_streams"`
	DeadLetters   int64        `json:"dead_letters"`
	LastError     string       `json:"last_error,omitempty"`
	Generation    string       `json:"generation"`
	Rebuild       *rebuildJSON `json:"rebuild"`
	// TenantRebuilds counts single tenants' rebuilds (each in its own slot).
	TenantRebuilds int      `json:"tenant_rebuilds"`
	Leftovers      []string `json:"leftover_tables,omitempty"`
}

type rebuildJSON struct {
	Scope          string            `json:"scope"`
	Running        bool              `json:"running"`
	Checkpoint     string            `json:"checkpoint"`
	LagEvents      int64             `json:"lag_events"`
	PendingIndexes int               `json:"pending_indexes"`
	Tables         map[string]string `json:"tables"`
	StartedAt      time.Time         `json:"started_at"`
}

func printPlan(w io.Writer, plan replay.Plan, o replay.RebuildOptions, asJSON bool) {
	if asJSON {
		writeJSON(w, map[string]any{"dry_run": true, "head": plan.Head.Token(), "estimate_seconds": plan.Estimate.Seconds(), "projections": plan.Projections})
		return
	}
	scope := "every tenant"
	if o.Tenant != "" {
		scope = "tenant " + o.Tenant
	}
	fmt.Fprintf(w, "dry run: nothing is changed. Log head %s.\n", plan.Head.Token())
	for _, p := range plan.Projections {
		switch {
		case o.From != nil:
			fmt.Fprintf(w, "\n%s (%s, streams touched after %s): re-derive %d streams in place (%d events), at the live checkpoint %s\n",
				p.Name, scope, o.From.Token(), p.Streams, p.Events, p.LiveCheckpoint.Token())
			continue
		case p.Conflict != "":
			fmt.Fprintf(w, "\n%s: refused: %s\n", p.Name, p.Conflict)
			continue
		}
		fmt.Fprintf(w, "\n%s (%s):\n", p.Name, scope)
		for _, t := range p.Tables {
			fmt.Fprintf(w, "  build %s into %s\n", t.Live, t.Shadow)
		}
		if p.Resume {
			fmt.Fprintf(w, "  resume the interrupted rebuild at %s\n", p.ShadowCheckpoint.Token())
		}
		fmt.Fprintf(w, "  read %d events of the log", p.Events)
		if o.Tenant != "" {
			fmt.Fprintf(w, " (%d of them the tenant's)", p.TenantEvents)
		}
		fmt.Fprintln(w)
		if o.Tenant != "" {
			fmt.Fprintln(w, "  then pause the live runner, bring both to the same position and replace the tenant's rows in one transaction")
		} else {
			fmt.Fprintln(w, "  then pause the live runner, catch up to the head and swap the tables in one transaction")
		}
	}
	if o.From == nil {
		fmt.Fprintf(w, "\nestimate: about %s at %d events/s (measured on 2 cores; yours differs)\n", plan.Estimate.Round(time.Second), replay.PlannedRate)
	}
}

func printRebuilt(w io.Writer, res replay.Result, asJSON bool) {
	if asJSON {
		type one struct {
			Name          string   `json:"name"`
			Scope         string   `json:"scope"`
			Checkpoint    string   `json:"checkpoint"`
			Events        int64    `json:"events"`
			Streams       int64    `json:"streams,omitempty"`
			Folded        int64    `json:"folded_events"`
			FoldedRows    int64    `json:"folded_rows"`
			Resumed       bool     `json:"resumed"`
			ParkedStreams int64    `json:"parked_streams"`
			Seconds       float64  `json:"seconds"`
			Notes         []string `json:"notes,omitempty"`
		}
		out := []one{}
		for _, p := range res.Projections {
			out = append(out, one{p.Name, p.Scope, p.Checkpoint.Token(), p.Events, p.Streams, p.Folded, p.FoldedRows, p.Resumed, p.ParkedStreams, p.Elapsed.Seconds(), p.Notes})
		}
		writeJSON(w, map[string]any{"projections": out, "events": res.Events, "seconds": res.Elapsed.Seconds(), "events_per_second": res.Rate()})
		return
	}
	for _, p := range res.Projections {
		what := fmt.Sprintf("%d events", p.Events)
		if p.Scope == "from" {
			what = fmt.Sprintf("%d streams (%d events)", p.Streams, p.Events)
		}
		if p.Folded > 0 {
			what += fmt.Sprintf(", %d of them folded in memory into %d rows written by COPY", p.Folded, p.FoldedRows)
		}
		resumed := ""
		if p.Resumed {
			resumed = ", resumed"
		}
		fmt.Fprintf(w, "rebuilt %s (%s%s): %s in %s, now at %s", p.Name, p.Scope, resumed, what, p.Elapsed.Round(time.Millisecond), p.Checkpoint.Token())
		if p.ParkedStreams > 0 {
			fmt.Fprintf(w, "; %d streams parked (see `strata replay dlq list --projection %s`)", p.ParkedStreams, p.Name)
		}
		fmt.Fprintln(w)
		for _, n := range p.Notes {
			fmt.Fprintf(w, "  note: %s\n", n)
		}
	}
	if len(res.Projections) > 0 {
		fmt.Fprintf(w, "done: %d events in %s (%.0f events/s)\n", res.Events, res.Elapsed.Round(time.Millisecond), res.Rate())
	}
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func shorten(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n-1], "") + "…"
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
