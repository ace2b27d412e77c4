package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-es/strata/domain/event"
)

// soakOrders hands out the orders of the soak: Orders of them are open at
// once; an order that has had its life cycle (and a couple of commands it
// must reject) is replaced by a new one, so that a long soak keeps
// appending instead of hammering finished orders with rejections.
type soakOrders struct {
	mu      sync.Mutex
	rng     *rand.Rand
	tenants []string
	active  []*stream
	made    int
}

func newSoakOrders(rng *rand.Rand, tenants []string, n int) *soakOrders {
	o := &soakOrders{rng: rng, tenants: tenants}
	for range n {
		o.active = append(o.active, o.fresh())
	}
	return o
}

func (o *soakOrders) fresh() *stream {
	i := o.made
	o.made++
	cur := "EUR"
	if o.rng.IntN(4) == 0 {
		cur = "USD"
	}
	return &stream{tenant: o.tenants[i%len(o.tenants)], order: fmt.Sprintf("o%d", i), customer: fmt.Sprintf("c%d", i%7),
		currency: cur, length: 6 + o.rng.IntN(25)}
}

// pick chooses an open order and fixes its next command.
func (o *soakOrders) pick(key string) (*stream, command) {
	o.mu.Lock()
	defer o.mu.Unlock()
	i := o.rng.IntN(len(o.active))
	s := o.active[i]
	cmd := s.next(o.rng, key)
	if s.seq.Load() >= int64(s.length)+2 {
		o.active[i] = o.fresh()
	}
	return s, cmd
}

// soakRun is the state of one R18 run.
type soakRun struct {
	e       *env
	cfg     R18Config
	plan    soakPlan
	s       *loadScenario
	orders  *soakOrders
	metrics []string
	pprof   []string
	seed    uint64
	// pending counts the open loop's commands issued and not yet
	// resolved: a fault's window lasts until its backlog has drained.
	pending atomic.Int64
	// The goroutine profiles before the first fault.
	baseline []goroutineProfile

	mu      sync.Mutex
	windows []faultWindow
	// R5 faults: checkpoint samples at or past the open transaction.
	passed        int
	passedExample string
	holdSamples   int

	summary soakSummary
}

// startSoak starts the serve processes (each with its metrics on a
// loopback port of its own, kept across restarts) and the workload.
func (e *env) startSoak(ctx context.Context, cfg R18Config) (*soakRun, error) {
	name := "chaos_" + strings.ToLower(R18)
	url, err := e.newStrataDatabase(ctx, name)
	if err != nil {
		return nil, err
	}
	run := &soakRun{e: e, cfg: cfg, plan: planSoak(cfg), seed: uint64(e.cfg.Seed)}
	var specs []procSpec
	for i := 0; i < cfg.Processes; i++ {
		pname := fmt.Sprintf("%s-serve%d", strings.ToLower(R18), i)
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		pport, err := freePort()
		if err != nil {
			return nil, err
		}
		maddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		paddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(pport))
		run.metrics = append(run.metrics, "http://"+maddr+"/metrics")
		run.pprof = append(run.pprof, "http://"+paddr+"/debug/pprof/goroutine?debug=1")
		specs = append(specs, procSpec{Name: pname, Roles: "command,query,projector",
			Env: e.strataEnv(url, filepath.Join(e.dir, "data", pname), "STRATA_METRICS_ADDR="+maddr, "STRATA_PPROF_ADDR="+paddr)})
	}
	sup, err := e.startSupervised(ctx, specs)
	if err != nil {
		return nil, err
	}
	lc := LoadConfig{Clients: cfg.BurstClients, Commands: 1, Tenants: cfg.Tenants, Streams: cfg.Orders,
		MaxDuration: cfg.Duration + run.plan.Burst, RequestTimeout: cfg.RequestTimeout, RetryFor: cfg.RetryFor}
	w, err := e.newWorkload(R18, lc)
	if err != nil {
		sup.Stop(5 * time.Second)
		return nil, err
	}
	// Few idle connections, closed soon: a connection opened for a burst
	// of retries (or a slow moment) closes again instead of holding a
	// goroutine in the server, so that the servers' goroutines measure
	// the servers, not how many connections the harness keeps. The open
	// loop needs a few at a time.
	client := newHTTPClient(4)
	client.Transport.(*http.Transport).IdleConnTimeout = 5 * time.Second
	run.s = &loadScenario{id: R18, db: name, url: url, sup: sup, w: w,
		load: &loadRun{cfg: lc, w: w, urls: sup.URLs(), client: client, hist: &history{}, inflight: make([]atomic.Int64, cfg.Processes)}}
	run.orders = newSoakOrders(e.rng(R18, "orders"), w.tenants, cfg.Orders)
	return run, nil
}

