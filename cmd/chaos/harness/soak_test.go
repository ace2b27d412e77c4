package harness

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"testing"
	"time"
)

func TestPlanSoak(t *testing.T) {
	c := Full().R18
	for _, tc := range []struct {
		d                                         time.Duration
		every                                     time.Duration
		faults                                    int
		hold, settle, warmup, unit, sample, burst time.Duration
	}{
		// The nightly soak: notes/reliability.md R18 as written.
		{30 * time.Minute, 2 * time.Minute, 14, 30 * time.Second, 10 * time.Second, 3 * time.Minute, 10 * time.Minute, 3 * time.Second, 15 * time.Second},
		// make chaos: a fault every 30 s (SOAK/15 would be 12 s).
		{3 * time.Minute, 30 * time.Second, 5, 7500 * time.Millisecond, 10 * time.Second, time.Minute, time.Minute, time.Second, 8 * time.Second},
		// Short development soaks: still three faults.
		{90 * time.Second, 22500 * time.Millisecond, 3, 5625 * time.Millisecond, 7500 * time.Millisecond, 30 * time.Second, 30 * time.Second, time.Second, 8 * time.Second},
		{time.Minute, 15 * time.Second, 3, 3750 * time.Millisecond, 5 * time.Second, 20 * time.Second, 20 * time.Second, time.Second, 8 * time.Second},
		{2 * time.Hour, 8 * time.Minute, 14, 30 * time.Second, 10 * time.Second, 3 * time.Minute, 10 * time.Minute, 5 * time.Second, 15 * time.Second},
	} {
		c.Duration = tc.d
		p := planSoak(c)
		if p.Every != tc.every || p.Faults != tc.faults || p.Hold != tc.hold || p.Settle != tc.settle || p.Warmup != tc.warmup ||
			p.GrowthUnit != tc.unit || p.Sample != tc.sample || p.Burst != tc.burst {
			t.Errorf("%s: got %+v", tc.d, p)
		}
		// Every fault and its settling end before the next one and before
		// the load ends.
		if time.Duration(p.Faults+1)*p.Every > tc.d || p.Hold+p.Settle >= p.Every {
			t.Errorf("%s: faults do not fit: %+v", tc.d, p)
		}
		if got := []string{p.kind(0), p.kind(1), p.kind(2), p.kind(3)}; strings.Join(got, ",") != "R1,R2,R5,R1" {
			t.Errorf("fault kinds %v", got)
		}
	}
}

func TestValidateSoak(t *testing.T) {
	c := Full()
	c.Strata = "strata"
	c.Scenarios = []string{R18}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c.R18.Duration = 30 * time.Second
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "at least 1m0s") {
		t.Fatalf("a 30 s soak: %v", err)
	}
}

var soakT0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return soakT0.Add(time.Duration(s * float64(time.Second))) }

func TestQuietIntervals(t *testing.T) {
	ws := []faultWindow{
		{Kind: R1, Start: at(30), End: at(31), Settled: at(41)},
		{Kind: R2, Start: at(60), End: at(65), Settled: at(75)},
	}
	q := quietIntervals(at(10), at(100), ws)
	want := [][2]time.Time{{at(10), at(30)}, {at(41), at(60)}, {at(75), at(100)}}
	if len(q) != len(want) {
		t.Fatalf("got %v", q)
	}
	for i := range q {
		if !q[i][0].Equal(want[i][0]) || !q[i][1].Equal(want[i][1]) {
			t.Errorf("interval %d: got %v, want %v", i, q[i], want[i])
		}
	}
	// A round that began in a quiet interval but ended in the window is
	// not quiet.
	s := soakSample{At: at(29.9), Done: at(30.2)}
	if s.inQuiet(q) {
		t.Error("a round overlapping a fault counted as quiet")
	}
	if s.Done = at(29.95); !s.inQuiet(q) {
		t.Error("a round before the fault not counted as quiet")
	}
}

