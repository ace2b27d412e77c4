package harness

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Failover: the primary dies under load and strata loses nothing it
// acknowledged (issue 32 §1). A Patroni cluster of three PostgreSQL members
// in synchronous mode (patroni.go) serves two strata processes through a
// multi-host URL with target_session_attrs=read-write; under the R1 load
// the harness kills the primary twice: its postmaster with SIGKILL, and,
// once the cluster has recovered, its Patroni with SIGKILL (PostgreSQL
// lives on, orphaned, until the leader key expires and a standby is
// promoted; the harness restarts that Patroni, as systemd would, a while
// after the new leader took over, and it demotes the orphan).
const Failover = "FAILOVER"

// FailoverConfig sizes FAILOVER.
type FailoverConfig struct {
	Load      LoadConfig
	Processes int
	Timings   PatroniTimings
	// FirstKill: when (from the start of the load) the primary's
	// postmaster is killed; SecondKill: the earliest moment its Patroni
	// is killed (after the cluster is healthy again).
	FirstKill, SecondKill time.Duration
	// PatroniDown is how long the killed Patroni stays down after a new
	// leader has taken over (its orphaned PostgreSQL keeps running
	// meanwhile) before it is started again.
	PatroniDown time.Duration
	// MaxRTO bounds, per kill, the time from the kill to the first
	// acknowledged command after it: for the postmaster (Patroni fails
	// over at its next cycle) and for Patroni (the leader key must
	// expire first: TTL plus a cycle).
	MaxRTOPostmaster, MaxRTOPatroni time.Duration
	// ReadyAgain bounds the time from the first write the new primary
	// accepts to every process's /readyz answering 200.
	ReadyAgain time.Duration
	// CatchUp bounds the projections reaching the head after the load.
	CatchUp time.Duration
}

// DefaultFailover is FAILOVER's size in `make chaos` (about 1.5 minutes).
func DefaultFailover() FailoverConfig {
	return FailoverConfig{
		Load: LoadConfig{Clients: 6, Commands: 400, Tenants: 4, Streams: 48,
			Pace: 50 * time.Second, MaxDuration: 100 * time.Second,
			RequestTimeout: 3 * time.Second, RetryFor: 45 * time.Second},
		Processes: 2,
		Timings:   PatroniTimings{TTL: 10 * time.Second, LoopWait: time.Second, RetryTimeout: 4 * time.Second},
		FirstKill: 8 * time.Second, SecondKill: 24 * time.Second, PatroniDown: 12 * time.Second,
		MaxRTOPostmaster: 20 * time.Second, MaxRTOPatroni: 30 * time.Second,
		ReadyAgain: 10 * time.Second, CatchUp: 15 * time.Second,
	}
}

func (c FailoverConfig) validate() error {
	switch {
	case c.Processes < 1 || c.Load.Clients < 1 || c.Load.Commands < 1 || c.Load.Tenants < 1 || c.Load.Streams < c.Load.Tenants:
		return errors.New("FAILOVER: want at least one process, client, command and tenant, and a stream per tenant")
	case c.Timings.TTL < c.Timings.LoopWait+2*c.Timings.RetryTimeout || c.Timings.LoopWait < time.Second:
		return errors.New("FAILOVER: want ttl >= loop_wait + 2 x retry_timeout and loop_wait >= 1s (Patroni's rule)")
	case c.FirstKill <= 0 || c.SecondKill <= c.FirstKill || c.PatroniDown < 0:
		return errors.New("FAILOVER: want 0 < first kill < second kill and a patroni downtime >= 0")
	case c.MaxRTOPostmaster <= 0 || c.MaxRTOPatroni <= 0 || c.ReadyAgain <= 0 || c.CatchUp <= 0:
		return errors.New("FAILOVER: want positive bounds")
	}
	return nil
}

// failoverKill is one fault and what the harness saw of it.
type failoverKill struct {
	what       string // "postmaster" or "patroni"
	victim     string // member name
	pid        int
	at         time.Time // the signal was sent
	leaderAt   time.Time // a new leader accepted writes (harness's own check)
	newLeader  string
	healthyAt  time.Time // the cluster had a sync standby and every member again
	restartedA time.Time // Patroni started again (patroni kills)
}

