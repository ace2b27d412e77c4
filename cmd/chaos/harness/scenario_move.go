package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/internal/pgembed"
)

// Move: `strata tenants move` of one busy tenant from the shared database
// to a placement on a second PostgreSQL cluster the harness starts, under
// load from several tenants. The move is SIGKILLed at random points (armed
// failpoints between its phases and copy batches, or a kill after a random
// delay) and run again until it switches; the serve processes are
// SIGKILLed meanwhile; then `--finish`, killed once too, purges the
// source (docs/scaling.md, "Moving a tenant"; docs/chaos.md, "MOVE").
const Move = "MOVE"

// MoveConfig sizes MOVE.
type MoveConfig struct {
	// Tenants tenants share Streams orders (the first tenant is moved);
	// Clients clients write them, each one command every Every.
	Tenants, Clients, Streams int
	Every                     time.Duration
	// Baseline is how long the load runs before the move: the other
	// tenants' latency then is the reference of their latency during it.
	// ServeKills serve processes are SIGKILLed in the baseline and as many
	// during the move, so that both windows carry the same faults.
	Baseline   time.Duration
	ServeKills int
	// AfterSwitch: the load writes the moved tenant in its new placement
	// this long before `--finish` (the move is still open: the source
	// keeps its rows, `--back` would return it).
	AfterSwitch time.Duration
	// MinKills move runs are always killed before one may run unarmed;
	// MaxAttempts bounds the runs; KillAfterMax bounds a timed kill.
	MinKills, MaxAttempts int
	KillAfterMax          time.Duration
	// Lease is STRATA_TENANT_DIRECTORY_LEASE (the switch's barrier waits
	// for every serving process's acknowledgement within it).
	Lease                    time.Duration
	RequestTimeout, RetryFor time.Duration
	// CatchUp bounds the wait for the projections at the end.
	CatchUp time.Duration
	// MaxP99Ratio bounds the other tenants' p99 command latency during the
	// move over their p99 before it; commands overlapping the first
	// KillSettle after a serve kill are left out of both.
	MaxP99Ratio float64
	KillSettle  time.Duration
	// Replays: this many commands of the moved tenant acknowledged before
	// the move are sent again after it, with their idempotency keys.
	Replays int
}

// DefaultMove is MOVE's size in `make chaos` (about a minute and a half).
func DefaultMove() MoveConfig {
	return MoveConfig{Tenants: 4, Clients: 6, Streams: 192, Every: 40 * time.Millisecond,
		Baseline: 20 * time.Second, ServeKills: 2, AfterSwitch: 10 * time.Second,
		MinKills: 4, MaxAttempts: 12, KillAfterMax: 1500 * time.Millisecond, Lease: 2 * time.Second,
		RequestTimeout: 5 * time.Second, RetryFor: 60 * time.Second, CatchUp: 30 * time.Second,
		MaxP99Ratio: 2, KillSettle: 3 * time.Second, Replays: 100}
}

// moveFailpoints are the failpoints a move run reaches from each phase
// (placement: Mover.Run), in the order it reaches them.
var moveFailpoints = map[string][]string{
	"":         {"move.copied-batch=1", "move.copied-batch=2", "move.before-freeze", "move.frozen", "move.before-switch", "move.switched"},
	"copying":  {"move.copied-batch=1", "move.copied-batch=2", "move.before-freeze", "move.frozen", "move.before-switch", "move.switched"},
	"frozen":   {"move.frozen", "move.before-switch", "move.switched"},
	"switched": {"move.switched"},
}

// moveRecord is the part of the move's row in tenant_moves MOVE reads.
type moveRecord struct {
	Phase                    string
	CopiedEvents, CopiedKeys int64
	FreezeMS                 *float64
}

