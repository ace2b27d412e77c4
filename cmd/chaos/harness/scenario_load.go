package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/examples"
	"github.com/strata-es/strata/projections"
)

// loadScenario is what R1, R2 and R5 share: a migrated database, serve
// processes under the supervisor, a workload and its history.
type loadScenario struct {
	id   string
	db   string
	url  string
	sup  *supervisor
	w    *workload
	load *loadRun
}

func (e *env) startLoadScenario(ctx context.Context, id string, lc LoadConfig, processes int, arm func() string, extra ...func(i int) []string) (*loadScenario, error) {
	return e.startLoadScenarioOn(ctx, id, lc, processes, arm, nil, extra...)
}

// startLoadScenarioOn is startLoadScenario with prepare run on the new
// database before the processes start.
func (e *env) startLoadScenarioOn(ctx context.Context, id string, lc LoadConfig, processes int, arm func() string,
	prepare func(ctx context.Context, url string) error, extra ...func(i int) []string) (*loadScenario, error) {
	name := "chaos_" + strings.ToLower(id)
	url, err := e.newStrataDatabase(ctx, name)
	if err != nil {
		return nil, err
	}
	if prepare != nil {
		if err := prepare(ctx, url); err != nil {
			return nil, err
		}
	}
	var specs []procSpec
	for i := 0; i < processes; i++ {
		pname := fmt.Sprintf("%s-serve%d", strings.ToLower(id), i)
		var more []string
		for _, x := range extra {
			more = append(more, x(i)...)
		}
		specs = append(specs, procSpec{Name: pname, Roles: "command,query,projector",
			Env: e.strataEnv(url, filepath.Join(e.dir, "data", pname), more...), Arm: arm})
	}
	sup, err := e.startSupervised(ctx, specs)
	if err != nil {
		return nil, err
	}
	w, err := e.newWorkload(id, lc)
	if err != nil {
		sup.Stop(5 * time.Second)
		return nil, err
	}
	registrations := ""
	if lc.Registrations > 0 {
		registrations = fmt.Sprintf(" and %d registrations on %d addresses per tenant, %d rounds", lc.Registrations, lc.Emails, lc.EmailRounds)
	}
	e.logf("%s: %d serve processes ready (%s); load: %d clients x %d commands%s over %d streams and %d tenants, paced over %s",
		id, processes, strings.Join(sup.URLs(), " "), lc.Clients, lc.Commands, registrations, lc.Streams, lc.Tenants, lc.Pace)
	return &loadScenario{id: id, db: name, url: url, sup: sup, w: w,
		load: &loadRun{cfg: lc, w: w, urls: sup.URLs(), client: newHTTPClient(lc.Clients), hist: &history{},
			inflight: make([]atomic.Int64, processes)}}, nil
}

// runLoad drives the load in the foreground.
func (e *env) runLoad(ctx context.Context, s *loadScenario) {
	s.load.run(ctx, func(c int) *rand.Rand { return e.rng(s.id, "client", fmt.Sprint(c)) })
}

// progress logs the load's progress every few seconds until done closes.
func (e *env) progress(s *loadScenario, done <-chan struct{}) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	total := s.load.cfg.Clients * (s.load.cfg.Commands + s.load.cfg.Registrations)
	for {
		select {
		case <-done:
			return
		case <-t.C:
			e.logf("%s: %d/%d commands done", s.id, s.load.done.Load(), total)
		}
	}
}