func (e *env) runFailover(ctx context.Context, r *Result) error {
	cfg := e.cfg.Failover
	if cfg.Processes == 0 {
		cfg = DefaultFailover()
	}
	if err := cfg.validate(); err != nil {
		return err
	}
	r.Title = "the primary dies under load (Patroni, synchronous standby)"
	pc, err := startPatroniCluster(ctx, filepath.Join(e.dir, "failover"), e.cfg.PGBin, durableSettings, cfg.Timings, e.logf)
	if err != nil {
		return err
	}
	defer pc.Stop()
	src := *e
	src.target = pc
	s, err := src.startLoadScenario(ctx, Failover, cfg.Load, cfg.Processes, nil)
	if err != nil {
		return err
	}
	defer s.sup.Stop(5 * time.Second)
	r.note("topology: etcd, 3 Patroni members (synchronous_mode, ttl %s, loop_wait %s, retry_timeout %s, primary_start_timeout 0); strata DATABASE_URL %s",
		cfg.Timings.TTL, cfg.Timings.LoopWait, cfg.Timings.RetryTimeout, redactUser(s.url))

	// Probes: a write through the multi-host URL (does a primary accept
	// writes?) and every process's /readyz, both every 200 ms.
	pctx, stopProbes := context.WithCancel(ctx)
	defer stopProbes()
	probes := &failoverProbes{}
	var pwg sync.WaitGroup
	pwg.Add(2)
	go func() { defer pwg.Done(); probes.writes(pctx, pc.URLFor("postgres")) }()
	go func() { defer pwg.Done(); probes.readyz(pctx, s.sup.URLs()) }()

	done := make(chan struct{})
	var wg sync.WaitGroup
	var kills []*failoverKill
	var faultErr error
	wg.Add(2)
	go func() { defer wg.Done(); e.progress(s, done) }()
	start := time.Now()
	go func() {
		defer wg.Done()
		faultErr = e.failoverFaults(ctx, s, pc, cfg, start, &kills)
	}()
	e.runLoad(ctx, s)
	loadEnd := time.Now()
	close(done)
	wg.Wait()
	stopProbes()
	pwg.Wait()
	if faultErr != nil {
		return fmt.Errorf("failover: %w", faultErr)
	}
	e.logf("FAILOVER: load done; cluster: %s", pc.Describe(ctx))

	e.failoverCriteria(r, cfg, s, kills, probes)

	if err := s.sup.WaitReady(ctx, 60*time.Second); err != nil {
		return err
	}
	from := loadEnd
	if n := len(kills); n > 0 && kills[n-1].healthyAt.After(from) {
		from = kills[n-1].healthyAt
	}
	return src.finish(ctx, r, s, from, cfg.CatchUp)
}

// failoverFaults kills the primary's postmaster at FirstKill, waits for
// the new leader and a healthy cluster, then kills the new primary's
// Patroni at SecondKill (or once healthy, if later), keeps it down until
// PatroniDown after a new leader took over, and waits for health again.
func (e *env) failoverFaults(ctx context.Context, s *loadScenario, pc *patroniCluster, cfg FailoverConfig, start time.Time, out *[]*failoverKill) error {
	for n, what := range []string{"postmaster", "patroni"} {
		at := start.Add(cfg.FirstKill)
		if n == 1 {
			at = start.Add(cfg.SecondKill)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(at)):
		}
		leader := pc.Leader(ctx)
		if leader < 0 {
			return fmt.Errorf("no leader before the %s kill: %s", what, pc.Describe(ctx))
		}
		// A moment when commands are in flight, so that some die
		// between their commit and its acknowledgement.
		for wait := time.Now().Add(500 * time.Millisecond); time.Now().Before(wait); time.Sleep(time.Millisecond) {
			busy := false
			for i := range s.load.inflight {
				busy = busy || s.load.inflight[i].Load() > 0
			}
			if busy {
				break
			}
		}
		k := &failoverKill{what: what, victim: pc.members[leader].name}
		var release func()
		var err error
		if what == "postmaster" {
			k.pid, err = pc.KillPostmaster(leader)
		} else {
			k.pid, release, err = pc.KillPatroni(leader)
		}
		k.at = time.Now()
		if err != nil {
			return err
		}
		*out = append(*out, k)
		e.logf("FAILOVER: kill %d: SIGKILL the %s of the primary %s (pid %d)", n+1, what, k.victim, k.pid)
		nl, err := pc.WaitLeader(ctx, leader, 90*time.Second)
		if err != nil {
			if release != nil {
				release()
			}
			return fmt.Errorf("after the %s kill: %w (%s)", what, err, pc.Describe(ctx))
		}
		k.leaderAt, k.newLeader = time.Now(), pc.members[nl].name
		e.logf("FAILOVER: kill %d: %s is the new primary after %s", n+1, k.newLeader, k.leaderAt.Sub(k.at).Round(time.Millisecond))
		if release != nil {
			select {
			case <-ctx.Done():
			case <-time.After(cfg.PatroniDown):
			}
			release()
			k.restartedA = time.Now()
			e.logf("FAILOVER: kill %d: Patroni of %s started again (%s after the new leader)", n+1, k.victim, k.restartedA.Sub(k.leaderAt).Round(time.Millisecond))
		}
		if err := pc.WaitHealthy(ctx, 90*time.Second); err != nil {
			return fmt.Errorf("after the %s kill: %w", what, err)
		}
		k.healthyAt = time.Now()
		e.logf("FAILOVER: kill %d: cluster healthy again after %s: %s", n+1, k.healthyAt.Sub(k.at).Round(time.Millisecond), pc.Describe(ctx))
	}
	return nil
}

