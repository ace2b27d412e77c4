package harness

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// procSample is one serve process at one moment.
type procSample struct {
	Pid        int     // 0: not running
	RSS        int64   // bytes, /proc/PID/status VmRSS; -1 unknown
	Goroutines float64 // go_goroutines from /metrics; -1 unknown
	HeapInuse  float64 // go_memstats_heap_inuse_bytes; -1 unknown
	// IdleConns are the goroutines of HTTP connections waiting for a
	// request (keep-alive; from the goroutine profile): the client, not
	// the server, decides how many there are. -1 unknown.
	IdleConns float64
}

// soakSample is one sampling round: it began At and ended Done (the lag
// and the dead letters are read after the processes).
type soakSample struct {
	At    time.Time
	Done  time.Time
	Procs []procSample
	// Lag is the worst projection lag (seconds behind) of every tenant's
	// view of /v1/admin/projections; LagEvents the most events behind.
	// -1: the route did not answer.
	Lag       float64
	LagEvents int64
	// Parked is the dead letters waiting (status parked); -1 unknown.
	Parked int64
}

// goroutines returns the sum over the processes of go_goroutines less the
// idle connections' goroutines (ok false when a process was not running
// or did not answer).
func (s soakSample) goroutines() (float64, bool) {
	sum := 0.0
	for _, p := range s.Procs {
		if p.Pid == 0 || p.Goroutines < 0 || p.IdleConns < 0 {
			return 0, false
		}
		sum += max(p.Goroutines-p.IdleConns, 0)
	}
	return sum, len(s.Procs) > 0
}

// allGoroutines is the plain sum of go_goroutines.
func (s soakSample) allGoroutines() (float64, bool) {
	sum := 0.0
	for _, p := range s.Procs {
		if p.Pid == 0 || p.Goroutines < 0 {
			return 0, false
		}
		sum += p.Goroutines
	}
	return sum, len(s.Procs) > 0
}

// sampler reads every process's RSS and goroutines, the lag and the
// dead letters every interval until stopped.
type sampler struct {
	e        *env
	s        *loadScenario
	metrics  []string // per process, its /metrics URL
	pprof    []string // per process, its /debug/pprof/goroutine URL
	every    time.Duration
	client   *http.Client
	mu       sync.Mutex
	samples  []soakSample
	lagErrs  int
	lastErr  string
	conn     *pgx.Conn
	stop     chan struct{}
	finished chan struct{}
}

func (e *env) startSampler(ctx context.Context, s *loadScenario, metrics, pprof []string, every time.Duration) *sampler {
	c := newHTTPClient(4)
	c.Transport.(*http.Transport).IdleConnTimeout = 30 * time.Second
	sm := &sampler{e: e, s: s, metrics: metrics, pprof: pprof, every: every, client: c, stop: make(chan struct{}), finished: make(chan struct{})}
	go sm.loop(ctx)
	return sm
}

func (sm *sampler) loop(ctx context.Context) {
	defer close(sm.finished)
	defer func() {
		if sm.conn != nil {
			sm.conn.Close(context.WithoutCancel(ctx))
		}
	}()
	t := time.NewTicker(sm.every)
	defer t.Stop()
	for {
		sm.take(ctx)
		select {
		case <-ctx.Done():
			return
		case <-sm.stop:
			return
		case <-t.C:
		}
	}
}

// Stop ends the sampling and returns every sample.
func (sm *sampler) Stop() []soakSample {
	close(sm.stop)
	<-sm.finished
	sm.mu.Lock()
	defer sm.mu.Unlock()
	return append([]soakSample(nil), sm.samples...)
}