// rngFor is the random source of one command (its target and backoff).
func (run *soakRun) rngFor(k int, salt uint64) *rand.Rand {
	return rand.New(rand.NewPCG(run.seed, uint64(k)<<8|salt))
}

// burst drives BurstClients clients back to back for d and returns the
// definite outcomes (acknowledged or rejected) per second, the first
// second (connections opening) left out.
func (run *soakRun) burst(ctx context.Context, d time.Duration) (float64, int) {
	l := run.s.load
	start := time.Now()
	end := start.Add(d)
	var wg sync.WaitGroup
	for c := 0; c < run.cfg.BurstClients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := run.rngFor(c, 1)
			for k := 0; ctx.Err() == nil && time.Now().Before(end); k++ {
				key := fmt.Sprintf("b%d-k%d", c, k)
				s, cmd := run.orders.pick(key)
				l.execute(ctx, rng, c, s, key, cmd)
			}
		}()
	}
	wg.Wait()
	from := start.Add(time.Second)
	n := 0
	for _, op := range l.hist.Ops() {
		if op.Outcome != Info && !op.End.Before(from) && !op.End.After(end) {
			n++
		}
	}
	return float64(n) / end.Sub(from).Seconds(), n
}

// openLoop issues rate commands a second on a fixed schedule for d,
// whatever their latency (each command runs in its own goroutine, at most
// MaxInFlight at once), and waits for every one to resolve. It returns how
// many were issued and how many of those more than 100 ms late.
func (run *soakRun) openLoop(ctx context.Context, rate float64, t0 time.Time, d time.Duration) (issued, late int) {
	l := run.s.load
	sem := make(chan struct{}, run.cfg.MaxInFlight)
	var wg sync.WaitGroup
	end := t0.Add(d)
	for k := 0; ; k++ {
		at := t0.Add(time.Duration(float64(k) / rate * float64(time.Second)))
		if !at.Before(end) {
			break
		}
		if wait := time.Until(at); wait > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
		}
		if ctx.Err() != nil {
			break
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		if time.Since(at) > 100*time.Millisecond {
			late++
		}
		issued++
		key := fmt.Sprintf("s-k%d", k)
		s, cmd := run.orders.pick(key)
		wg.Add(1)
		run.pending.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			defer run.pending.Add(-1)
			l.execute(ctx, run.rngFor(k, 2), k%64, s, key, cmd)
		}()
	}
	wg.Wait()
	return issued, late
}

// faults injects plan.Faults faults, R1, R2 and R5 in turn, at Every,
// 2*Every, ... after t0. R1 kills one process (the next in turn); R2
// crashes PostgreSQL for Down; R5 holds a writing transaction open in
// another database for Hold.
func (run *soakRun) faults(ctx context.Context, t0 time.Time, rate float64) error {
	p := run.plan
	kills := 0
	for i := 0; i < p.Faults; i++ {
		at := t0.Add(time.Duration(i+1) * p.Every)
		if i == 0 {
			// The goroutines as they are before any fault, to name what
			// grew at the end.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Until(at.Add(-p.Sample))):
			}
			run.baseline = run.snapshotGoroutines(ctx, "baseline")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(at)):
		}
		kind := p.kind(i)
		w := faultWindow{Kind: kind}
		var err error
		switch kind {
		case R1:
			err = run.kill(ctx, run.victim(kills), &w)
			kills++
		case R2:
			err = run.crash(ctx, &w)
		case R5:
			err = run.hold(ctx, &w)
		}
		if err != nil {
			return fmt.Errorf("fault %d (%s): %w", i+1, kind, err)
		}
		limit := w.End.Add(p.Every / 2)
		if d, ok := run.drain(ctx, rate, limit); !ok {
			w.Detail += fmt.Sprintf("; backlog NOT drained %s later (%d commands in flight): the processes do not keep up with the rate",
				d.Sub(w.End).Round(100*time.Millisecond), run.pending.Load())
			w.End = d
		} else if d.Sub(w.End) >= 100*time.Millisecond {
			w.Detail += fmt.Sprintf("; backlog drained %s later", d.Sub(w.End).Round(100*time.Millisecond))
			w.End = d
		}
		w.Settled = w.End.Add(p.Settle)
		run.e.logf("R18: fault %d/%d %s: %s, %s", i+1, p.Faults, kind, w.Detail, w.End.Sub(w.Start).Round(time.Millisecond))
		run.mu.Lock()
		run.windows = append(run.windows, w)
		run.mu.Unlock()
	}
	return nil
}