// failoverProbes are the harness's own observations during the load.
type failoverProbes struct {
	mu     sync.Mutex
	write  []probeSample
	ready  []probeSample
	target []string // readyz: the process URLs, by index
}

type probeSample struct {
	start, end time.Time
	proc       int // readyz: the process
	ok         bool
	status     int
	detail     string
}

// writes commits a row through url every 200 ms (each time on a new
// connection, so that the URL picks whichever member accepts writes).
func (p *failoverProbes) writes(ctx context.Context, url string) {
	setup := func() error {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(cctx, url)
		if err != nil {
			return err
		}
		defer conn.Close(context.WithoutCancel(ctx))
		_, err = conn.Exec(cctx, `CREATE TABLE IF NOT EXISTS public.chaos_failover_probe (at timestamptz NOT NULL)`)
		return err
	}
	for setup() != nil && ctx.Err() == nil {
		time.Sleep(200 * time.Millisecond)
	}
	for ctx.Err() == nil {
		sm := probeSample{start: time.Now()}
		func() {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			conn, err := pgx.Connect(cctx, url)
			if err != nil {
				sm.detail = "connect: " + oneLine(err.Error(), 80)
				return
			}
			defer conn.Close(context.WithoutCancel(ctx))
			if _, err := conn.Exec(cctx, `INSERT INTO public.chaos_failover_probe VALUES (now())`); err != nil {
				sm.detail = "insert: " + oneLine(err.Error(), 80)
				return
			}
			sm.ok, sm.detail = true, conn.PgConn().Conn().RemoteAddr().String()
		}()
		sm.end = time.Now()
		if ctx.Err() != nil {
			return
		}
		p.mu.Lock()
		p.write = append(p.write, sm)
		p.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// readyz asks every process's /readyz every 200 ms.
func (p *failoverProbes) readyz(ctx context.Context, urls []string) {
	p.target = urls
	client := newHTTPClient(len(urls))
	var wg sync.WaitGroup
	for i, u := range urls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				sm := probeSample{start: time.Now(), proc: i}
				rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				req, _ := http.NewRequestWithContext(rctx, http.MethodGet, u+"/readyz", nil)
				res, err := client.Do(req)
				if err == nil {
					sm.status = res.StatusCode
					sm.ok = res.StatusCode == http.StatusOK
					res.Body.Close()
				} else {
					sm.detail = transportError(err)
				}
				cancel()
				sm.end = time.Now()
				if ctx.Err() != nil {
					return
				}
				p.mu.Lock()
				p.ready = append(p.ready, sm)
				p.mu.Unlock()
				select {
				case <-ctx.Done():
				case <-time.After(200 * time.Millisecond):
				}
			}
		}()
	}
	wg.Wait()
}

// outage is a stretch of time during which no write through the URL
// committed: from the start of the first failed probe to the start of
// the next successful one.
type outage struct{ from, to, lastFail time.Time }

func (p *failoverProbes) outages() []outage {
	var out []outage
	var cur *outage
	for _, sm := range p.write {
		switch {
		case !sm.ok && cur == nil:
			cur = &outage{from: sm.start, lastFail: sm.start}
		case !sm.ok:
			cur.lastFail = sm.start
		case sm.ok && cur != nil:
			cur.to = sm.start
			out = append(out, *cur)
			cur = nil
		}
	}
	if cur != nil {
		cur.to = time.Now()
		out = append(out, *cur)
	}
	return out
}

// readyGrace: a /readyz answer that started within this long of the
// first failed write probe may still have been right (the probe's own
// timeout is a second).
const readyGrace = time.Second

