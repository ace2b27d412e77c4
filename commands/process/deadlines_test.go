package process

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-es/strata/projections"
)

func timeouts(d InstanceDetail) int {
	n := 0
	for _, h := range d.History {
		if h.Kind == histTimeout {
			n++
		}
	}
	return n
}

// TestDeadlineFiresExactlyOnce: two runners compete for the process (one
// leads, one stands by); a deadline fires once. The leader dies and the
// standby takes over. A firing whose transaction dies before COMMIT (the
// runner stopped there) is fired again by the next runner, once; a
// firing that committed is never fired again by a later runner. A Done
// decision cancels the instance's deadline, which then never fires. The
// clock is injected; the runners poll rarely and are woken by a Signal.
func TestDeadlineFiresExactlyOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	clk := &clock{now: time.Now()}
	wake := projections.NewSignal()
	var fires sync.Map // runner -> count
	var failFire atomic.Bool
	reached, proceed := make(chan struct{}), make(chan struct{})
	mk := func(name string) *Runner {
		r := b.runner(RunnerConfig{Now: clk.Now, Wake: wake, Poll: time.Minute, OnFire: func(f FireReport) {
			v, _ := fires.LoadOrStore(name, new(atomic.Int32))
			v.(*atomic.Int32).Add(1)
		}})
		r.cfg.hooks = &testHooks{beforeCommit: func(what string) error {
			if what == "fire" && failFire.CompareAndSwap(true, false) {
				close(reached)
				<-proceed
				return errors.New("injected: the runner dies before the firing commits")
			}
			return nil
		}}
		return r
	}
	fired := func(name string) int32 {
		if v, ok := fires.Load(name); ok {
			return v.(*atomic.Int32).Load()
		}
		return 0
	}
	run := func(r *Runner) (cancel func(), done chan struct{}) {
		ctx, cancel := context.WithCancel(b.ctx)
		done = make(chan struct{})
		go func() { defer close(done); _ = r.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		return cancel, done
	}
	state := func(r *Runner, s State) {
		b.eventually("runner "+string(s), func() bool { return r.Status().State == s })
	}
	appendAndWake := func(p ticketOpened) {
		b.append("t-a", p)
		wake.Fire()
	}

	a, sb := mk("a"), mk("b")
	stopA, doneA := run(a)
	state(a, StateRunning)
	stopB, doneB := run(sb)
	state(sb, StateStandby)

	appendAndWake(ticketOpened{ID: "k1"})
	b.statusIs("t-a", "k1", "waiting")
	clk.Add(2 * time.Hour)
	wake.Fire()
	d := b.statusIs("t-a", "k1", "cancelled")
	// OnFire is told after the firing commits, possibly after the cancel
	// it decided has already run: wait for the report, then count.
	b.eventually("k1's firing reported", func() bool { return fired("a")+fired("b") >= 1 })
	if n := timeouts(d); n != 1 || fired("a")+fired("b") != 1 {
		t.Errorf("k1: %d timeouts in the history, %d+%d firings, want 1", n, fired("a"), fired("b"))
	}
	if d.Deadlines[0].Status != "fired" || d.Deadlines[0].FiredAt == nil {
		t.Errorf("k1 deadline = %+v", d.Deadlines[0])
	}

	// The leader dies; the standby takes over.
	stopA()
	<-doneA
	state(sb, StateRunning)

	// The next firing dies before COMMIT together with its runner.
	appendAndWake(ticketOpened{ID: "k2", TimeoutMS: int64(3 * time.Hour / time.Millisecond)})
	b.statusIs("t-a", "k2", "waiting")
	failFire.Store(true)
	clk.Add(4 * time.Hour)
	wake.Fire()
	<-reached
	stopB()
	close(proceed)
	<-doneB
	if d, _ := b.instance("t-a", "k2"); d.Status != "waiting" || d.Deadlines[0].Status != "pending" || timeouts(d) != 0 {
		t.Fatalf("after the failed firing k2 is %s with deadline %+v", d.Status, d.Deadlines[0])
	}
	c := mk("c")
	stopC, doneC := run(c)
	d = b.statusIs("t-a", "k2", "cancelled")
	b.eventually("k2's firing reported", func() bool { return fired("c") >= 1 })
	if n := timeouts(d); n != 1 || fired("c") != 1 {
		t.Errorf("k2: %d timeouts, %d firings by the next runner, want 1", n, fired("c"))
	}

	// A committed firing is never fired again: a new runner does its
	// first rounds (it decides k3 and dispatches its steps) and fires
	// nothing. k4 is closed before its deadline, which is cancelled.
	stopC()
	<-doneC
	e := mk("e")
	run(e)
	appendAndWake(ticketOpened{ID: "k3", TimeoutMS: int64(1000 * time.Hour / time.Millisecond)})
	appendAndWake(ticketOpened{ID: "k4", TimeoutMS: int64(100 * time.Hour / time.Millisecond)})
	b.statusIs("t-a", "k3", "waiting")
	b.statusIs("t-a", "k4", "waiting")
	b.append("t-a", ticketClosed{ID: "k4"})
	wake.Fire()
	d = b.statusIs("t-a", "k4", "closed")
	if d.Deadlines[0].Status != "cancelled" {
		t.Errorf("k4's deadline after Done = %+v", d.Deadlines[0])
	}
	clk.Add(200 * time.Hour) // past k4's cancelled deadline
	wake.Fire()
	appendAndWake(ticketOpened{ID: "k5", TimeoutMS: int64(1000 * time.Hour / time.Millisecond)})
	b.statusIs("t-a", "k5", "waiting")
	if fired("e") != 0 {
		t.Errorf("the runner after a committed firing fired %d deadlines", fired("e"))
	}
	for _, id := range []string{"k1", "k2", "k4"} {
		if d, _ := b.instance("t-a", id); timeouts(d) > 1 || (id == "k4" && timeouts(d) != 0) {
			t.Errorf("%s has %d timeouts", id, timeouts(d))
		}
	}
}

// TestDeadlineLag measures how long after its due time a deadline fires
// with the real clock, the runner sleeping until the next due time (its
// poll is a minute, nothing wakes it).
func TestDeadlineLag(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var mu sync.Mutex
	var lags []time.Duration
	r := b.runner(RunnerConfig{Poll: time.Minute, OnFire: func(f FireReport) {
		mu.Lock()
		lags = append(lags, f.Lag)
		mu.Unlock()
	}})
	wake := projections.NewSignal()
	r.cfg.Wake = wake
	b.start(r)
	const n = 8
	for i := range n {
		b.append("t-a", ticketOpened{ID: "lag" + string(rune('a'+i)), TimeoutMS: int64(200 + 25*i)})
	}
	wake.Fire()
	for i := range n {
		b.statusIs("t-a", "lag"+string(rune('a'+i)), "cancelled")
	}
	// OnFire is told after the firing commits: wait for the reports.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		k := len(lags)
		mu.Unlock()
		if k >= n {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(lags)
	if len(lags) != n {
		t.Fatalf("%d firings, want %d", len(lags), n)
	}
	t.Logf("deadline lag over %d firings: p50 %v, max %v", n, lags[n/2].Round(time.Microsecond), lags[n-1].Round(time.Microsecond))
	if lags[0] < 0 {
		t.Errorf("a deadline fired %v before it was due", -lags[0])
	}
	if lags[n-1] > 2*time.Second {
		t.Errorf("a deadline fired %v after it was due", lags[n-1])
	}
}