func (e *env) runMove(ctx context.Context, r *Result) error {
	cfg := e.cfg.Move
	if cfg.Tenants == 0 {
		cfg = DefaultMove()
	}
	r.Title = "tenant move: one busy tenant moved to a second cluster under load, the move and the serve processes SIGKILLed"

	// The second cluster and the placement on it.
	second, err := pgembed.Start(ctx, pgembed.Config{DataDir: filepath.Join(e.dir, "pg-dedicated"), BinDir: e.cfg.PGBin,
		Mode: pgembed.Child, Settings: durableSettings, Logf: e.logf})
	if err != nil {
		return fmt.Errorf("start the second PostgreSQL: %w", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = second.Stop(sctx)
	}()
	const sourceDB, targetDB, placementName = "chaos_move", "chaos_move_dedicated", "dedicated"
	if err := createDatabaseOn(ctx, second, targetDB); err != nil {
		return err
	}
	url, err := e.newStrataDatabase(ctx, sourceDB)
	if err != nil {
		return err
	}
	targetURL := second.URLFor(targetDB)
	lease := "STRATA_TENANT_DIRECTORY_LEASE=" + cfg.Lease.String()
	cliEnv := e.strataEnv(url, filepath.Join(e.dir, "data", "move-cli"), lease)
	if code, _, errOut := e.strataCLI(ctx, cliEnv, "placements", "add", placementName, "--url", targetURL, "--note", "chaos MOVE"); code != 0 {
		return fmt.Errorf("placements add: %s", errOut)
	}
	commands := 10_000 // per client: more than the scenario needs; the load is halted
	lc := LoadConfig{Clients: cfg.Clients, Commands: commands, Tenants: cfg.Tenants, Streams: cfg.Streams,
		Pace: time.Duration(commands) * cfg.Every, MaxDuration: time.Duration(commands) * cfg.Every,
		RequestTimeout: cfg.RequestTimeout, RetryFor: cfg.RetryFor}
	w, err := e.newWorkload(Move, lc)
	if err != nil {
		return err
	}
	moved := w.tenants[0]
	for _, t := range w.tenants {
		if code, _, errOut := e.strataCLI(ctx, cliEnv, "tenants", "provision", t); code != 0 {
			return fmt.Errorf("provision %s: %s", t, errOut)
		}
	}
	var specs []procSpec
	for i := 0; i < 2; i++ {
		name := fmt.Sprintf("move-serve%d", i)
		specs = append(specs, procSpec{Name: name, Roles: "command,query,projector",
			Env: e.strataEnv(url, filepath.Join(e.dir, "data", name), lease, "STRATA_PLACEMENT_RELOAD=1s")})
	}
	sup, err := e.startSupervised(ctx, specs)
	if err != nil {
		return err
	}
	defer sup.Stop(5 * time.Second)
	load := &loadRun{cfg: lc, w: w, urls: sup.URLs(), client: newHTTPClient(cfg.Clients + 4), hist: &history{},
		inflight: make([]atomic.Int64, 2)}
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		load.run(ctx, func(c int) *rand.Rand { return e.rng(Move, "client", fmt.Sprint(c)) })
	}()
	defer func() { load.halted.Store(true); <-loadDone }()
	e.logf("MOVE: %d tenants (%s moves to %s on 127.0.0.1:%d), %d clients, one command each every %s", cfg.Tenants, moved,
		placementName, second.Port(), cfg.Clients, cfg.Every)

	// The baseline: the load, with the serve kills the move will see too.
	rng := e.rng(Move, "kills")
	var killsMu sync.Mutex
	var kills []time.Time
	kill := func(i int, when string) {
		if pid := sup.Kill(i); pid != 0 {
			killsMu.Lock()
			kills = append(kills, time.Now())
			killsMu.Unlock()
			e.logf("MOVE: SIGKILL move-serve%d (pid %d) %s", i, pid, when)
		}
	}
	baseFrom := time.Now().Add(2 * time.Second) // past the first requests' connection set-up
	for k := 0; k < cfg.ServeKills; k++ {
		if sleepCtx(ctx, cfg.Baseline/time.Duration(cfg.ServeKills+1)); ctx.Err() != nil {
			return ctx.Err()
		}
		kill(k%2, "before the move")
	}
	if sleepCtx(ctx, cfg.Baseline/time.Duration(cfg.ServeKills+1)); ctx.Err() != nil {
		return ctx.Err()
	}

	// The move, killed until it has switched.
	moveFrom := time.Now()
	// The move's record, read with SQL (a `strata tenants moves` process
	// after every run would compete with the load for the two cores).
	control, err := connectAdmin(ctx, url)
	if err != nil {
		return err
	}
	defer control.Close(context.WithoutCancel(ctx))
	record := func() (moveRecord, error) {
		var mv moveRecord
		err := control.QueryRow(ctx, `SELECT phase, copied_events, copied_keys, freeze_ms FROM strata.tenant_moves
			WHERE tenant = $1 ORDER BY id DESC LIMIT 1`, moved).Scan(&mv.Phase, &mv.CopiedEvents, &mv.CopiedKeys, &mv.FreezeMS)
		if errors.Is(err, pgx.ErrNoRows) {
			return mv, nil
		}
		return mv, err
	}
	run := func(args []string, failpoint string, killAfter time.Duration) (string, error) {
		env := slices.Clone(cliEnv)
		if failpoint != "" {
			env = append(env, failpointEnv+"="+failpoint)
		}
		cmd := exec.CommandContext(ctx, e.cfg.Strata, args...)
		cmd.Env = env
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := spawn(cmd); err != nil {
			return "", err
		}
		if killAfter > 0 {
			t := time.AfterFunc(killAfter, func() { _ = cmd.Process.Kill() })
			defer t.Stop()
		}
		err := cmd.Wait()
		if err != nil && !strings.Contains(err.Error(), "killed") {
			e.logf("MOVE: stderr: %s", oneLine(errOut.String(), 400))
		}
		return out.String(), err
	}
	var attempts []string
	phase, switched := "", false
	serveKills := 0
	for a := 0; a < cfg.MaxAttempts && !switched && ctx.Err() == nil; a++ {
		how, fp := "unarmed", ""
		var killAfter time.Duration
		switch u := rng.Float64(); {
		case a == cfg.MaxAttempts-1 || a >= cfg.MinKills && u < 0.3:
		case u < 0.7:
			reach := moveFailpoints[phase]
			fp = reach[rng.IntN(len(reach))]
			how = fp
		default:
			killAfter = time.Duration(rng.Int64N(int64(cfg.KillAfterMax)))
			how = "SIGKILL after " + killAfter.Round(time.Millisecond).String()
		}
		if serveKills < cfg.ServeKills && a%2 == 0 {
			i, after := serveKills%2, time.Duration(rng.Int64N(int64(500*time.Millisecond)))
			serveKills++
			time.AfterFunc(after, func() { kill(i, fmt.Sprintf("%s after move run %d began", after.Round(time.Millisecond), a+1)) })
		}
		out, err := run([]string{"tenants", "move", moved, "--to", placementName, "--json"}, fp, killAfter)
		outcome := "exit 0"
		if err != nil {
			outcome = err.Error()
		} else {
			switched = strings.Contains(out, `"phase":"switched"`)
		}
		mv, rerr := record()
		if rerr != nil {
			return rerr
		}
		phase = mv.Phase
		attempts = append(attempts, fmt.Sprintf("move run %d (%s): %s; then %s, %d events and %d keys copied", a+1, how, outcome, orNone(mv.Phase), mv.CopiedEvents, mv.CopiedKeys))
		e.logf("MOVE: %s", attempts[len(attempts)-1])
	}
	for _, a := range attempts {
		r.note("%s", a)
	}
	r.check("move switched within the runs", fmt.Sprintf("<= %d runs", cfg.MaxAttempts), len(attempts), switched)
	if !switched {
		return nil
	}
	switchedAt := time.Now()
	if sleepCtx(ctx, cfg.AfterSwitch); ctx.Err() != nil {
		return ctx.Err()
	}
	// --finish, killed once after a random delay, then run to its end.
	finished := false
	for a := 0; a < 4 && !finished && ctx.Err() == nil; a++ {
		var killAfter time.Duration
		if a == 0 {
			killAfter = 1 + time.Duration(rng.Int64N(int64(300*time.Millisecond)))
		}
		out, err := run([]string{"tenants", "move", moved, "--finish", "--json"}, "", killAfter)
		finished = err == nil && strings.Contains(out, `"phase":"finished"`)
		e.logf("MOVE: finish run %d (kill after %s): %v", a+1, killAfter.Round(time.Millisecond), orNone(fmt.Sprint(err)))
	}
	moveTo := time.Now()
	mv, err := record()
	if err != nil {
		return err
	}
	r.check("move finished (`--finish`)", "finished", orNone(mv.Phase), finished && mv.Phase == "finished")
	if mv.FreezeMS != nil {
		r.note("write freeze of the move: %.1f ms (killed runs included)", *mv.FreezeMS)
	}
	load.halted.Store(true)
	<-loadDone
	ops := load.hist.Ops()
	if err := load.hist.WriteFile(filepath.Join(e.dir, sourceDB+"-history.jsonl")); err != nil {
		return err
	}

	// The moved tenant's commands acknowledged before the move, sent again:
	// the target answers each from the outcome stored under its key.
	var sample []*Op
	for _, op := range ops {
		if op.Tenant == moved && op.Outcome == OK && op.End.Before(moveFrom) {
			sample = append(sample, op)
		}
	}
	rng.Shuffle(len(sample), func(i, j int) { sample[i], sample[j] = sample[j], sample[i] })
	sample = sample[:min(len(sample), cfg.Replays)]
	replayBad := 0
	for _, op := range sample {
		a := load.attempt(ctx, rng.IntN(2), op.Tenant, op.Key, op.cmd)
		if a.Outcome != OK || !a.Replayed || a.version != op.Version {
			replayBad++
			if replayBad <= 5 {
				r.note("REPLAY: %s %s of %s/%s acknowledged version %d before the move; after it: status %d replayed %v version %d %s",
					op.Kind, op.Key, op.Tenant, op.Order, op.Version, a.Status, a.Replayed, a.version, a.Err)
			}
		}
	}
	r.check("moved tenant's commands acknowledged before the move, sent again after it: answered from their stored outcome",
		"all", fmt.Sprintf("%d/%d", len(sample)-replayBad, len(sample)), replayBad == 0 && len(sample) > 0)

	// Both placements' projections at their heads, then the processes stop.
	for _, side := range []struct{ name, url string }{{"pool", url}, {placementName, targetURL}} {
		head, err := logHeadAt(ctx, side.url)
		if err != nil {
			return err
		}
		_, ok, behind, err := waitAtHead(ctx, side.url, head, cfg.CatchUp)
		if err != nil {
			return err
		}
		if !ok {
			r.note("%s: projections not at the head: %s", side.name, behind)
		}
		r.check(side.name+": projections at the head of its log", "yes", map[bool]string{true: "yes", false: "no"}[ok], ok)
	}
	sup.Stop(25 * time.Second)

	// The history against both logs: the moved tenant's events are in the
	// target now, everyone else's in the pool.
	srcEvents, err := loadEvents(ctx, url)
	if err != nil {
		return err
	}
	dstEvents, err := loadEvents(ctx, targetURL)
	if err != nil {
		return err
	}
	events := append(srcEvents, dstEvents...)
	sort.SliceStable(events, func(i, j int) bool {
		a, b := events[i], events[j]
		if a.Tenant != b.Tenant {
			return a.Tenant < b.Tenant
		}
		if a.Stream != b.Stream {
			return a.Stream < b.Stream
		}
		return a.Version < b.Version
	})
	var movedOps []*Op
	var otherOps []*Op
	for _, op := range ops {
		if op.Tenant == moved {
			movedOps = append(movedOps, op)
		} else {
			otherOps = append(otherOps, op)
		}
	}
	var movedEvents []logEvent
	for _, ev := range events {
		if ev.Tenant == moved {
			movedEvents = append(movedEvents, ev)
		}
	}
	foreign := 0
	for _, ev := range dstEvents {
		if ev.Tenant != moved {
			foreign++
		}
	}
	mvv := checkHistory(movedOps, movedEvents)
	r.note("moved tenant %s: %d commands (%d acknowledged, %d rejected, %d unresolved), %d events over %d streams",
		moved, mvv.Ops, mvv.OK, mvv.Fail, mvv.Unresolved, mvv.Events, mvv.Streams)
	r.zero("moved tenant: acknowledged commands lost", mvv.Lost)
	r.zero("moved tenant: commands applied more than once", mvv.Duplicated)
	r.zero("moved tenant: streams with version gaps", mvv.Gaps)
	r.zero("events of other tenants in the target placement", foreign)
	addHistoryCriteria(r, checkHistory(ops, events))
	lv, err := checkLinearizable(ops, events, "chaos-"+r.Scenario)
	addLinearizableCriterion(r, lv, err)
	bad, examples, err := checkIdempotencyRecords(ctx, targetURL, movedOps)
	if err != nil {
		return err
	}
	otherBad, otherExamples, err := checkIdempotencyRecords(ctx, url, otherOps)
	if err != nil {
		return err
	}
	r.zero("acknowledged outcomes differing from the stored idempotency record (the moved tenant's in the target)", bad+otherBad)
	for _, ex := range append(examples, otherExamples...) {
		r.note("IDEMPOTENCY RECORD: %s", ex)
	}
	admin, err := connectAdmin(ctx, url)
	if err != nil {
		return err
	}
	left, err := eraseRows(ctx, admin, moved)
	admin.Close(context.WithoutCancel(ctx))
	if err != nil {
		return err
	}
	leftRows, leftTables := rowsLeft(left)
	r.zero(fmt.Sprintf("rows of the moved tenant left in the pool after --finish (%d tenant tables and the relay's)", len(left)), int(leftRows))
	if len(leftTables) > 0 {
		r.note("left in the pool: %s", strings.Join(leftTables, ", "))
	}
	for _, side := range []struct {
		label string
		srv   *pgembed.Server
		db    string
		url   string
	}{{"pool: ", e.pg, sourceDB, url}, {placementName + ": ", second, targetDB, targetURL}} {
		rv, err := compareWithRebuildOn(ctx, side.srv, side.db)
		if err != nil {
			return fmt.Errorf("rebuild %s: %w", side.db, err)
		}
		r.check(side.label+"read models equal a fresh rebuild (table x tenant checksums)", "all equal",
			fmt.Sprintf("%d/%d equal", rv.Compared-len(rv.Mismatches), rv.Compared), len(rv.Mismatches) == 0 && rv.Compared > 0)
		for i, m := range rv.Mismatches {
			if i == 10 {
				r.note("... and %d more read-model differences", len(rv.Mismatches)-10)
				break
			}
			r.note("%s%s", side.label, m)
		}
		if err := e.verifyLedgersOf(ctx, r, side.url, side.db, side.label); err != nil {
			return err
		}
	}

	// The other tenants: no command without an outcome, no error
	// response, and the move did not slow them.
	killsMu.Lock()
	moveBystanders(r, cfg, otherOps, slices.Clone(kills), baseFrom, moveFrom, moveTo)
	killsMu.Unlock()
	frozen503 := 0
	for _, op := range movedOps {
		for _, a := range op.Attempts {
			if a.Status == http.StatusServiceUnavailable && a.RetryAfter {
				frozen503++
			}
		}
	}
	r.note("moved tenant: %d attempts answered 503 with Retry-After (its write freeze); switched %s after the move began, finished %s after",
		frozen503, switchedAt.Sub(moveFrom).Round(time.Millisecond), moveTo.Sub(moveFrom).Round(time.Millisecond))
	sup.noteUnexpectedExits(r)
	return nil
}

