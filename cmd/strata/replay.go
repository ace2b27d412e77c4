package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"runtime/debug"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/strata-es/strata/cmd/strata/modules"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore/esdb"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/internal/db"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/projections/relay"
	"github.com/strata-es/strata/replay"
	"github.com/strata-es/strata/replay/adminapi"
)

// Exit codes of `strata replay` beyond exitOK, exitFailure and exitUsage
// (docs/replay.md).
const (
	exitNothing = 3 // nothing to do, or not found: a retry of what is not parked, an unknown dead letter
	exitBusy    = 4 // another operation holds the projection, or its runner did not yield: retry later
)

const replayUsage = `strata replay — status, rebuilds and the dead-letter store of the read models

Usage:
  strata replay status [--json]
  strata replay rebuild --projection NAME[,NAME] | --all [--tenant T] [--from TOKEN] [--dry-run] [--json]
  strata replay rebuild --projection NAME [--tenant T] --abort
  strata replay dlq list [--projection P] [--tenant T] [--stream S] [--status parked|retried|discarded|superseded|all] [--limit N] [--json]
  strata replay dlq show ID [--tenant T] [--json]
  strata replay dlq retry ID | --stream S | --all [--projection P] [--tenant T] [--json]
  strata replay dlq discard ID --reason TEXT [--tenant T]

It connects with DATABASE_URL (or the embedded PostgreSQL) and works as the
projector role (through STRATA_PROJECTOR_DATABASE_URL's login when set);
rebuilds create and swap tables as strata_owner on DATABASE_URL's
connection.

Exit codes: 0 done; 1 failed (the message says what to do next); 2 bad usage;
3 nothing to do or not found; 4 busy (another operation holds the
projection): retry later. See docs/replay.md.
`

// replayError prints err with the prefix and returns its exit code.
func replayError(stderr io.Writer, err error) int {
	fmt.Fprintln(stderr, "strata replay:", err)
	switch {
	case errors.Is(err, replay.ErrInvalid):
		return exitUsage
	case errors.Is(err, replay.ErrNothingToDo), errors.Is(err, replay.ErrNotFound):
		return exitNothing
	case errors.Is(err, replay.ErrBusy):
		return exitBusy
	}
	return exitFailure
}

func usageError(stderr io.Writer, format string, args ...any) int {
	fmt.Fprintf(stderr, "strata replay: "+format+"\n\n", args...)
	fmt.Fprint(stderr, replayUsage)
	return exitUsage
}

func cmdReplay(ctx context.Context, args []string, e env, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, replayUsage)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, replayUsage)
		return exitOK
	case "status":
		return replayStatus(ctx, args[1:], e, stdout, stderr)
	case "rebuild":
		return replayRebuild(ctx, args[1:], e, stdout, stderr)
	case "dlq":
		if len(args) < 2 {
			return usageError(stderr, "dlq needs a subcommand: list, show, retry or discard")
		}
		switch args[1] {
		case "list":
			return dlqList(ctx, args[2:], e, stdout, stderr)
		case "show":
			return dlqShow(ctx, args[2:], e, stdout, stderr)
		case "retry":
			return dlqRetry(ctx, args[2:], e, stdout, stderr)
		case "discard":
			return dlqDiscard(ctx, args[2:], e, stdout, stderr)
		}
		return usageError(stderr, "unknown dlq subcommand %q: want list, show, retry or discard", args[1])
	}
	return usageError(stderr, "unknown subcommand %q: want status, rebuild or dlq", args[0])
}

// parseArgs parses flags placed before and after positional arguments.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("replay "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// replayEnv is a connected replay service and what it needs closed.
type replayEnv struct {
	svc   *replay.Service
	close func()
}