// finish stops nothing that is still needed: it waits for the projections
// to reach the head (timed from catchUpFrom), stops the processes, then
// runs every check of the history and the read models.
func (e *env) finish(ctx context.Context, r *Result, s *loadScenario, catchUpFrom time.Time, catchUpLimit time.Duration) error {
	defer s.sup.Stop(25 * time.Second)
	ops := s.load.hist.Ops()
	if err := s.load.hist.WriteFile(filepath.Join(e.dir, s.db+"-history.jsonl")); err != nil {
		return err
	}
	conn, err := connectAdmin(ctx, s.url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// Wait well past the limit, so that a slow catch-up is measured
	// rather than cut off. An attempt the client gave up on may still be
	// appending on the server: when the head moves meanwhile, wait again.
	var at time.Time
	var ok bool
	var behind string
	var head event.Position
	for round := 0; round < 3; round++ {
		if head, err = logHead(ctx, conn); err != nil {
			return err
		}
		if at, ok, behind, err = waitAtHead(ctx, s.url, head, max(3*catchUpLimit, 30*time.Second)); err != nil {
			return err
		}
		now, err := logHead(ctx, conn)
		if err != nil {
			return err
		}
		if !ok || now == head {
			break
		}
	}
	took := time.Duration(0)
	if ok {
		took = max(at.Sub(catchUpFrom), 0)
	} else {
		r.note("projections not at the head %s: %s", head, behind)
	}
	r.within("projections at the head of the log after the last fault", catchUpLimit, took, ok)

	s.sup.Stop(25 * time.Second)
	events, err := loadEvents(ctx, s.url)
	if err != nil {
		return err
	}
	v := checkHistory(ops, events)
	addHistoryCriteria(r, v)
	lv, err := checkLinearizable(ops, events, "chaos-"+r.Scenario)
	addLinearizableCriterion(r, lv, err)
	if s.load.cfg.Registrations > 0 {
		cv, err := checkConditions(ops, events, "chaos-"+r.Scenario+"-conditions")
		addConditionCriteria(r, cv, err)
	}
	bad, examples, err := checkIdempotencyRecords(ctx, s.url, ops)
	if err != nil {
		return err
	}
	r.zero("acknowledged outcomes differing from the stored idempotency record", bad)
	for _, ex := range examples {
		r.note("IDEMPOTENCY RECORD: %s", ex)
	}
	rv, err := e.compareWithRebuild(ctx, s.db)
	if err != nil {
		return fmt.Errorf("rebuild: %w", err)
	}
	r.check("read models equal a fresh rebuild (table x tenant checksums)", "all equal",
		fmt.Sprintf("%d/%d equal", rv.Compared-len(rv.Mismatches), rv.Compared), len(rv.Mismatches) == 0 && rv.Compared > 0)
	for i, m := range rv.Mismatches {
		if i == 10 {
			r.note("... and %d more read-model differences", len(rv.Mismatches)-10)
			break
		}
		r.note("%s", m)
	}
	if err := e.verifyLedgers(ctx, r, s.url, s.db); err != nil {
		return err
	}
	var statuses = map[string]int{}
	internal := 0
	for _, a := range s.load.hist.attempts() {
		key := fmt.Sprint(a.Status)
		if a.Status == 0 {
			key = a.Err
		}
		statuses[key]++
		if a.Status >= 500 && a.Status != http.StatusServiceUnavailable {
			internal++
		}
	}
	r.zero("5xx responses other than 503", internal)
	r.note("attempt outcomes: %s", formatCounts(statuses))
	s.sup.noteUnexpectedExits(r)
	return nil
}

func formatCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s: %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// runR1: SIGKILL the serving processes at random every KillMin..KillMax
// under load.
func (e *env) runR1(ctx context.Context, r *Result) error {
	cfg := e.cfg.R1
	r.Title = "SIGKILL the serve processes at random under load"
	var arm func() string
	if cfg.FailpointMax > 0 {
		armRng := e.rng(R1, "failpoints")
		var mu sync.Mutex
		armed := 0
		arm = func() string {
			mu.Lock()
			defer mu.Unlock()
			armed++
			if armed <= cfg.Processes && cfg.FailpointFirst > 0 { // each process's first incarnation
				return fmt.Sprintf("projector.before-commit=%d", 1+armRng.IntN(cfg.FailpointFirst))
			}
			return fmt.Sprintf("projector.before-commit=%d", cfg.FailpointMin+armRng.IntN(cfg.FailpointMax-cfg.FailpointMin+1))
		}
	}
	// Partitioned projections: every process runs them, and reports how
	// many partitions it holds on a metrics address of its own.
	var metrics []string
	var partitioned func(i int) []string
	if cfg.Partitions != "" {
		for range cfg.Processes {
			port, err := freePort()
			if err != nil {
				return err
			}
			metrics = append(metrics, fmt.Sprintf("127.0.0.1:%d", port))
		}
		partitioned = func(i int) []string {
			return []string{"STRATA_PROJECTION_PARTITIONS=" + cfg.Partitions, "STRATA_METRICS_ADDR=" + metrics[i]}
		}
		r.note("partitioned projections (STRATA_PROJECTION_PARTITIONS): %s, shared by the %d processes", cfg.Partitions, cfg.Processes)
	} else {
		partitioned = func(int) []string { return nil }
	}
	var prepare func(ctx context.Context, url string) error
	if cfg.Partitions != "" {
		prepare = func(ctx context.Context, url string) error { // `strata migrate partition-log`
			_, err := db.EnablePartitionLog(ctx, url)
			return err
		}
	}
	s, err := e.startLoadScenarioOn(ctx, R1, cfg.Load, cfg.Processes, arm, prepare, partitioned)
	if err != nil {
		return err
	}
	defer s.sup.Stop(5 * time.Second)
	shares := &partitionSamples{}
	if len(metrics) > 0 {
		sctx, stop := context.WithCancel(ctx)
		defer stop()
		go shares.sample(sctx, metrics)
	}
	rng := e.rng(R1, "kills")
	done := make(chan struct{})
	var wg sync.WaitGroup
	var rounds, kills int
	wg.Add(2)
	go func() { defer wg.Done(); e.progress(s, done) }()
	go func() {
		defer wg.Done()
		for cfg.MaxKills == 0 || rounds < cfg.MaxKills {
			pause := cfg.KillMin + time.Duration(rng.Int64N(int64(cfg.KillMax-cfg.KillMin)+1))
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-time.After(pause):
			}
			var victims []int
			if rng.IntN(4) == 0 {
				for i := range cfg.Processes {
					victims = append(victims, i)
				}
			} else {
				victims = []int{rng.IntN(cfg.Processes)}
			}
			// Prefer a moment when a victim is executing commands (up to
			// half a second): the kill then drops requests mid-flight,
			// some after their commit, which only the idempotency key can
			// resolve.
			for wait := time.Now().Add(500 * time.Millisecond); time.Now().Before(wait); time.Sleep(time.Millisecond) {
				busy := false
				for _, i := range victims {
					busy = busy || s.load.inflight[i].Load() > 0
				}
				if busy {
					break
				}
			}
			rounds++
			var pids []string
			for _, i := range victims {
				if pid := s.sup.Kill(i); pid != 0 {
					kills++
					pids = append(pids, fmt.Sprintf("%s (pid %d)", s.sup.procs[i].spec.Name, pid))
				}
			}
			e.logf("R1: kill round %d: SIGKILL %s", rounds, strings.Join(pids, ", "))
		}
	}()
	e.runLoad(ctx, s)
	loadEnd := time.Now()
	close(done)
	wg.Wait()
	e.logf("R1: load done; %d kill rounds, %d processes killed", rounds, kills)
	minRounds := 1
	if cfg.MaxKills > 0 {
		minRounds = cfg.MaxKills
	} else if cfg.Load.Pace > 0 {
		minRounds = int(cfg.Load.Pace / cfg.KillMax)
	}
	r.check("kill rounds during the load", fmt.Sprintf(">= %d", minRounds), fmt.Sprintf("%d (%d SIGKILLs)", rounds, kills), rounds >= minRounds)
	if cfg.FailpointMax > 0 {
		fired := s.sup.count("failpoint")
		r.check("projector killed between a batch's writes and its commit (failpoint)", ">= 1", fired, fired >= 1)
	}
	if len(metrics) > 0 {
		shares.settle(ctx, 15*time.Second)
		both, samples := shares.result()
		r.check("partitions shared by the projector processes (samples with partitions in each process)", ">= 1",
			fmt.Sprintf("%d of %d", both, samples), both >= 1)
	}
	if err := s.sup.WaitReady(ctx, 60*time.Second); err != nil {
		return err
	}
	from := s.sup.lastStart()
	if loadEnd.After(from) {
		from = loadEnd
	}
	return e.finish(ctx, r, s, from, cfg.CatchUp)
}

