package process

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/projections"
)

// TestPoisonParksItsStreamNotTheProcess holds ARCHITECTURE decisions 5,
// 10 and 17 for process managers (issue 29, finding 2): tenant t-a's
// poison of every kind — a payload that does not decode (an unknown
// schema version, a field of the wrong JSON type), an event that
// correlates to no valid instance, a Correlate that panics, a Decide that
// panics — is in the log before tenant t-b's ordinary events. Each poison
// parks its stream for t-a alone; the events of those streams that come
// later wait behind it, in order; t-b's instances and t-a's other streams
// are decided; the process's checkpoint is never in error. Then the
// operator's tools work on every kind: a retry after the codec is fixed
// decides the parked letters in order and unparks, a retry of what is
// still poison changes nothing, and a discard unparks a stream that has no
// instance at all.
func TestPoisonParksItsStreamNotTheProcess(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// The poison, first in the log.
	b.appendRaw("t-a", "ticket-u1", typeOpened, 2, `{"id":"u1"}`)           // a schema version no codec has (yet)
	b.appendRaw("t-a", "ticket-j1", typeOpened, 1, `{"id":"j1","title":7}`) // a number where the codec wants a string
	b.append("t-a", ticketOpened{ID: "bad id!"})                            // correlates to an invalid instance ID
	b.append("t-a", ticketOpened{ID: "cp", Title: "panic-correlate"})
	b.append("t-a", ticketOpened{ID: "dp", Title: "panic-decide"})
	// Everyone else's work, after it.
	b.append("t-a", ticketOpened{ID: "a-ok"})
	b.append("t-b", ticketOpened{ID: "k1"})
	b.append("t-b", ticketOpened{ID: "k2"})
	r := b.runner(RunnerConfig{})
	b.start(r)
	b.eventually("t-b's tickets decided, or the process in error", func() bool {
		if r.Status().State == StateError {
			return true
		}
		d1, err1 := b.instance("t-b", "k1")
		d2, err2 := b.instance("t-b", "k2")
		return err1 == nil && err2 == nil && d1.Status == "waiting" && d2.Status == "waiting"
	})
	if s := r.Status(); s.State == StateError {
		t.Fatalf("the process stopped for every tenant at t-a's poison: %s", s.LastError)
	}
	b.statusIs("t-a", "a-ok", "waiting")

	// Later events of the poisoned streams, in batches of their own: they
	// follow their stream's head into the dead-letter store.
	b.append("t-a", ticketClosed{ID: "u1"})
	b.appendTo("t-a", "ticket-j1", ticketClosed{ID: "j1"})
	b.append("t-a", ticketClosed{ID: "bad id!"})
	b.append("t-a", ticketClosed{ID: "cp"})
	b.append("t-a", ticketClosed{ID: "dp"})
	b.append("t-b", ticketClosed{ID: "k1"})
	b.statusIs("t-b", "k1", "closed")
	b.eventually("every later event behind its head", func() bool {
		return b.count(`SELECT count(*) FROM dead_letters WHERE projection = 'ticket'`) == 10
	})
	if s := r.Status(); s.State != StateRunning || s.LastError != "" {
		t.Errorf("runner status %s (%s), want running without error", s.State, s.LastError)
	}
	if n := b.count(`SELECT count(*) FROM projection_checkpoints WHERE projection = 'ticket' AND (status = 'error' OR last_error IS NOT NULL)`); n != 0 {
		t.Errorf("the process's checkpoint recorded an error")
	}
	wantHead := map[string]string{
		"ticket-u1":      "schema version 2",
		"ticket-j1":      "cannot unmarshal number",
		"ticket-bad id!": "invalid instance",
		"ticket-cp":      "Correlate panicked",
		"ticket-dp":      "Decide panicked",
	}
	letters, err := projections.ReadDeadLetters(b.ctx, b.proj, []string{"t-a", "t-b"}, projections.LetterFilter{Projections: []string{"ticket"}})
	if err != nil {
		t.Fatal(err)
	}
	byStream := map[string][]projections.DeadLetter{}
	for _, l := range letters {
		if l.Tenant != "t-a" {
			t.Errorf("a letter of tenant %s: %+v", l.Tenant, l)
		}
		byStream[l.Event.Stream] = append(byStream[l.Event.Stream], l)
	}
	for stream, cause := range wantHead {
		ls := byStream[stream]
		if len(ls) != 2 {
			t.Errorf("%s: %d letters, want the poison and the close behind it", stream, len(ls))
			continue
		}
		if !ls[0].Head || ls[0].Event.Type != typeOpened || !strings.Contains(ls[0].Error, cause) || ls[0].Attempts != 1 {
			t.Errorf("%s: head letter %+v, want the opening with an error naming %q", stream, ls[0], cause)
		}
		if ls[1].Head || ls[1].Event.Type != typeClosed || ls[1].Event.Version != 2 {
			t.Errorf("%s: second letter %+v, want the close behind the head", stream, ls[1])
		}
	}
	if n := b.count(`SELECT count(*) FROM parked_streams WHERE projection = 'ticket' AND tenant_id = 't-a'`); n != 5 {
		t.Errorf("parked streams of t-a = %d, want 5", n)
	}
	if n := b.count(`SELECT parked_streams FROM projection_checkpoints WHERE projection = 'ticket'`); n != 5 {
		t.Errorf("checkpoint's parked streams = %d, want 5", n)
	}
	// The instances the closes correlate to wait too (they are parked),
	// so their outcomes and deadlines cannot overtake the parked events.
	for _, id := range []string{"u1", "j1", "cp", "dp"} {
		if d, err := b.instance("t-a", id); err != nil || !d.Parked || d.Status != statusNew {
			t.Errorf("instance %s: %+v, %v: want parked, new", id, d.Instance, err)
		}
	}

	// The operator, while the runner runs.
	x, err := projections.AcquireExclusive(b.ctx, b.proj, "ticket", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// The codec that knows schema version 2 is deployed: u1's letters are
	// decided in order (the opening, then the close) and it is unparked.
	fixed := event.NewRegistry(
		event.Codec{Type: typeOpened, Version: 2, New: func() event.Payload { return &ticketOpened{} },
			Upcasters: map[int]event.Upcaster{1: func(d json.RawMessage) (json.RawMessage, error) { return d, nil }}},
		event.Codec{Type: typeClosed, Version: 1, New: func() event.Payload { return &ticketClosed{} }},
	)
	out, err := RetryInstance(b.ctx, x, b.manager, fixed, "t-a", "ticket-u1", "alice")
	if err != nil {
		t.Fatal(err)
	}
	if !out.Unparked || len(out.Decided) != 2 || out.FailedLetter != 0 {
		t.Errorf("retry of u1 after the codec fix = %+v", out)
	}
	// What is still poison fails again and changes nothing.
	for _, stream := range []string{"ticket-j1", "ticket-bad id!", "ticket-cp", "ticket-dp"} {
		out, err := RetryInstance(b.ctx, x, b.manager, testRegistry, "t-a", stream, "alice")
		if err != nil {
			t.Fatalf("retry %s: %v", stream, err)
		}
		if out.Unparked || out.FailedLetter == 0 || !strings.Contains(out.Error, wantHead[stream]) {
			t.Errorf("retry of still-poisoned %s = %+v", stream, out)
		}
	}
	// A discard unparks each, with or without an instance.
	for _, stream := range []string{"ticket-j1", "ticket-bad id!", "ticket-cp", "ticket-dp"} {
		out, err := DiscardInstance(b.ctx, x, b.manager, "t-a", stream, "bob", "poison from an import")
		if err != nil {
			t.Fatalf("discard %s: %v", stream, err)
		}
		if len(out.Discarded) != 2 {
			t.Errorf("discard of %s = %+v", stream, out)
		}
	}
	x.Release()
	d := b.statusIs("t-a", "u1", "closed")
	if d.Parked || !d.Done || !strings.HasPrefix(strings.Join(historyKinds(d), ","), "parked,event,event,retried") {
		t.Errorf("u1 after the retry: %+v, history %v", d.Instance, historyKinds(d))
	}
	if n := b.count(`SELECT count(*) FROM parked_streams`); n != 0 {
		t.Errorf("parked streams left: %d", n)
	}
	if n := b.count(`SELECT parked_streams + parked_letters FROM projection_checkpoints WHERE projection = 'ticket'`); n != 0 {
		t.Errorf("checkpoint counters left at %d", n)
	}
	if n := b.count(`SELECT count(*) FROM dead_letters WHERE status = 'discarded' AND resolved_by = 'bob'`); n != 8 {
		t.Errorf("discarded letters = %d, want 8", n)
	}
	// A discarded stream goes on with its next event.
	b.append("t-a", ticketOpened{ID: "dp"})
	b.statusIs("t-a", "dp", "waiting")
}