func (sm *sampler) take(ctx context.Context) {
	smp := soakSample{At: time.Now(), Lag: -1, Parked: -1}
	for i := range sm.metrics {
		ps := procSample{RSS: -1, Goroutines: -1, HeapInuse: -1, IdleConns: -1}
		if ps.Pid = sm.s.sup.Pid(i); ps.Pid != 0 {
			ps.RSS = readRSS(ps.Pid)
			m, err := scrape(ctx, sm.client, sm.metrics[i], "go_goroutines", "go_memstats_heap_inuse_bytes")
			if err == nil {
				ps.Goroutines, ps.HeapInuse = m["go_goroutines"], m["go_memstats_heap_inuse_bytes"]
			}
			if prof, err := fetchGoroutines(ctx, sm.client, sm.pprof[i]); err == nil {
				ps.IdleConns = float64(prof.idle)
			}
			// A process that went away while it was read has no sample.
			if sm.s.sup.Pid(i) != ps.Pid {
				ps = procSample{RSS: -1, Goroutines: -1, HeapInuse: -1, IdleConns: -1}
			}
		}
		smp.Procs = append(smp.Procs, ps)
	}
	// The lag of every tenant within one bound, so that a slow server
	// delays the next round (of RSS and goroutines) by little.
	lctx, cancel := context.WithTimeout(ctx, max(sm.every, 2*time.Second))
	defer cancel()
	lagOK := true
	for _, tenant := range sm.s.w.tenants {
		lags, err := adminLag(lctx, sm.client, sm.s.sup.URLs(), sm.s.w.tokens[tenant])
		if err != nil {
			lagOK = false
			sm.lastErr = oneLine(err.Error(), 120)
			break
		}
		for _, l := range lags {
			smp.Lag = max(smp.Lag, l.Seconds)
			smp.LagEvents = max(smp.LagEvents, l.Events)
		}
	}
	if !lagOK {
		smp.Lag, smp.LagEvents = -1, 0
	}
	smp.Parked = sm.parked(ctx)
	smp.Done = time.Now()
	sm.mu.Lock()
	if !lagOK {
		sm.lagErrs++
	}
	sm.samples = append(sm.samples, smp)
	sm.mu.Unlock()
}

// parked counts the dead letters waiting, every tenant's (the harness
// connects as the superuser); -1 while PostgreSQL does not answer.
func (sm *sampler) parked(ctx context.Context) int64 {
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if sm.conn == nil || sm.conn.IsClosed() {
		c, err := pgx.Connect(qctx, sm.s.url)
		if err != nil {
			return -1
		}
		sm.conn = c
	}
	n, err := countParked(qctx, sm.conn)
	if err != nil {
		sm.conn.Close(context.WithoutCancel(ctx))
		sm.conn = nil
		return -1
	}
	return n
}

func countParked(ctx context.Context, conn *pgx.Conn) (int64, error) {
	var n int64
	err := conn.QueryRow(ctx, `SELECT count(*) FROM dead_letters WHERE status = 'parked'`).Scan(&n)
	return n, err
}

// readRSS returns VmRSS of a process in bytes (-1 unknown).
func readRSS(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) >= 1 {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				if err == nil {
					return kb << 10
				}
			}
		}
	}
	return -1
}

// scrape reads the named untyped/gauge samples (no labels) from a
// Prometheus text exposition.
func scrape(ctx context.Context, client *http.Client, url string, names ...string) (map[string]float64, error) {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
	res, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: status %d", url, res.StatusCode)
	}
	return parseMetrics(res.Body, names...)
}

func parseMetrics(r io.Reader, names ...string) (map[string]float64, error) {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok || !want[name] {
			continue
		}
		f, err := strconv.ParseFloat(strings.Fields(val)[0], 64)
		if err != nil {
			return nil, fmt.Errorf("metric %s: %w", name, err)
		}
		out[name] = f
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for _, n := range names {
		if _, ok := out[n]; !ok {
			return nil, fmt.Errorf("metric %s missing", n)
		}
	}
	return out, nil
}

// faultWindow is one fault: its action ran from Start to End (the kill to
// the process ready again, the crash to PostgreSQL accepting connections,
// the transaction's open to its commit); Settled is End plus the plan's
// recovery allowance. Samples in [Start, Settled) are not judged.
type faultWindow struct {
	Kind                string
	Start, End, Settled time.Time
	Detail              string
}

// end is when the round finished (At for a sample without Done).
func (s soakSample) end() time.Time {
	if s.Done.Before(s.At) {
		return s.At
	}
	return s.Done
}

// inWindow reports whether the round overlaps a fault window.
func (s soakSample) inWindow(ws []faultWindow) bool {
	for _, w := range ws {
		if s.end().After(w.Start) && s.At.Before(w.Settled) {
			return true
		}
	}
	return false
}

// inQuiet reports whether the whole round lies in one of the quiet
// intervals: a round that began just before a fault and read the lag
// while PostgreSQL went down belongs to the fault.
func (s soakSample) inQuiet(quiet [][2]time.Time) bool {
	for _, q := range quiet {
		if !s.At.Before(q[0]) && s.end().Before(q[1]) {
			return true
		}
	}
	return false
}