// moveBystanders judges the tenants that were not moved: every command
// resolved, no 5xx, no transport error but right after a serve process was
// killed, and their p99 command latency during the move within
// MaxP99Ratio of before it. Both windows had cfg.ServeKills kills, but the
// move's window is short, so the p99s compared leave out the commands that
// overlapped a kill's disturbance (the kill to KillSettle after it) in
// either window; the p99s with them are a note.
func moveBystanders(r *Result, cfg MoveConfig, ops []*Op, kills []time.Time, baseFrom, moveFrom, moveTo time.Time) {
	nearKill := func(t time.Time) bool {
		for _, k := range kills {
			if !t.Before(k.Add(-cfg.RequestTimeout)) && t.Before(k.Add(cfg.KillSettle)) {
				return true
			}
		}
		return false
	}
	disturbed := func(op *Op) bool {
		for _, k := range kills {
			if op.Start.Before(k.Add(cfg.KillSettle)) && op.End.After(k) {
				return true
			}
		}
		return false
	}
	var before, during, beforeAll, duringAll []time.Duration
	unresolved, errors5xx, transport, transportNearKill := 0, 0, 0, 0
	for _, op := range ops {
		if op.Outcome == Info {
			unresolved++
		}
		for _, a := range op.Attempts {
			switch {
			case a.Status >= 500:
				errors5xx++
			case a.Status == 0 && nearKill(a.End):
				transportNearKill++
			case a.Status == 0:
				transport++
			}
		}
		d := op.End.Sub(op.Start)
		switch {
		case !op.Start.Before(baseFrom) && op.Start.Before(moveFrom):
			beforeAll = append(beforeAll, d)
			if !disturbed(op) {
				before = append(before, d)
			}
		case !op.Start.Before(moveFrom) && op.Start.Before(moveTo):
			duringAll = append(duringAll, d)
			if !disturbed(op) {
				during = append(during, d)
			}
		}
	}
	r.zero("other tenants: commands without an outcome", unresolved)
	r.zero("other tenants: 5xx responses (503 included)", errors5xx)
	r.zero("other tenants: attempts without a response, away from a serve kill", transport)
	r.note("other tenants: %d attempts without a response within %s of a serve SIGKILL (%d kills), each retried with its key",
		transportNearKill, cfg.KillSettle, len(kills))
	_, p99b, _ := percentiles(before)
	_, p99d, _ := percentiles(during)
	ratio := 0.0
	if p99b > 0 {
		ratio = float64(p99d) / float64(p99b)
	}
	r.check(fmt.Sprintf("other tenants: p99 command latency during the move / before it (commands overlapping a serve kill's first %s left out)", cfg.KillSettle),
		fmt.Sprintf("<= %.1fx", cfg.MaxP99Ratio),
		fmt.Sprintf("%.2fx (%s over %d commands during, %s over %d before)", ratio, p99d.Round(100*time.Microsecond), len(during),
			p99b.Round(100*time.Microsecond), len(before)),
		len(before) > 0 && len(during) > 0 && ratio <= cfg.MaxP99Ratio)
	_, p99ba, _ := percentiles(beforeAll)
	_, p99da, _ := percentiles(duringAll)
	r.note("other tenants, every command: p99 %s over %d during the move, %s over %d before (%d serve kills in each window)",
		p99da.Round(100*time.Microsecond), len(duringAll), p99ba.Round(100*time.Microsecond), len(beforeAll), cfg.ServeKills)
}