// series makes one sample a second from from to to (seconds) for two
// processes; f gives process i's pid, RSS (MiB) and goroutines at t.
func series(from, to int, f func(i int, t float64) (int, float64, float64)) []soakSample {
	var out []soakSample
	for s := from; s <= to; s++ {
		smp := soakSample{At: at(float64(s)), Done: at(float64(s) + 0.1), Lag: 0.01}
		for i := 0; i < 2; i++ {
			pid, mib, g := f(i, float64(s))
			smp.Procs = append(smp.Procs, procSample{Pid: pid, RSS: int64(mib * (1 << 20)), Goroutines: g})
		}
		out = append(out, smp)
	}
	return out
}

func TestJudgeRSS(t *testing.T) {
	ws := []faultWindow{
		{Kind: R1, Start: at(100), End: at(101), Settled: at(111)},
		{Kind: R2, Start: at(200), End: at(205), Settled: at(215)},
		{Kind: R5, Start: at(300), End: at(308), Settled: at(318)},
	}
	// Process 0 is flat (with noise, and a peak inside a fault window)
	// and lives throughout; process 1
	// grows 1 % of 100 MiB a minute, and is killed at 100 (its second
	// incarnation grows the same way).
	noise := rand.New(rand.NewPCG(1, 2))
	samples := series(0, 400, func(i int, s float64) (int, float64, float64) {
		if i == 0 && s >= 200 && s < 215 {
			return 10, 80, 300 // a transient peak during the outage
		}
		if i == 0 {
			return 10, 50 + noise.Float64(), 30
		}
		if s < 100.5 {
			return 11, 100 + s/60, 30
		}
		return 12, 100 + (s-100)/60, 30
	})
	// A third process steps up 20 % during the first outage and stays
	// there: judged from the outage's end, it is flat.
	for i := range samples {
		mib, sec := 60.0, samples[i].At.Sub(soakT0).Seconds()
		if sec >= 200 {
			mib = 72
		}
		samples[i].Procs = append(samples[i].Procs, procSample{Pid: 30, RSS: int64(mib * (1 << 20))})
	}
	// A fourth lives through two windows but ends 45 s after the first
	// outage's end: less than the unit (a minute) to fit a rate over.
	for i := range samples {
		if sec := samples[i].At.Sub(soakT0).Seconds(); sec < 260 {
			samples[i].Procs = append(samples[i].Procs, procSample{Pid: 40, RSS: int64((40 + sec/10) * (1 << 20))})
		}
	}
	growth := judgeRSS(incarnations(samples, nil), ws, 30*time.Second, time.Minute)
	if len(growth) != 5 {
		t.Fatalf("%d incarnations, want 5: %+v", len(growth), growth)
	}
	byPid := map[int]rssGrowth{}
	for _, g := range growth {
		byPid[g.Pid] = g
	}
	if g := byPid[10]; !g.Judged || g.Windows != 3 || g.PerUnit > 0.005 || g.PerUnit < -0.005 {
		t.Errorf("flat process: %+v", g)
	}
	if g := byPid[40]; g.Judged || g.Windows != 2 || !strings.Contains(g.NotJudgedWhy, "after its warm-up") {
		t.Errorf("less than a unit after its warm-up: %+v", g)
	}
	if g := byPid[11]; g.Judged || g.Windows != 0 {
		t.Errorf("killed before any window: %+v", g)
	}
	if g := byPid[30]; !g.Judged || !g.AfterOutage || !g.From.Equal(at(215)) || g.PerUnit != 0 {
		t.Errorf("a step during the first outage: %+v", g)
	}
	if g := byPid[12]; !g.Judged || g.Windows != 2 || g.PerUnit < 0.0095 || g.PerUnit > 0.0105 || g.Per10Min < 0.095 || g.Per10Min > 0.105 {
		t.Errorf("growing incarnation (1 %% a minute): %+v", g)
	}
}