// runR2: crash PostgreSQL with an immediate shutdown under load, restart it
// after a short outage, several times.
func (e *env) runR2(ctx context.Context, r *Result) error {
	cfg := e.cfg.R2
	r.Title = "PostgreSQL immediate shutdown under load"
	s, err := e.startLoadScenario(ctx, R2, cfg.Load, cfg.Processes, nil)
	if err != nil {
		return err
	}
	defer s.sup.Stop(5 * time.Second)
	// An outage: PostgreSQL is certainly down from down (the postmaster
	// is gone) to restart (the harness starts it again); from restart to
	// up it is recovering and may answer at any moment, so a success
	// then is legitimate; up is when the harness saw it accept
	// connections.
	type outage struct{ down, restart, up time.Time }
	var mu sync.Mutex
	var outages []outage
	var crashErr error
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); e.progress(s, done) }()
	start := time.Now()
	go func() {
		defer wg.Done()
		for i := 0; i < cfg.Crashes; i++ {
			at := start.Add(cfg.FirstCrash + time.Duration(i)*cfg.Every)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(at)):
			}
			e.logf("R2: crash %d: PostgreSQL immediate shutdown", i+1)
			if err := e.pg.StopImmediate(ctx); err != nil {
				crashErr = err
				return
			}
			// The window "down" starts once the postmaster is gone: a
			// request answered before that may legitimately succeed or
			// be rejected.
			down := time.Now()
			time.Sleep(cfg.Down)
			restart := time.Now()
			if err := e.pg.Restart(ctx); err != nil {
				crashErr = err
				return
			}
			up := time.Now()
			e.logf("R2: crash %d: PostgreSQL accepts connections again after %s", i+1, up.Sub(down).Round(time.Millisecond))
			mu.Lock()
			outages = append(outages, outage{down, restart, up})
			mu.Unlock()
		}
	}()
	e.runLoad(ctx, s)
	loadEnd := time.Now()
	close(done)
	wg.Wait()
	if crashErr != nil {
		return fmt.Errorf("crash PostgreSQL: %w", crashErr)
	}
	r.check("PostgreSQL crashes during the load", fmt.Sprintf("%d", cfg.Crashes), len(outages), len(outages) == cfg.Crashes)

	// Responses while PostgreSQL was down, and the first success after
	// each return.
	attempts := s.load.hist.attempts()
	notUnavailable, noRetryAfter, unavailable := 0, 0, 0
	var worstFirst time.Duration
	firstOK := true
	var notes []string
	for i, o := range outages {
		var first time.Time
		for _, a := range attempts {
			if a.Status != 0 && !a.Start.Before(o.down) && !a.End.After(o.restart) {
				if a.Status == http.StatusServiceUnavailable {
					unavailable++
					if !a.RetryAfter {
						noRetryAfter++
					}
				} else {
					notUnavailable++
					if len(notes) < 5 {
						notes = append(notes, fmt.Sprintf("while down: %d %s (attempt %s..%s, PostgreSQL down %s..%s)", a.Status, a.Code,
							a.Start.Format("15:04:05.000"), a.End.Format("15:04:05.000"), o.down.Format("15:04:05.000"), o.restart.Format("15:04:05.000")))
					}
				}
			}
			if a.Outcome == OK && a.End.After(o.up) && (first.IsZero() || a.End.Before(first)) {
				first = a.End
			}
		}
		if first.IsZero() {
			firstOK = false
			r.note("crash %d: no successful command after PostgreSQL returned", i+1)
			continue
		}
		d := first.Sub(o.up)
		r.note("crash %d: down %s, first success %s after PostgreSQL returned", i+1, o.up.Sub(o.down).Round(time.Millisecond), d.Round(time.Millisecond))
		worstFirst = max(worstFirst, d)
	}
	r.zero("responses other than 503 while PostgreSQL was down", notUnavailable)
	r.check("503 responses while PostgreSQL was down (all with Retry-After)", "> 0, 0 without",
		fmt.Sprintf("%d, %d without", unavailable, noRetryAfter), unavailable > 0 && noRetryAfter == 0)
	r.within("first success after PostgreSQL returns (worst crash)", cfg.FirstSuccess, worstFirst, firstOK && len(outages) > 0)
	for _, n := range notes {
		r.note("%s", n)
	}
	if err := s.sup.WaitReady(ctx, 60*time.Second); err != nil {
		return err
	}
	from := loadEnd
	if n := len(outages); n > 0 && outages[n-1].up.After(from) {
		from = outages[n-1].up
	}
	return e.finish(ctx, r, s, from, cfg.CatchUp)
}