func (e *env) failoverCriteria(r *Result, cfg FailoverConfig, s *loadScenario, kills []*failoverKill, p *failoverProbes) {
	r.check("primary kills during the load (postmaster, then Patroni)", "2, each followed by a new primary",
		fmt.Sprintf("%d: %s", len(kills), describeKills(kills)), len(kills) == 2 && !kills[0].leaderAt.IsZero() && !kills[1].leaderAt.IsZero())
	attempts := s.load.hist.attempts()
	ops := s.load.hist.Ops()
	outs := p.outages()
	var acks []time.Time
	for _, a := range attempts {
		if a.Outcome == OK {
			acks = append(acks, a.End)
		}
	}
	sort.Slice(acks, func(i, j int) bool { return acks[i].Before(acks[j]) })
	for _, k := range kills {
		// RTO as the issue defines it: from the kill to the first
		// acknowledgement of a command sent after it.
		var first time.Time
		for _, a := range attempts {
			if a.Outcome == OK && !a.Start.Before(k.at) && (first.IsZero() || a.End.Before(first)) {
				first = a.End
			}
		}
		// A killed Patroni leaves its PostgreSQL serving until the leader
		// key expires: the outage clients see starts later. So also the
		// longest stretch without any acknowledgement from the kill until
		// the cluster was healthy again (from the last one before it).
		end := k.healthyAt
		if end.IsZero() {
			end = time.Now()
		}
		var gapFrom, gapTo, prev time.Time
		for _, t := range acks {
			if t.After(end) {
				if !prev.IsZero() && t.Sub(prev) > gapTo.Sub(gapFrom) && prev.Before(end) {
					gapFrom, gapTo = prev, t
				}
				break
			}
			if !t.Before(k.at) && !prev.IsZero() && t.Sub(prev) > gapTo.Sub(gapFrom) {
				gapFrom, gapTo = prev, t
			}
			prev = t
		}
		limit := cfg.MaxRTOPostmaster
		if k.what == "patroni" {
			limit = cfg.MaxRTOPatroni
		}
		rto, gap := first.Sub(k.at), gapTo.Sub(gapFrom)
		// Latency of the other commands around it: every acknowledged
		// command in flight during that stretch, from its first attempt
		// to its acknowledgement; and, for comparison, of the commands
		// far from any failover.
		var around, outside []time.Duration
		for _, op := range ops {
			if op.Outcome != OK {
				continue
			}
			if op.End.After(gapFrom) && op.Start.Before(gapTo) {
				around = append(around, op.End.Sub(op.Start))
			} else if !overlapsAnyKill(op, kills) {
				outside = append(outside, op.End.Sub(op.Start))
			}
		}
		got := "never"
		if !first.IsZero() {
			got = fmt.Sprintf("%s; no ack for %s; p99 around %s (%d cmds), elsewhere %s",
				rto.Round(10*time.Millisecond), gap.Round(10*time.Millisecond), p99(around), len(around), p99(outside))
		}
		r.check(fmt.Sprintf("RTO after SIGKILL of the primary's %s: kill to first ack (and longest stretch without one)", k.what),
			"<= "+limit.String(), got, !first.IsZero() && rto <= limit && gap <= limit)
		r.note("%s kill of %s (pid %d) at %s: new primary %s after %s (harness's check); RTO %s (kill to the first acknowledgement of a command sent after it); no command acknowledged from %s to %s (%s); the %d acknowledged commands in flight then: p99 %s, max %s; elsewhere p99 %s; cluster healthy again after %s",
			k.what, k.victim, k.pid, k.at.Format("15:04:05.000"), k.newLeader, k.leaderAt.Sub(k.at).Round(time.Millisecond),
			rto.Round(time.Millisecond), gapFrom.Format("15:04:05.000"), gapTo.Format("15:04:05.000"), gap.Round(time.Millisecond),
			len(around), p99(around), maxDur(around), p99(outside), k.healthyAt.Sub(k.at).Round(time.Millisecond))
		if !k.restartedA.IsZero() {
			r.note("  Patroni of %s restarted %s after the new leader (PatroniDown), %s after the kill", k.victim,
				k.restartedA.Sub(k.leaderAt).Round(time.Millisecond), k.restartedA.Sub(k.at).Round(time.Millisecond))
		}
	}

	// /readyz: honest while no primary accepts writes, ready again after.
	p.mu.Lock()
	ready := append([]probeSample(nil), p.ready...)
	writes := len(p.write)
	p.mu.Unlock()
	lying, notReady := 0, make([]int, len(kills))
	var lies []string
	for _, sm := range ready {
		for _, o := range outs {
			// Certainly no primary: from a second after the first failed
			// probe to the start of the last one (a probe that failed may
			// have connected to the orphan just before a promotion).
			if sm.ok && !sm.start.Before(o.from.Add(readyGrace)) && !sm.end.After(o.lastFail) {
				lying++
				if len(lies) < 5 {
					lies = append(lies, fmt.Sprintf("%s ready at %s..%s while no write committed %s..%s", s.sup.procs[sm.proc].spec.Name,
						sm.start.Format("15:04:05.000"), sm.end.Format("15:04:05.000"), o.from.Format("15:04:05.000"), o.lastFail.Format("15:04:05.000")))
				}
			}
		}
		for i, k := range kills {
			end := k.healthyAt
			if end.IsZero() {
				end = time.Now()
			}
			if !sm.ok && !sm.start.Before(k.at) && sm.start.Before(end) {
				notReady[i]++
			}
		}
	}
	var outDesc []string
	for _, o := range outs {
		outDesc = append(outDesc, fmt.Sprintf("%s for %s", o.from.Format("15:04:05.000"), o.to.Sub(o.from).Round(time.Millisecond)))
	}
	r.note("write probes through the multi-host URL: %d; outages (no write committed): %s", writes, orNone(strings.Join(outDesc, "; ")))
	r.zero("/readyz answering 200 while no primary accepted writes (write probe every 200 ms)", lying)
	for _, l := range lies {
		r.note("READYZ LIED: %s", l)
	}
	minNot := -1
	for _, n := range notReady {
		if minNot < 0 || n < minNot {
			minNot = n
		}
	}
	r.check("/readyz not ready at least once during each failover (fewest 503s of a failover)", ">= 1",
		fmt.Sprintf("%d (%v)", max(minNot, 0), notReady), minNot >= 1 && len(kills) == 2)
	// Ready again: per kill, the first write probe that committed after
	// the kill's outage, then every process's first 200 after it.
	var worst time.Duration
	readyOK := len(kills) > 0
	for _, k := range kills {
		back := time.Time{}
		for _, o := range outs {
			if !o.to.Before(k.at) {
				back = o.to
				break
			}
		}
		if back.IsZero() {
			continue // no outage seen for this kill: nothing to come back from
		}
		for proc := range s.sup.procs {
			var first time.Time
			for _, sm := range ready {
				if sm.proc == proc && sm.ok && !sm.start.Before(back) {
					first = sm.end
					break
				}
			}
			if first.IsZero() {
				readyOK = false
				r.note("%s never ready again after the %s kill's outage ended at %s", s.sup.procs[proc].spec.Name, k.what, back.Format("15:04:05.000"))
				continue
			}
			worst = max(worst, first.Sub(back))
		}
	}
	r.within("every process ready again after the new primary accepts writes (worst)", cfg.ReadyAgain, worst, readyOK)
	// Not a criterion (a pool may hold connections to the orphan and to
	// the new primary at once): ready answers while a command sent to the
	// same process had already waited 3 s and then timed out or dropped.
	stuckReady := 0
	for _, sm := range ready {
		if !sm.ok {
			continue
		}
		for _, a := range attempts {
			if a.Target == sm.proc && a.Outcome == Info && a.Status == 0 && !a.Start.After(sm.start.Add(-3*time.Second)) && !a.End.Before(sm.end) {
				stuckReady++
				break
			}
		}
	}
	r.note("/readyz 200 answers while a command sent to the same process had waited 3 s already and then timed out or dropped: %d", stuckReady)
	var byStatus = map[string]int{}
	for _, sm := range ready {
		k := fmt.Sprint(sm.status)
		if sm.status == 0 {
			k = sm.detail
		}
		byStatus[k]++
	}
	r.note("/readyz answers during the load: %s", formatCounts(byStatus))
}

func describeKills(kills []*failoverKill) string {
	var parts []string
	for _, k := range kills {
		nl := "no new primary"
		if k.newLeader != "" {
			nl = fmt.Sprintf("%s -> %s in %s", k.victim, k.newLeader, k.leaderAt.Sub(k.at).Round(100*time.Millisecond))
		}
		parts = append(parts, fmt.Sprintf("%s %s", k.what, nl))
	}
	return strings.Join(parts, ", ")
}

func overlapsAnyKill(op *Op, kills []*failoverKill) bool {
	for _, k := range kills {
		end := k.healthyAt
		if end.IsZero() {
			end = time.Now()
		}
		if op.End.After(k.at.Add(-time.Second)) && op.Start.Before(end) {
			return true
		}
	}
	return false
}

func p99(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (len(s)*99 + 99) / 100
	return s[min(i, len(s))-1].Round(time.Millisecond).String()
}

func maxDur(ds []time.Duration) string {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m.Round(time.Millisecond).String()
}

// redactUser shows a URL without its user.
func redactUser(u string) string {
	if i := strings.Index(u, "@"); i > 0 && strings.HasPrefix(u, "postgres://") {
		return "postgres://…@" + u[i+1:]
	}
	return u
}