// quietIntervals are the spans outside fault windows from from to to: the
// first ends at the first fault, the others start when a window settles.
func quietIntervals(from, to time.Time, ws []faultWindow) [][2]time.Time {
	var out [][2]time.Time
	start := from
	for _, w := range ws {
		if w.Start.After(start) {
			out = append(out, [2]time.Time{start, w.Start})
		}
		if w.Settled.After(start) {
			start = w.Settled
		}
	}
	if to.After(start) {
		out = append(out, [2]time.Time{start, to})
	}
	return out
}

// incarnation is one process's run under one pid.
type incarnation struct {
	Proc       int
	Pid        int
	Start, End time.Time // first and last sample (or the supervisor's start)
	Samples    []soakSample
}

// incarnations splits the samples by process and pid, in order of start.
func incarnations(samples []soakSample, starts map[int]time.Time) []*incarnation {
	byKey := map[[2]int]*incarnation{}
	var out []*incarnation
	for _, s := range samples {
		for i, p := range s.Procs {
			if p.Pid == 0 || p.RSS < 0 {
				continue
			}
			k := [2]int{i, p.Pid}
			inc := byKey[k]
			if inc == nil {
				inc = &incarnation{Proc: i, Pid: p.Pid, Start: s.At}
				if st, ok := starts[p.Pid]; ok && st.Before(s.At) {
					inc.Start = st
				}
				byKey[k] = inc
				out = append(out, inc)
			}
			inc.End = s.At
			inc.Samples = append(inc.Samples, s)
		}
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].Start.Before(out[b].Start) })
	return out
}

// windowsLived counts the fault windows whose whole action the
// incarnation was running through.
func (inc *incarnation) windowsLived(ws []faultWindow) int {
	n := 0
	for _, w := range ws {
		if !w.Start.Before(inc.Start) && !w.End.After(inc.End) {
			n++
		}
	}
	return n
}

// rssGrowth is the judgement of one incarnation's RSS.
type rssGrowth struct {
	Proc, Pid      int
	Windows        int
	From, To       time.Time
	Samples        int
	FirstMiB       float64 // fitted at From
	LastMiB        float64 // fitted at To
	PerUnit        float64 // fitted growth per unit, relative to FirstMiB
	Per10Min       float64 // the same rate per 10 minutes
	Judged         bool
	AfterOutage    bool // judged from the end of its first PostgreSQL outage
	NotJudgedWhy   string
	MaxMiB, MinMiB float64
}

// judgeRSS fits a least-squares line to each incarnation's RSS from its
// start plus warmup (or the end of the first R2 window it ran through, if
// later) to its end, outside the fault windows (a transient
// peak while PostgreSQL is down is not growth; the level it leaves
// behind is), and expresses the slope as growth per unit
// relative to the fitted RSS at the span's start. Incarnations that ran
// through fewer than two fault windows, or have fewer than 5 samples or
// less than a whole unit after their warm-up (a rate per unit fitted over
// a fraction of it extrapolates the warm-up's tail), are listed but not
// judged.
func judgeRSS(incs []*incarnation, ws []faultWindow, warmup, unit time.Duration) []rssGrowth {
	var out []rssGrowth
	for _, inc := range incs {
		g := rssGrowth{Proc: inc.Proc, Pid: inc.Pid, Windows: inc.windowsLived(ws)}
		from := inc.Start.Add(warmup)
		// The first PostgreSQL outage a process serves through sizes its
		// heap for the pile of requests waiting meanwhile (hundreds of
		// goroutines and their buffers, kept by the runtime afterwards):
		// part of its warm-up, not growth. Later outages are judged.
		for _, w := range ws {
			if w.Kind == R2 && !w.Start.Before(inc.Start) && !w.End.After(inc.End) {
				if w.Settled.After(from) {
					from, g.AfterOutage = w.Settled, true
				}
				break
			}
		}
		var xs, ys []float64
		for _, s := range inc.Samples {
			if s.At.Before(from) || s.inWindow(ws) {
				continue
			}
			mib := float64(s.Procs[inc.Proc].RSS) / (1 << 20)
			if len(xs) == 0 {
				g.From, g.MinMiB, g.MaxMiB = s.At, mib, mib
			}
			g.To = s.At
			g.MinMiB, g.MaxMiB = min(g.MinMiB, mib), max(g.MaxMiB, mib)
			xs = append(xs, s.At.Sub(from).Seconds())
			ys = append(ys, mib)
		}
		g.Samples = len(xs)
		switch {
		case g.Windows < 2:
			g.NotJudgedWhy = fmt.Sprintf("ran through %d fault window(s)", g.Windows)
		case len(xs) < 5 || g.To.Sub(g.From) < unit:
			g.NotJudgedWhy = fmt.Sprintf("%d samples over %s after its warm-up", len(xs), g.To.Sub(g.From).Round(time.Second))
		default:
			slope, icept := fitLine(xs, ys)
			g.FirstMiB = icept + slope*xs[0]
			g.LastMiB = icept + slope*xs[len(xs)-1]
			if g.FirstMiB > 0 {
				g.PerUnit = slope * unit.Seconds() / g.FirstMiB
				g.Per10Min = slope * (10 * time.Minute).Seconds() / g.FirstMiB
			}
			g.Judged = true
		}
		out = append(out, g)
	}
	return out
}

