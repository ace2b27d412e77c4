package process

import (
	"strings"
	"testing"
	"time"

	"github.com/strata-es/strata/projections"
)

// TestFailingStepParksOnlyItsInstance: a step that fails past its
// attempts parks its instance (a dead letter for the instance's stream,
// a parked stream, the instance's flag) while another instance goes on.
// A later event of the parked instance waits behind it. RetryInstance,
// once the port is fixed, re-queues the step and the instance completes;
// DiscardInstance records who discarded what and why.
func TestFailingStepParksOnlyItsInstance(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.port.set(func(p *testPort) { p.fail["bad"], p.fail["bad2"] = -1, -1 })
	r := b.runner(RunnerConfig{Attempts: 2})
	b.start(r)
	b.append("t-a", ticketOpened{ID: "bad"})
	b.append("t-a", ticketOpened{ID: "bad2"})
	b.append("t-a", ticketOpened{ID: "good"})
	b.statusIs("t-a", "good", "waiting")
	for _, id := range []string{"bad", "bad2"} {
		b.eventually(id+" to be parked", func() bool {
			d, err := b.instance("t-a", id)
			return err == nil && d.Parked
		})
	}
	d, _ := b.instance("t-a", "bad")
	if s := d.Steps[1]; s.Status != "parked" || s.Attempts != 2 || !strings.Contains(s.LastError, "503") {
		t.Errorf("parked step = %+v", s)
	}
	letters, err := projections.ReadDeadLetters(b.ctx, b.proj, []string{"t-a"}, projections.LetterFilter{Projections: []string{"ticket"}, Stream: "ticket-bad"})
	if err != nil {
		t.Fatal(err)
	}
	if len(letters) != 1 || letters[0].Event.Type != letterType || letters[0].Attempts != 2 || !letters[0].Head ||
		!strings.Contains(letters[0].Error, "intent notifier (step notify) failed 2 times") {
		t.Fatalf("letters of the parked instance = %+v", letters)
	}

	// bad2's next event is parked behind its failed step.
	b.append("t-a", ticketClosed{ID: "bad2"})
	b.eventually("the close of bad2 to wait behind it", func() bool {
		return b.count(`SELECT count(*) FROM dead_letters WHERE stream_id = 'ticket-bad2'`) == 2
	})
	if d, _ := b.instance("t-a", "bad2"); d.Status != "notifying" || d.History[len(d.History)-1].Kind != histParked {
		t.Errorf("bad2 after its close arrived: status %s, history %v", d.Status, historyKinds(d))
	}

	// The operator fixes the notifier for bad and retries it, while the
	// runner runs: it yields to the tool and resumes afterwards.
	b.port.set(func(p *testPort) { p.fail["bad"] = 0 })
	x, err := projections.AcquireExclusive(b.ctx, b.proj, "ticket", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	out, err := RetryInstance(b.ctx, x, b.manager, testRegistry, "t-a", "ticket-bad", "alice")
	if err != nil {
		t.Fatal(err)
	}
	if !out.Unparked || strings.Join(out.Requeued, ",") != "bad/notify" || len(out.Decided) != 1 || strings.Join(out.Instances, ",") != "bad" {
		t.Errorf("retry outcome = %+v", out)
	}
	disc, err := DiscardInstance(b.ctx, x, b.manager, "t-a", "ticket-bad2", "bob", "customer withdrew")
	if err != nil {
		t.Fatal(err)
	}
	x.Release()
	if len(disc.Discarded) != 2 || strings.Join(disc.Steps, ",") != "bad2/notify" {
		t.Errorf("discard outcome = %+v", disc)
	}
	d = b.statusIs("t-a", "bad", "waiting")
	if d.Parked || d.Steps[1].Status != "done" || d.Steps[1].Attempts != 1 {
		t.Errorf("bad after the retry: %+v, steps %+v", d.Instance, d.Steps)
	}
	if n := b.port.effects[StepKey("ticket", "bad", "notify")]; n != 1 {
		t.Errorf("notifier effects for bad = %d", n)
	}
	if n := b.count(`SELECT count(*) FROM dead_letters WHERE stream_id = 'ticket-bad' AND status = 'retried' AND resolved_by = 'alice'`); n != 1 {
		t.Errorf("retried letters of bad = %d, want 1", n)
	}
	if n := b.count(`SELECT count(*) FROM dead_letters WHERE stream_id = 'ticket-bad2' AND status = 'discarded' AND resolved_by = 'bob' AND reason = 'customer withdrew'`); n != 2 {
		t.Errorf("discarded letters of bad2 = %d, want 2", n)
	}
	d, _ = b.instance("t-a", "bad2")
	if d.Parked || d.Steps[1].Status != "discarded" || d.History[len(d.History)-1].Kind != histDiscarded ||
		!strings.Contains(d.History[len(d.History)-1].Note, "customer withdrew") {
		t.Errorf("bad2 after the discard: %+v, steps %+v, history %+v", d.Instance, d.Steps, d.History)
	}
	if n := b.count(`SELECT count(*) FROM parked_streams`); n != 0 {
		t.Errorf("parked streams left: %d", n)
	}
	if n := b.count(`SELECT parked_streams + parked_letters FROM projection_checkpoints WHERE projection = 'ticket'`); n != 0 {
		t.Errorf("checkpoint counters left at %d", n)
	}
}

// TestFailingDecisionParksTheEvent: a Decide error parks the instance
// with the event itself as the head letter (the instance exists, status
// new, no state). A retry that fails again changes nothing but the
// letter's attempts and error.
func TestFailingDecisionParksTheEvent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	stop := b.start(b.runner(RunnerConfig{}))
	b.append("t-a", ticketOpened{ID: "p1", Title: "poison"})
	b.append("t-a", ticketOpened{ID: "ok1"})
	b.statusIs("t-a", "ok1", "waiting")
	d := b.statusIs("t-a", "p1", statusNew)
	if !d.Parked || d.State != nil || strings.Join(historyKinds(d), ",") != histParked {
		t.Errorf("poisoned instance = %+v, history %v", d.Instance, historyKinds(d))
	}
	stop()
	x, err := projections.AcquireExclusive(b.ctx, b.proj, "ticket", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	out, err := RetryInstance(b.ctx, x, b.manager, testRegistry, "t-a", "ticket-p1", "alice")
	if err != nil {
		t.Fatal(err)
	}
	if out.Unparked || out.FailedLetter == 0 || !strings.Contains(out.Error, "poison") {
		t.Errorf("retry of a still-poisoned instance = %+v", out)
	}
	l, err := projections.ReadDeadLetter(b.ctx, b.proj, "t-a", out.FailedLetter)
	if err != nil {
		t.Fatal(err)
	}
	if l.Event.Type != typeOpened || l.Attempts != 2 || l.Status != projections.LetterParked {
		t.Errorf("letter after the failed retry = %+v", l)
	}
	if d, _ := b.instance("t-a", "p1"); !d.Parked {
		t.Errorf("the instance was unparked by a failed retry")
	}
}