// runR5: hold a writing transaction open in another database of the same
// cluster under load. Every global-log reader of the cluster must pause
// (decision 1: nothing below the oldest open transaction is final), the
// admin route must show the growing lag, no checkpoint may pass the open
// transaction, and the projections must catch up promptly when it ends.
func (e *env) runR5(ctx context.Context, r *Result) error {
	cfg := e.cfg.R5
	r.Title = "a long writing transaction in another database"
	if err := e.createDatabase(ctx, "chaos_other"); err != nil {
		return err
	}
	defer e.dropDatabase(context.WithoutCancel(ctx), "chaos_other")
	s, err := e.startLoadScenario(ctx, R5, cfg.Load, cfg.Processes, nil)
	if err != nil {
		return err
	}
	defer s.sup.Stop(5 * time.Second)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); e.progress(s, done) }()
	var hold struct {
		err           error
		xid           uint64
		began, ended  time.Time
		samples       int
		maxLag        map[string]float64
		maxLagEvents  map[string]int64
		passed        int // checkpoint samples at or past the open transaction
		passedExample string
		caughtUp      time.Duration
		caughtOK      bool
		behind        string
	}
	hold.maxLag, hold.maxLagEvents = map[string]float64{}, map[string]int64{}
	start := time.Now()
	go func() {
		defer wg.Done()
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(start.Add(cfg.HoldAt))):
		}
		hold.err = e.holdTransaction(ctx, s, cfg, &hold.xid, &hold.began, &hold.ended, func(cps map[string]event.Position, lags map[string]lagSample) {
			hold.samples++
			for name, l := range lags {
				hold.maxLag[name] = max(hold.maxLag[name], l.Seconds)
				hold.maxLagEvents[name] = max(hold.maxLagEvents[name], l.Events)
			}
			for name, cp := range cps {
				if cp.Major >= hold.xid {
					hold.passed++
					hold.passedExample = fmt.Sprintf("%s checkpoint %s while transaction %d was open", name, cp, hold.xid)
				}
			}
		})
		if hold.err != nil {
			return
		}
		// Caught up: every checkpoint at the head as it was when the
		// transaction ended.
		conn, err := connectAdmin(ctx, s.url)
		if err != nil {
			hold.err = err
			return
		}
		head, err := logHead(ctx, conn)
		conn.Close(context.WithoutCancel(ctx))
		if err != nil {
			hold.err = err
			return
		}
		at, ok, behind, err := waitAtHead(ctx, s.url, head, max(3*cfg.CatchUp, 20*time.Second))
		hold.err, hold.caughtOK, hold.behind = err, ok, behind
		if ok {
			hold.caughtUp = at.Sub(hold.ended)
		}
		e.logf("R5: projections at the head %s after the transaction ended: %v (%s)", head, ok, hold.caughtUp.Round(time.Millisecond))
	}()
	e.runLoad(ctx, s)
	loadEnd := time.Now()
	close(done)
	wg.Wait()
	if hold.err != nil {
		return fmt.Errorf("long transaction: %w", hold.err)
	}
	names := projections.Names(examples.All().Projections())
	minLag, minEvents := -1.0, int64(-1)
	for _, n := range names {
		if minLag < 0 || hold.maxLag[n] < minLag {
			minLag = hold.maxLag[n]
		}
		if minEvents < 0 || hold.maxLagEvents[n] < minEvents {
			minEvents = hold.maxLagEvents[n]
		}
	}
	r.check("lag reported on /v1/admin/projections while it lasts (least of the projections' peaks)",
		fmt.Sprintf(">= %s, > 0 events", cfg.MinReportedLag), fmt.Sprintf("%.1fs, %d events", minLag, minEvents),
		minLag >= cfg.MinReportedLag.Seconds() && minEvents > 0)
	r.zero("checkpoints past the open transaction (skipping its horizon)", hold.passed)
	if hold.passedExample != "" {
		r.note("%s", hold.passedExample)
	}
	r.within("caught up after the transaction ends", cfg.CatchUp, hold.caughtUp, hold.caughtOK)
	if !hold.caughtOK {
		r.note("behind after the transaction: %s", hold.behind)
	}
	r.note("transaction xid %d held %s in database chaos_other; %d lag samples", hold.xid, hold.ended.Sub(hold.began).Round(time.Millisecond), hold.samples)
	return e.finish(ctx, r, s, loadEnd, headAfterLoad)
}