// fitLine returns the least-squares slope and intercept of y over x.
func fitLine(xs, ys []float64) (slope, intercept float64) {
	n := float64(len(xs))
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0, sy / n
	}
	slope = (n*sxy - sx*sy) / d
	return slope, (sy - slope*sx) / n
}

// goroutineVerdict: the baseline is the median of the summed goroutines
// in the first quiet interval (before any fault); every later quiet
// interval's median must stay within the allowed growth over it.
type goroutineVerdict struct {
	Baseline  float64
	Intervals []goroutineInterval
	// Worst is the highest interval median relative to the baseline.
	Worst     float64
	WorstAt   time.Time
	MaxSample float64 // the highest single sample outside windows
}

type goroutineInterval struct {
	From, To time.Time
	Median   float64
	Samples  int
}

func judgeGoroutines(samples []soakSample, quiet [][2]time.Time) goroutineVerdict {
	var v goroutineVerdict
	for i, q := range quiet {
		var vals []float64
		for _, s := range samples {
			if !s.inQuiet(quiet[i : i+1]) {
				continue
			}
			if g, ok := s.goroutines(); ok {
				vals = append(vals, g)
				v.MaxSample = max(v.MaxSample, g)
			}
		}
		if len(vals) == 0 {
			continue
		}
		iv := goroutineInterval{From: q[0], To: q[1], Median: median(vals), Samples: len(vals)}
		if i == 0 {
			v.Baseline = iv.Median
		}
		v.Intervals = append(v.Intervals, iv)
		if v.Baseline > 0 && iv.Median/v.Baseline-1 > v.Worst {
			v.Worst, v.WorstAt = iv.Median/v.Baseline-1, q[0]
		}
	}
	return v
}

func median(vals []float64) float64 {
	s := append([]float64(nil), vals...)
	sort.Float64s(s)
	n := len(s)
	if n == 0 {
		return math.NaN()
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// quantile returns the q-quantile (nearest rank) of vals.
func quantile(vals []float64, q float64) float64 {
	s := append([]float64(nil), vals...)
	sort.Float64s(s)
	if len(s) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// lagOutside returns the lag samples in the quiet intervals and how many
// of those rounds had no answer from the admin route.
func lagOutside(samples []soakSample, quiet [][2]time.Time) (vals []float64, missing int) {
	for _, s := range samples {
		if !s.inQuiet(quiet) {
			continue
		}
		if s.Lag < 0 {
			missing++
			continue
		}
		vals = append(vals, s.Lag)
	}
	return vals, missing
}

// writeSamplesCSV stores the samples: one row per sample and process.
func writeSamplesCSV(path string, samples []soakSample, t0 time.Time) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	fmt.Fprintln(w, "at,seconds,process,pid,rss_bytes,goroutines,idle_connection_goroutines,heap_inuse_bytes,lag_seconds,lag_events,dead_letters_parked")
	for _, s := range samples {
		for i, p := range s.Procs {
			fmt.Fprintf(w, "%s,%.3f,%d,%d,%d,%g,%g,%g,%g,%d,%d\n", s.At.UTC().Format(time.RFC3339Nano), s.At.Sub(t0).Seconds(),
				i, p.Pid, p.RSS, p.Goroutines, p.IdleConns, p.HeapInuse, s.Lag, s.LagEvents, s.Parked)
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
