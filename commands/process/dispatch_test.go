package process

import (
	"strings"
	"sync"
	"testing"
	"time"
)

// TestIntentRetriesWithBackoffThenSucceeds: the notifier fails twice with
// a transient error, then succeeds. The step is executed three times with
// the same key, the pauses between the calls grow as the backoff says,
// the port applies one effect for the key, and the instance receives one
// outcome.
func TestIntentRetriesWithBackoffThenSucceeds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.port.set(func(p *testPort) { p.fail["k1"] = 2 })
	var mu sync.Mutex
	var reports []StepReport
	r := b.runner(RunnerConfig{InitialBackoff: 40 * time.Millisecond, MaxBackoff: time.Second, Jitter: -1,
		OnStep: func(s StepReport) {
			mu.Lock()
			reports = append(reports, s)
			mu.Unlock()
		}})
	b.start(r)
	b.append("t-a", ticketOpened{ID: "k1"})
	d := b.statusIs("t-a", "k1", "waiting")

	key := StepKey("ticket", "k1", "notify")
	calls := b.port.callTimes(key)
	if len(calls) != 3 {
		t.Fatalf("notifier called %d times, want 3", len(calls))
	}
	for i, want := range []time.Duration{40 * time.Millisecond, 80 * time.Millisecond} {
		if gap := calls[i+1].Sub(calls[i]); gap < want {
			t.Errorf("pause before attempt %d = %v, want at least %v", i+2, gap, want)
		} else {
			t.Logf("pause before attempt %d: %v (backoff %v)", i+2, gap.Round(time.Millisecond), want)
		}
	}
	if n := b.port.effects[key]; n != 1 {
		t.Errorf("notifier effects for the key = %d, want 1", n)
	}
	var notify StepInfo
	for _, s := range d.Steps {
		if s.Step == "notify" {
			notify = s
		}
	}
	if notify.Status != "done" || notify.Attempts != 3 || string(notify.Result) != `{"ref": "n-k1"}` || notify.LastError != "" {
		t.Errorf("notify step = %+v", notify)
	}
	outcomes := 0
	for _, h := range d.History {
		if h.Kind == histOutcome && strings.Contains(string(h.Summary), `"step": "notify"`) {
			outcomes++
		}
	}
	if outcomes != 1 {
		t.Errorf("notify outcomes in the history = %d, want 1", outcomes)
	}
	// OnStep is told after the outcome commits, so the last report may
	// come after the status the test waited for.
	var got []string
	for deadline := time.Now().Add(5 * time.Second); ; {
		mu.Lock()
		got = got[:0]
		for _, s := range reports {
			if s.Step == "notify" {
				got = append(got, string(s.Outcome))
			}
		}
		mu.Unlock()
		if len(got) >= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if strings.Join(got, ",") != "error,error,ok" {
		t.Errorf("step reports = %v, want error,error,ok", got)
	}
}

// TestDefiniteRefusalsAreOutcomes: a port that declines (Rejected) and a
// command that a domain rule refuses each give the instance an Outcome with
// OK false, at the first attempt, never retried.
func TestDefiniteRefusalsAreOutcomes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.port.set(func(p *testPort) { p.reject["k2"] = true })
	b.start(b.runner(RunnerConfig{}))
	b.append("t-a", ticketOpened{ID: "k2"})
	b.append("t-a", ticketOpened{ID: "k3", Reject: true})

	d := b.statusIs("t-a", "k2", "declined")
	if s := d.Steps[1]; s.Status != "rejected" || s.Attempts != 1 || !strings.Contains(string(s.Result), "the notifier declined") {
		t.Errorf("declined intent = %+v", s)
	}
	if h := d.History[len(d.History)-1]; h.Note != "the notifier declined" || !strings.Contains(string(h.Summary), `"ok": false`) {
		t.Errorf("last history entry = %+v", h)
	}
	d = b.statusIs("t-a", "k3", "unassigned")
	if s := d.Steps[0]; s.Status != "rejected" || s.Attempts != 1 {
		t.Errorf("refused command = %+v", s)
	}
	if !d.Done || len(d.Steps) != 1 {
		t.Errorf("refused assignment: %+v", d)
	}
	if n := b.count(`SELECT count(*) FROM events WHERE stream_id = 'assign-k3'`); n != 0 {
		t.Errorf("a refused command appended %d events", n)
	}
}