// openReplay connects as serve does (DATABASE_URL or the embedded
// PostgreSQL; STRATA_EVENT_STORE for the log) and checks the schema.
func openReplay(ctx context.Context, e env, stderr io.Writer, batch int) (*replayEnv, error) {
	level := slog.LevelWarn
	if v := e.str("STRATA_LOG_LEVEL", ""); v != "" {
		if err := level.UnmarshalText([]byte(v)); err != nil {
			return nil, fmt.Errorf("%w: STRATA_LOG_LEVEL: want debug, info, warn or error", replay.ErrInvalid)
		}
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	// The owner connection (DATABASE_URL) runs the DDL of rebuilds; the
	// other pools log in as the serving logins when they are configured,
	// else as the owner's login, switching roles (this is an operator's
	// tool, not a serving process: no request's SQL reaches it).
	url, _, stopDB, err := e.database(ctx, logger)
	if errors.Is(err, errNoOwnerURL) {
		url, stopDB, err = "", func() {}, nil // status and dead letters need no owner; a rebuild says what to set
	}
	if err != nil {
		return nil, err
	}
	appURL, projURL := e.str("STRATA_APP_DATABASE_URL", url), e.str("STRATA_PROJECTOR_DATABASE_URL", url)
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	closers = append(closers, stopDB)
	fail := func(err error) (*replayEnv, error) {
		closeAll()
		return nil, err
	}
	// Per projection a rebuild holds two sessions at most (the shadow's and,
	// for the swap, the live one's lease) beside the log's reads.
	proj, err := db.OpenPool(ctx, projURL, db.PoolConfig{Role: db.RoleProjector, MaxConns: 16, AppName: "strata-replay"})
	if err != nil {
		return fail(err)
	}
	closers = append(closers, proj.Close)
	app, err := db.OpenPool(ctx, appURL, db.PoolConfig{Role: db.RoleApp, MaxConns: 2, AppName: "strata-replay"})
	if err != nil {
		return fail(err)
	}
	closers = append(closers, app.Close)
	var owner *pgxpool.Pool // nil: rebuilds are refused with what to set
	if url != "" {
		// Sessions run as the projector and switch to strata_owner per DDL
		// transaction; one per projection's swap, plus the DDL.
		if owner, err = db.OpenPool(ctx, url, db.PoolConfig{Role: db.RoleProjector, MaxConns: 8, AppName: "strata-replay-owner"}); err != nil {
			return fail(err)
		}
		closers = append(closers, owner.Close)
	}
	switch err := db.Check(ctx, proj, modules.All().Lines()...); {
	case err != nil && db.IsUnavailable(err):
		return fail(fmt.Errorf("cannot reach the database (check DATABASE_URL and that PostgreSQL is up): %w", err))
	case errors.Is(err, db.ErrSchemaBehind):
		return fail(fmt.Errorf("%v: run `strata migrate up`", err))
	case err != nil:
		return fail(fmt.Errorf("read the schema version (has `strata migrate up` run?): %w", err))
	}
	var log replay.Log = postgres.New(app, proj)
	if es := e.str("STRATA_EVENT_STORE", "postgres"); es != "postgres" {
		store, err := esdb.Open(ctx, es, esdb.WithLogger(logger), esdb.WithNamespace(e.str("STRATA_ESDB_NAMESPACE", "strata")))
		if err != nil {
			return fail(fmt.Errorf("STRATA_EVENT_STORE: %w", err))
		}
		closers = append(closers, func() { store.Close() })
		log = store
	}
	policy, err := failurePolicy(e)
	if err != nil {
		return fail(fmt.Errorf("%w: %v", replay.ErrInvalid, err))
	}
	mods := modules.All()
	registry, err := mods.Registry()
	if err != nil {
		return fail(err)
	}
	svc, err := replay.New(replay.Config{Pool: proj, App: app, Owner: owner, Log: log, Logger: logger,
		Projections: mods.Projections(), Registry: registry,
		Runner:             projections.RunnerConfig{BatchSize: batch, Failures: policy},
		ConsumerProjection: relay.ConsumerProjection})
	if err != nil {
		return fail(err)
	}
	return &replayEnv{svc: svc, close: closeAll}, nil
}

// actor names who runs the command, for the dead-letter store's records.
func actor() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return "cli:" + name + "@" + host
}

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
			Name       string `json:"name"`
			State      string `json:"state"`
			Checkpoint string `json:"checkpoint"`
		}
		rows := []other{}
		for _, cp := range others {
			rows = append(rows, other{cp.Projection, string(cp.Status), cp.Position.Token()})
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
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", cp.Projection, cp.Status, cp.Position.Token())
		}
		tw.Flush()
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