func TestJudgeGoroutines(t *testing.T) {
	ws := []faultWindow{
		{Kind: R2, Start: at(60), End: at(65), Settled: at(75)},
		{Kind: R1, Start: at(120), End: at(121), Settled: at(131)},
	}
	// 30 + 30 before the first fault, a burst during it, then one
	// process leaks 1 goroutine every 2 s after the second.
	samples := series(0, 200, func(i int, s float64) (int, float64, float64) {
		switch {
		case s >= 60 && s < 75:
			return 10 + i, 50, 300
		case i == 1 && s >= 131:
			return 11, 50, 30 + (s-131)/2
		}
		return 10 + i, 50, 30
	})
	q := quietIntervals(at(5), at(200), ws)
	v := judgeGoroutines(samples, q)
	if v.Baseline != 60 || len(v.Intervals) != 3 {
		t.Fatalf("got %+v", v)
	}
	if v.Intervals[1].Median != 60 {
		t.Errorf("after the outage: %+v", v.Intervals[1])
	}
	// The last interval's median is 30 + 30 + 17.25: +28.75 %.
	if v.Worst < 0.28 || v.Worst > 0.30 || !v.WorstAt.Equal(at(131)) {
		t.Errorf("leak: worst %+.3f at %s", v.Worst, v.WorstAt)
	}
	lags, missing := lagOutside(samples, q)
	if missing != 0 || len(lags) == 0 || quantile(lags, 0.99) != 0.01 {
		t.Errorf("lag: %d values, %d missing", len(lags), missing)
	}
}

func TestQuantileMedian(t *testing.T) {
	vals := []float64{5, 1, 4, 2, 3}
	if m := median(vals); m != 3 {
		t.Errorf("median %g", m)
	}
	if m := median(vals[:4]); m != 3 {
		t.Errorf("median of 5 1 4 2: %g", m)
	}
	var hundred []float64
	for i := 1; i <= 100; i++ {
		hundred = append(hundred, float64(i))
	}
	if q := quantile(hundred, 0.99); q != 99 {
		t.Errorf("p99 of 1..100: %g", q)
	}
	if q := quantile(hundred, 1); q != 100 {
		t.Errorf("max: %g", q)
	}
}

func TestParseMetrics(t *testing.T) {
	text := `# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines 42
go_gc_duration_seconds{quantile="0"} 1.2e-05
go_memstats_heap_inuse_bytes 1.2353536e+07
strata_http_requests_total{route="x",method="GET",status="200"} 7
`
	m, err := parseMetrics(strings.NewReader(text), "go_goroutines", "go_memstats_heap_inuse_bytes")
	if err != nil {
		t.Fatal(err)
	}
	if m["go_goroutines"] != 42 || m["go_memstats_heap_inuse_bytes"] != 12353536 {
		t.Errorf("got %v", m)
	}
	if _, err := parseMetrics(strings.NewReader(text), "go_threads"); err == nil {
		t.Error("a missing metric was not reported")
	}
}

func TestSoakOrdersRenew(t *testing.T) {
	o := newSoakOrders(rand.New(rand.NewPCG(3, 4)), []string{"t0", "t1"}, 4)
	seen := map[string]int{}
	for k := 0; k < 2000; k++ {
		s, cmd := o.pick("k")
		seen[s.order]++
		if n := int(s.seq.Load()); n == 1 && cmd.kind != "create" {
			t.Fatalf("first command of %s is %s", s.order, cmd.kind)
		}
		if int(s.seq.Load()) > s.length+2 {
			t.Fatalf("order %s got command %d of %d + 2", s.order, s.seq.Load(), s.length)
		}
	}
	if o.made < 2000/(30+2) || len(seen) != o.made {
		t.Errorf("%d orders made over 2000 commands, %d used", o.made, len(seen))
	}
	for _, s := range o.active {
		if s.tenant != []string{"t0", "t1"}[mustAtoi(t, s.order[1:])%2] {
			t.Errorf("order %s in tenant %s", s.order, s.tenant)
		}
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			t.Fatalf("not a number: %q", s)
		}
		n = 10*n + int(c-'0')
	}
	return n
}