// drain waits until the open loop's commands in flight are back to what
// a tenth of a second's schedule issues (at least 4), or until limit, and
// returns when, and whether they were.
func (run *soakRun) drain(ctx context.Context, rate float64, limit time.Time) (time.Time, bool) {
	normal := int64(max(4, rate/10))
	for ctx.Err() == nil && run.pending.Load() > normal {
		if !time.Now().Before(limit) {
			return time.Now(), false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Now(), true
}

// victim is the process R1's kill'th fault kills: the processes in turn,
// all but the last, which lives through the whole soak. A leak grows with
// the time and the faults a process has been through; with every process
// killed in turn, none lives long enough after its warm-up (a 30-minute
// soak's incarnations lived 12 minutes at most) for a rate per 10 minutes
// to be measured rather than extrapolated from its warm-up. The survivor
// serves through every fault, its peers' deaths (their leases move to it)
// included.
func (run *soakRun) victim(kill int) int {
	if run.cfg.Processes < 2 {
		return 0
	}
	return kill % (run.cfg.Processes - 1)
}

// kill is R1's fault: SIGKILL (preferring a moment when the victim is
// executing commands, as R1 does), then wait until it is ready again.
func (run *soakRun) kill(ctx context.Context, victim int, w *faultWindow) error {
	s := run.s
	for wait := time.Now().Add(500 * time.Millisecond); time.Now().Before(wait); time.Sleep(time.Millisecond) {
		if s.load.inflight[victim].Load() > 0 {
			break
		}
	}
	w.Start = time.Now()
	pid := s.sup.Kill(victim)
	if err := s.sup.WaitReady(ctx, 60*time.Second); err != nil {
		return err
	}
	w.End = time.Now()
	w.Detail = fmt.Sprintf("SIGKILL %s (pid %d), ready again", s.sup.procs[victim].spec.Name, pid)
	return nil
}

// crash is R2's fault: PostgreSQL immediate shutdown, down for Down, then
// started again on the same port.
func (run *soakRun) crash(ctx context.Context, w *faultWindow) error {
	w.Start = time.Now()
	if err := run.e.pg.StopImmediate(ctx); err != nil {
		return err
	}
	time.Sleep(run.cfg.Down)
	if err := run.e.pg.Restart(ctx); err != nil {
		return err
	}
	w.End = time.Now()
	w.Detail = fmt.Sprintf("PostgreSQL immediate shutdown, down %s, accepts connections again", run.cfg.Down)
	return nil
}

// hold is R5's fault, through R5's own holdTransaction: every
// checkpoint sample taken while the transaction is open must stay below
// its transaction id.
func (run *soakRun) hold(ctx context.Context, w *faultWindow) error {
	var xid uint64
	var began, ended time.Time
	w.Start = time.Now()
	err := run.e.holdTransaction(ctx, run.s, R5Config{HoldFor: run.plan.Hold}, &xid, &began, &ended,
		func(cps map[string]event.Position, _ map[string]lagSample) {
			run.mu.Lock()
			defer run.mu.Unlock()
			run.holdSamples++
			for name, cp := range cps {
				if cp.Major >= xid {
					run.passed++
					run.passedExample = fmt.Sprintf("%s checkpoint %s while transaction %d was open", name, cp, xid)
				}
			}
		})
	if err != nil {
		return err
	}
	w.End = ended
	w.Detail = fmt.Sprintf("writing transaction %d open in database chaos_other for %s", xid, run.plan.Hold)
	return nil
}

// runR18: the soak (docs/chaos.md R18).
func (e *env) runR18(ctx context.Context, r *Result) (err error) {
	cfg := e.cfg.R18
	plan := planSoak(cfg)
	r.Title = fmt.Sprintf("soak: %s at %.0f %% of the measured maximum, a fault every %s", cfg.Duration, 100*cfg.LoadFraction, plan.Every)
	if err := e.createDatabase(ctx, "chaos_other"); err != nil {
		return err
	}
	defer e.dropDatabase(context.WithoutCancel(ctx), "chaos_other")
	run, err := e.startSoak(ctx, cfg)
	if err != nil {
		return err
	}
	s := run.s
	defer s.sup.Stop(5 * time.Second)
	e.logf("R18: %d serve processes ready (%s); plan: %s", cfg.Processes, strings.Join(s.sup.URLs(), " "), plan)
	smp := e.startSampler(ctx, s, run.metrics, run.pprof, plan.Sample)
	stopped := false
	defer func() {
		if !stopped {
			smp.Stop()
		}
	}()

	burstStart := time.Now()
	maxRate, burstN := run.burst(ctx, plan.Burst)
	burstEnd := time.Now()
	rate := max(cfg.LoadFraction*maxRate, 1)
	e.logf("R18: closed loop, %d clients for %s: %.0f commands/s (%d definite outcomes); open loop at %.1f/s for %s",
		cfg.BurstClients, plan.Burst, maxRate, burstN, rate, cfg.Duration)
	r.check(fmt.Sprintf("maximum measured (closed loop, %d clients, %s)", cfg.BurstClients, plan.Burst), "> 0",
		fmt.Sprintf("%.0f commands/s; open loop at %.1f/s (%.0f %%)", maxRate, rate, 100*cfg.LoadFraction), maxRate > 0)

	t0 := time.Now()
	done := make(chan struct{})
	var wg sync.WaitGroup
	var faultErr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(30 * time.Second)
		defer tk.Stop()
		for {
			select {
			case <-done:
				return
			case <-tk.C:
				e.logf("R18: %s of %s, %d commands done", time.Since(t0).Round(time.Second), cfg.Duration, s.load.done.Load())
			}
		}
	}()
	go func() {
		defer wg.Done()
		faultErr = run.faults(ctx, t0, rate)
	}()
	issued, late := run.openLoop(ctx, rate, t0, cfg.Duration)
	loadEnd := time.Now()
	close(done)
	wg.Wait()
	if faultErr != nil {
		return faultErr
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	e.logf("R18: load done: %d commands issued (%d late), %d faults", issued, late, len(run.windows))
	endProfiles := run.snapshotGoroutines(ctx, "end")
	samples := smp.Stop()
	stopped = true

	// The criteria of the soak itself.
	windows := run.windows
	counts := map[string]int{}
	for _, w := range windows {
		counts[w.Kind]++
	}
	r.check(fmt.Sprintf("faults during the soak (R1, R2, R5 in turn, every %s)", plan.Every),
		fmt.Sprintf("%d, each kind", plan.Faults), fmt.Sprintf("%d (R1 %d, R2 %d, R5 %d)", len(windows), counts[R1], counts[R2], counts[R5]),
		len(windows) == plan.Faults && counts[R1] > 0 && counts[R2] > 0 && counts[R5] > 0)
	scheduled := int(math.Ceil(cfg.Duration.Seconds() * rate)) // k/rate < Duration
	onTime := 0.0
	if scheduled > 0 {
		onTime = float64(issued-late) / float64(scheduled)
	}
	r.check("commands issued on the open-loop schedule (within 100 ms)", ">= 99 %",
		fmt.Sprintf("%.1f %% (%d of %d, %d late)", 100*onTime, issued-late, scheduled, late), onTime >= 0.99)
	if onTime < 0.99 {
		r.note("the open loop fell behind: more than %d commands were in flight at once, or the harness itself was starved of CPU; "+
			"on a machine shared with other work the rate measured at the start may exceed what is left later", cfg.MaxInFlight)
	}

	starts := map[int]time.Time{}
	for _, ev := range s.sup.Events() {
		if ev.Kind == "start" {
			starts[ev.Pid] = ev.At
		}
	}
	incs := incarnations(samples, starts)
	growth := judgeRSS(incs, windows, plan.Warmup, plan.GrowthUnit)
	addRSSCriterion(r, cfg, plan, s, growth)

	quiet := quietIntervals(t0.Add(plan.Settle), loadEnd, windows)
	gv := judgeGoroutines(samples, quiet)
	addGoroutineCriterion(r, cfg, gv)
	noteGoroutineDiff(r, run.baseline, endProfiles)

	lags, missing := lagOutside(samples, quiet)
	p99 := quantile(lags, 0.99)
	r.check("projection lag p99 outside fault windows (worst projection and tenant per sample)", "< "+cfg.MaxLagP99.String(),
		fmt.Sprintf("%s (%d samples, max %s, %d unanswered)", secs(p99), len(lags), secs(quantile(lags, 1)), missing),
		len(lags) > 0 && p99 < cfg.MaxLagP99.Seconds() && missing <= len(lags)/100)
	run.mu.Lock()
	r.zero("checkpoints past an open transaction (R5 faults)", run.passed)
	if run.passedExample != "" {
		r.note("%s", run.passedExample)
	}
	r.note("R5 faults: %d checkpoint samples while a transaction was open", run.holdSamples)
	run.mu.Unlock()

	// Dead letters once the projections have caught up.
	if err := s.sup.WaitReady(ctx, 60*time.Second); err != nil {
		return err
	}
	if err := run.deadLettersAtEnd(ctx, r, samples); err != nil {
		return err
	}

	// The plot and the samples.
	for _, w := range windows {
		r.note("fault %s at +%s: %s, window %s + %s settling", w.Kind, w.Start.Sub(t0).Round(time.Second), w.Detail,
			w.End.Sub(w.Start).Round(100*time.Millisecond), plan.Settle)
	}
	csv := filepath.Join(e.dir, s.db+"-samples.csv")
	if err := writeSamplesCSV(csv, samples, t0); err != nil {
		return err
	}
	png := filepath.Join(e.dir, s.db+"-soak.png")
	sp := soakPlot{Title: r.Title, T0: t0, Burst: [2]time.Time{burstStart, burstEnd}, End: loadEnd, Samples: samples,
		Windows: windows, Names: procNames(s.sup), Baseline: gv.Baseline, MaxGoroutineGrowth: cfg.MaxGoroutineGrowth, MaxLag: cfg.MaxLagP99}
	if err := sp.write(png); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	r.note("plot %s, samples %s (%d rounds every %s)", png, csv, len(samples), plan.Sample)
	run.summary = soakSummary{plan: plan, maxRate: maxRate, rate: rate, png: png}
	if e.cfg.DocsDir != "" {
		defer func() { run.writeDocs(r, sp, err) }()
	}

	// And every R1 invariant over the whole history.
	return e.finish(ctx, r, s, loadEnd, headAfterLoad)
}

func secs(f float64) string {
	if f != f { // NaN
		return "none"
	}
	return time.Duration(f * float64(time.Second)).Round(time.Millisecond).String()
}

func procNames(sup *supervisor) []string {
	var out []string
	for _, p := range sup.procs {
		out = append(out, p.spec.Name)
	}
	return out
}

func addRSSCriterion(r *Result, cfg R18Config, plan soakPlan, s *loadScenario, growth []rssGrowth) {
	judged, worst := 0, -1.0
	var worstG rssGrowth
	for _, g := range growth {
		name := s.sup.procs[g.Proc].spec.Name
		if !g.Judged {
			r.note("RSS %s pid %d not judged: %s", name, g.Pid, g.NotJudgedWhy)
			continue
		}
		judged++
		from := "warm-up"
		if g.AfterOutage {
			from = "its first PostgreSQL outage"
		}
		r.note("RSS %s pid %d: %.1f -> %.1f MiB fitted over %s after %s (%d samples, %d fault windows; %.1f..%.1f MiB): %+.2f %% per %s, %+.2f %% per 10m",
			name, g.Pid, g.FirstMiB, g.LastMiB, g.To.Sub(g.From).Round(time.Second), from, g.Samples, g.Windows, g.MinMiB, g.MaxMiB,
			100*g.PerUnit, plan.GrowthUnit, 100*g.Per10Min)
		if g.PerUnit > worst {
			worst, worstG = g.PerUnit, g
		}
	}
	got := "no incarnation lived through 2 fault windows"
	name := fmt.Sprintf("RSS growth after warm-up (%s, and the first PostgreSQL outage), incarnations that lived through >= 2 fault windows", plan.Warmup)
	if plan.GrowthUnit != 10*time.Minute {
		// A short soak: the rate is reported (notes above), the bound is
		// on the growth itself.
		worstMiB := -1.0
		for _, g := range growth {
			if g.Judged && g.LastMiB-g.FirstMiB > worstMiB {
				worstMiB, worstG = g.LastMiB-g.FirstMiB, g
			}
		}
		if judged > 0 {
			got = fmt.Sprintf("worst %+.1f MiB (%s pid %d, over %s; %+.2f %% per 10m), %d incarnations judged", worstMiB,
				s.sup.procs[worstG.Proc].spec.Name, worstG.Pid, worstG.To.Sub(worstG.From).Round(time.Second), 100*worstG.Per10Min, judged)
		}
		limit := float64(cfg.MaxShortRSSGrowth) / (1 << 20)
		r.check(name, fmt.Sprintf("< %.0f MiB (a soak under 30m: the rate per 10 min is judged by make soak)", limit), got,
			judged > 0 && worstMiB < limit)
		return
	}
	if judged > 0 {
		got = fmt.Sprintf("worst %+.2f %% (%s pid %d; %+.2f %% per 10m), %d incarnations judged", 100*worst,
			s.sup.procs[worstG.Proc].spec.Name, worstG.Pid, 100*worstG.Per10Min, judged)
	}
	r.check(name, fmt.Sprintf("< %.0f %% per 10 min", 100*cfg.MaxRSSGrowth), got, judged > 0 && worst < cfg.MaxRSSGrowth)
}

func addGoroutineCriterion(r *Result, cfg R18Config, gv goroutineVerdict) {
	limit := gv.Baseline * (1 + cfg.MaxGoroutineGrowth)
	var meds []string
	for _, iv := range gv.Intervals {
		meds = append(meds, fmt.Sprintf("%.0f", iv.Median))
	}
	r.note("goroutines (sum of the serve processes, less idle HTTP connections), median of each quiet interval: %s; highest single sample outside windows %.0f",
		strings.Join(meds, " "), gv.MaxSample)
	ok := gv.Baseline > 0 && len(gv.Intervals) > 1 && gv.Worst <= cfg.MaxGoroutineGrowth
	r.check("goroutines outside fault windows (sum of the serve processes less idle connections, median of each quiet interval)",
		fmt.Sprintf("<= pre-fault baseline + %.0f %%", 100*cfg.MaxGoroutineGrowth),
		fmt.Sprintf("worst %+.1f %% (baseline %.0f, limit %.0f, %d intervals)", 100*gv.Worst, gv.Baseline, limit, len(gv.Intervals)), ok)
}

// deadLettersAtEnd waits for the projections to reach the head and counts
// the dead letters still parked, in SQL and through every tenant's
// /v1/admin/dead-letters.
func (run *soakRun) deadLettersAtEnd(ctx context.Context, r *Result, samples []soakSample) error {
	s := run.s
	conn, err := connectAdmin(ctx, s.url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	head, err := logHead(ctx, conn)
	if err != nil {
		return err
	}
	if _, _, _, err := waitAtHead(ctx, s.url, head, 30*time.Second); err != nil {
		return err
	}
	n, err := countParked(ctx, conn)
	if err != nil {
		return err
	}
	viaAPI, err := adminDeadLetters(ctx, s.load.client, s.sup.URLs(), s.w)
	if err != nil {
		return err
	}
	peak := int64(0)
	for _, smp := range samples {
		peak = max(peak, smp.Parked)
	}
	r.check("dead letters parked at the end (SQL; every tenant's /v1/admin/dead-letters)", "0",
		fmt.Sprintf("%d; %d (at most %d during the soak)", n, viaAPI, peak), n == 0 && viaAPI == 0)
	return nil
}

// adminDeadLetters counts the parked dead letters every tenant's admin
// token sees on /v1/admin/dead-letters (parked is the route's default).
func adminDeadLetters(ctx context.Context, client *http.Client, urls []string, w *workload) (int, error) {
	total := 0
	for _, tenant := range w.tenants {
		var lastErr error
		ok := false
		for _, u := range urls {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			req, _ := http.NewRequestWithContext(rctx, http.MethodGet, u+"/v1/admin/dead-letters?limit=1000", nil)
			req.Header.Set("Authorization", "Bearer "+w.tokens[tenant])
			res, err := client.Do(req)
			if err != nil {
				cancel()
				lastErr = err
				continue
			}
			var body struct {
				DeadLetters []json.RawMessage `json:"dead_letters"`
			}
			err = json.NewDecoder(res.Body).Decode(&body)
			res.Body.Close()
			cancel()
			if res.StatusCode != http.StatusOK || err != nil {
				lastErr = fmt.Errorf("%s: status %d (%v)", u, res.StatusCode, err)
				continue
			}
			total += len(body.DeadLetters)
			ok = true
			break
		}
		if !ok {
			return 0, fmt.Errorf("dead letters of %s: %w", tenant, lastErr)
		}
	}
	return total, nil
}