func replayRebuild(ctx context.Context, args []string, e env, stdout, stderr io.Writer) int {
	fs := newFlags("rebuild", stderr)
	names := fs.String("projection", "", "projection(s) to rebuild, comma-separated")
	all := fs.Bool("all", false, "rebuild every projection")
	tenant := fs.String("tenant", "", "rebuild only this tenant's rows")
	from := fs.String("from", "", "re-derive only the streams with events after this consistency token (order_details and order_list only)")
	dry := fs.Bool("dry-run", false, "print what would happen and change nothing")
	abort := fs.Bool("abort", false, "drop an interrupted rebuild's shadow tables and checkpoint")
	batch := fs.Int("batch", 0, "events per transaction (default 5000)")
	asJSON := fs.Bool("json", false, "print the plan or result as JSON")
	if pos, err := parseArgs(fs, args); err != nil {
		return exitUsage
	} else if len(pos) > 0 {
		return usageError(stderr, "rebuild takes no arguments (name projections with --projection)")
	}
	if (*names == "") == !*all {
		return usageError(stderr, "rebuild needs --projection NAME or --all")
	}
	if *batch < 0 || *batch > 10000 {
		return usageError(stderr, "--batch %d: want 1 to 10000", *batch)
	}
	o := replay.RebuildOptions{Tenant: *tenant, Actor: actor()}
	if *names != "" {
		for _, n := range strings.Split(*names, ",") {
			if n = strings.TrimSpace(n); n != "" {
				o.Projections = append(o.Projections, n)
			}
		}
	}
	if *from != "" {
		pos, err := event.ParseToken(*from)
		if err != nil {
			return usageError(stderr, "--from %q is not a consistency token (the position a command returned, or a checkpoint from `replay status`)", *from)
		}
		o.From = &pos
	}
	if *abort && (*all || len(o.Projections) != 1 || *from != "" || *dry) {
		return usageError(stderr, "--abort takes exactly one --projection (and --tenant for a tenant's rebuild) and nothing else")
	}
	re, err := openReplay(ctx, e, stderr, *batch)
	if err != nil {
		return replayError(stderr, err)
	}
	defer re.close()
	if *abort {
		if err := re.svc.Abort(ctx, o.Projections[0], *tenant); err != nil {
			return replayError(stderr, err)
		}
		fmt.Fprintf(stdout, "dropped the interrupted rebuild of %s\n", o.Projections[0])
		return exitOK
	}
	if *dry {
		plan, err := re.svc.Plan(ctx, o)
		if err != nil {
			return replayError(stderr, err)
		}
		printPlan(stdout, plan, o, *asJSON)
		return exitOK
	}
	// A rebuild allocates briskly and lives briefly: collecting garbage
	// less often saves a fifth of strata's CPU for a few hundred MB more.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	bar := newProgressBar(stderr)
	o.Progress = bar.update
	res, err := re.svc.Rebuild(ctx, o)
	bar.end()
	if err != nil {
		printRebuilt(stdout, res, *asJSON)
		return replayError(stderr, err)
	}
	printRebuilt(stdout, res, *asJSON)
	return exitOK
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
			Resumed       bool     `json:"resumed"`
			ParkedStreams int64    `json:"parked_streams"`
			Seconds       float64  `json:"seconds"`
			Notes         []string `json:"notes,omitempty"`
		}
		out := []one{}
		for _, p := range res.Projections {
			out = append(out, one{p.Name, p.Scope, p.Checkpoint.Token(), p.Events, p.Streams, p.Resumed, p.ParkedStreams, p.Elapsed.Seconds(), p.Notes})
		}
		writeJSON(w, map[string]any{"projections": out, "events": res.Events, "seconds": res.Elapsed.Seconds(), "events_per_second": res.Rate()})
		return
	}
	for _, p := range res.Projections {
		what := fmt.Sprintf("%d events", p.Events)
		if p.Scope == "from" {
			what = fmt.Sprintf("%d streams (%d events)", p.Streams, p.Events)
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

// progressBar draws a rebuild's progress: a bar redrawn in place when w is
// a terminal, a plain line every few seconds otherwise.
type progressBar struct {
	w        io.Writer
	terminal bool
	last     time.Time
	phase    replay.Phase
	drawn    bool
}

func newProgressBar(w io.Writer) *progressBar {
	b := &progressBar{w: w}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			b.terminal = true
		}
	}
	return b
}

func (b *progressBar) update(p replay.Progress) {
	phaseChanged := p.Phase != b.phase
	b.phase = p.Phase
	if p.Phase == replay.PhaseDone {
		return
	}
	label := string(p.Phase)
	if p.Projection != "" && p.Phase != replay.PhaseBuild {
		label += " " + p.Projection
	}
	pct := 0.0
	if p.Total > 0 {
		pct = min(100*float64(p.Done)/float64(p.Total), 100)
	}
	eta := "-"
	if p.ETA > 0 {
		eta = p.ETA.Round(time.Second).String()
	}
	unit := "events"
	if p.Phase == replay.PhaseStreams {
		unit = "streams"
	}
	if b.terminal {
		const width = 30
		filled := int(pct / 100 * width)
		if phaseChanged && b.drawn {
			fmt.Fprintln(b.w)
		}
		fmt.Fprintf(b.w, "\r%-28s [%s%s] %5.1f%%  %d/%d %s  %.0f/s  ETA %s   ", label, strings.Repeat("#", filled), strings.Repeat(".", width-filled),
			pct, p.Done, p.Total, unit, p.Rate, eta)
		b.drawn = true
		return
	}
	if !phaseChanged && time.Since(b.last) < 2*time.Second {
		return
	}
	b.last = time.Now()
	fmt.Fprintf(b.w, "rebuild: %s: %d/%d %s (%.0f%%), %.0f %s/s, eta %s\n", label, p.Done, p.Total, unit, pct, p.Rate, unit, eta)
}

func (b *progressBar) end() {
	if b.terminal && b.drawn {
		fmt.Fprintln(b.w)
	}
}

// ----- dlq -----

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

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

func shorten(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n-1], "") + "…"
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

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
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