// TestSoakPlot renders the picture of a synthetic soak: it must not fail
// on gaps (a process down, the lag route unanswered) or zero lags.
func TestSoakPlot(t *testing.T) {
	ws := []faultWindow{
		{Kind: R1, Start: at(30), End: at(31), Settled: at(41)},
		{Kind: R2, Start: at(60), End: at(65), Settled: at(75)},
		{Kind: R5, Start: at(90), End: at(98), Settled: at(108)},
	}
	samples := series(-8, 120, func(i int, s float64) (int, float64, float64) {
		if i == 0 && s >= 30 && s < 31 {
			return 0, 0, -1
		}
		if i == 0 && s >= 31 {
			return 20, 40, 25
		}
		return 10 + i, 45 + s/100, 30
	})
	for i := range samples {
		if s := samples[i].At; !s.Before(at(60)) && s.Before(at(65)) {
			samples[i].Lag = -1
		} else if i%3 == 0 {
			samples[i].Lag = 0
		}
	}
	path := filepath.Join(t.TempDir(), "soak.png")
	sp := soakPlot{Title: "test soak", T0: soakT0, Burst: [2]time.Time{at(-8), at(0)}, End: at(120), Samples: samples, Windows: ws,
		Names: []string{"serve0", "serve1"}, Baseline: 60, MaxGoroutineGrowth: 0.1, MaxLag: time.Second}
	if err := sp.write(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 10_000 || string(b[1:4]) != "PNG" {
		t.Errorf("not a PNG of some size: %d bytes", len(b))
	}
}

// TestParseGoroutines reads this test process's own profile while an HTTP
// server holds one idle keep-alive connection and one in a handler.
func TestParseGoroutines(t *testing.T) {
	release := make(chan struct{})
	inHandler := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			close(inHandler)
			<-release
		}
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	defer close(release)
	idle := &http.Client{Transport: &http.Transport{}}
	res, err := idle.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close() // the connection now waits for its next request
	go func() {
		if res, err := (&http.Client{Transport: &http.Transport{}}).Get(srv.URL + "/block"); err == nil {
			res.Body.Close()
		}
	}()
	<-inHandler
	var prof goroutineProfile
	for try := 0; try < 50; try++ {
		var buf bytes.Buffer
		if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
			t.Fatal(err)
		}
		if prof, err = parseGoroutines(buf.Bytes()); err != nil {
			t.Fatal(err)
		}
		if prof.idle == 1 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if prof.idle != 1 || prof.total < 3 || len(prof.stacks) < 2 {
		t.Fatalf("idle %d (want 1), total %d, %d stacks", prof.idle, prof.total, len(prof.stacks))
	}
	handler := 0
	for k, n := range prof.stacks {
		if strings.Contains(k, "net/http.serverHandler.ServeHTTP") {
			handler += n
		}
	}
	if handler != 1 {
		t.Errorf("%d goroutines in a handler, want 1", handler)
	}
	if _, err := parseGoroutines([]byte("hello")); err == nil {
		t.Error("not a profile: no error")
	}

	// The diff names what grew, idle connections left out.
	before := goroutineProfile{stacks: map[string]int{"a;b": 2, "gone;main.standby": 4, "idle;net/http.(*conn).serve": 1}}
	after := goroutineProfile{stacks: map[string]int{"a;b": 3, "leak;main.worker": 5, "idle;net/http.(*conn).serve": 9}}
	d := diffGoroutines([]goroutineProfile{before}, []goroutineProfile{after})
	if len(d) != 3 || d[2].Stack != "gone;main.standby" || d[2].At != 0 || d[0].Stack != "leak;main.worker" || d[0].At != 5 || d[1].Before != 2 || d[1].At != 3 {
		t.Errorf("diff %+v", d)
	}
	if got := shortStack("runtime.gopark;sync.(*Cond).Wait;main.worker;main.start;main.main", 2); got != "main.worker < main.start" {
		t.Errorf("short stack %q", got)
	}
}