// headAfterLoad bounds R5's final catch-up after its load (the criterion
// of the transaction's own end is R5Config.CatchUp).
const headAfterLoad = 10 * time.Second

type lagSample struct {
	Events  int64
	Seconds float64
}

// holdTransaction opens a writing transaction in database chaos_other,
// keeps it open for HoldFor while sampling the admin route and the
// checkpoints every second, and commits it.
func (e *env) holdTransaction(ctx context.Context, s *loadScenario, cfg R5Config, xid *uint64, began, ended *time.Time,
	sample func(map[string]event.Position, map[string]lagSample)) error {
	other, err := connectAdmin(ctx, e.adminURL("chaos_other"))
	if err != nil {
		return err
	}
	defer other.Close(context.WithoutCancel(ctx))
	if _, err := other.Exec(ctx, `CREATE TABLE IF NOT EXISTS public.hold (at timestamptz)`); err != nil {
		return err
	}
	tx, err := other.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
	var x string
	if err := tx.QueryRow(ctx, `INSERT INTO public.hold VALUES (now()) RETURNING pg_current_xact_id()::text`).Scan(&x); err != nil {
		return err
	}
	if _, err := fmt.Sscan(x, xid); err != nil {
		return err
	}
	*began = time.Now()
	e.logf("R5: writing transaction %d open in database chaos_other for %s", *xid, cfg.HoldFor)
	live, err := connectAdmin(ctx, s.url)
	if err != nil {
		return err
	}
	defer live.Close(context.WithoutCancel(ctx))
	client := newHTTPClient(2)
	tenant := s.w.tenants[0]
	for time.Since(*began) < cfg.HoldFor {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(time.Second, cfg.HoldFor-time.Since(*began))):
		}
		cps, err := readCheckpoints(ctx, live)
		if err != nil {
			return err
		}
		pos := map[string]event.Position{}
		for n, cp := range cps {
			pos[n] = cp.Position
		}
		lags, err := adminLag(ctx, client, s.sup.URLs(), s.w.tokens[tenant])
		if err != nil {
			e.logf("R5: admin route: %v", err)
		}
		sample(pos, lags)
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	*ended = time.Now()
	e.logf("R5: transaction %d committed after %s", *xid, ended.Sub(*began).Round(time.Millisecond))
	return nil
}

// adminLag reads /v1/admin/projections from the first process that answers.
func adminLag(ctx context.Context, client *http.Client, urls []string, token string) (map[string]lagSample, error) {
	var lastErr error
	for _, u := range urls {
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, u+"/v1/admin/projections", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := client.Do(req)
		if err != nil {
			cancel()
			lastErr = err
			continue
		}
		var body struct {
			Projections []struct {
				Name string `json:"name"`
				Lag  struct {
					Events  int64   `json:"events"`
					Seconds float64 `json:"seconds"`
				} `json:"lag"`
			} `json:"projections"`
		}
		err = json.NewDecoder(res.Body).Decode(&body)
		res.Body.Close()
		cancel()
		if res.StatusCode != http.StatusOK || err != nil {
			lastErr = fmt.Errorf("%s: status %d (%v)", u, res.StatusCode, err)
			continue
		}
		out := map[string]lagSample{}
		for _, p := range body.Projections {
			out[p.Name] = lagSample{Events: p.Lag.Events, Seconds: p.Lag.Seconds}
		}
		return out, nil
	}
	return nil, lastErr
}
