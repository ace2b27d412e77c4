package process

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/strata-es/strata/domain"
)

// fanoutState is the state of the "fanout" process of the fairness test:
// an opened ticket titled "fan" issues fanoutSteps commands at once (the
// shape of an order of 500 lines, which the order's own limit no longer
// allows but an instance of another module may have); any other issues
// one.
type fanoutState struct {
	Outcomes int `json:"outcomes"`
}

const fanoutSteps = 500

var fanoutDefinition = Definition[fanoutState]{
	Name:       "fanout",
	EventTypes: []string{typeOpened},
	Correlate: func(ev Event) (string, string, bool) {
		p, ok := ev.Payload.(ticketOpened)
		return p.ID, ev.Stream, ok
	},
	Decide: func(s fanoutState, _ bool, in Input) (Decision[fanoutState], error) {
		switch in.Kind {
		case InputEvent:
			n := 1
			if in.Event.Payload.(ticketOpened).Title == "fan" {
				n = fanoutSteps
			}
			d := Decision[fanoutState]{State: s, Status: "fanning"}
			for i := range n {
				d.Commands = append(d.Commands, Command{Step: fmt.Sprintf("s:%d", i), Name: "test.step", Payload: map[string]int{"i": i}})
			}
			return d, nil
		case InputOutcome:
			s.Outcomes++
			return Decision[fanoutState]{State: s, Status: "fanning"}, nil
		}
		return Decision[fanoutState]{}, fmt.Errorf("unexpected input %s", in.Kind)
	},
}

// TestOneTenantsBacklogDoesNotDelayAnother holds the dispatcher's fairness
// bound (issue 29, finding 9; docs/process-managers.md): the free slots go
// round-robin to the tenants with due steps, the tenant holding fewest
// first, so another tenant's step waits for one free slot, never behind
// one tenant's backlog. Tenant t-a's instance of 500 steps is in the log
// before tenant t-b's instance of one, and t-a's executions hold their
// slot until the test lets one go:
//   - decided in one batch, t-b's step is among the first look's
//     dispatches (the slots, Concurrency 4), not after t-a's 500;
//   - with every slot held by t-a, t-b's next step, due later, is the
//     very next dispatch once one slot frees.
func TestOneTenantsBacklogDoesNotDelayAnother(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m, err := New(fanoutDefinition)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var started []string // "tenant/key", in the order executions began
	gate := make(chan struct{})
	b.spec = Spec{Manager: m, Commands: map[string]CommandFunc{
		"test.step": func(ctx context.Context, tenant domain.TenantID, _ json.RawMessage, key string) (json.RawMessage, error) {
			mu.Lock()
			started = append(started, string(tenant)+"/"+key)
			mu.Unlock()
			if tenant == "t-a" {
				select {
				case <-gate:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return json.RawMessage(`{}`), nil
		},
	}}
	snapshot := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), started...)
	}
	b.append("t-a", ticketOpened{ID: "big", Title: "fan"})
	b.append("t-b", ticketOpened{ID: "small"})
	r := b.runner(RunnerConfig{Concurrency: 4})
	b.start(r)

	// t-b's step finishes at once, so a fifth execution (t-a's) takes its
	// slot: from then on t-a holds all four.
	b.eventually("five executions", func() bool { return len(snapshot()) >= 5 })
	first := snapshot()[:4]
	small := "t-b/" + StepKey("fanout", "small", "s:0")
	found := false
	for _, s := range first {
		found = found || s == small
	}
	if !found {
		t.Fatalf("the first look dispatched %v: t-b's step waits behind t-a's backlog of %d", first, fanoutSteps)
	}

	b.append("t-b", ticketOpened{ID: "later"})
	b.eventually("t-b's later step in the outbox", func() bool {
		return b.count(`SELECT count(*) FROM process_steps WHERE tenant_id = 't-b' AND instance = 'later' AND status = 'pending'`) == 1
	})
	if n := len(snapshot()); n != 5 {
		t.Fatalf("%d executions before a slot was freed, want 5", n)
	}
	gate <- struct{}{} // one of t-a's executions ends
	b.eventually("a sixth execution", func() bool { return len(snapshot()) >= 6 })
	if got, want := snapshot()[5], "t-b/"+StepKey("fanout", "later", "s:0"); got != want {
		t.Fatalf("the slot t-a freed went to %s, want t-b's due step %s", got, want)
	}
}

// TestDueDeadlinesTakeTurnsByTenant: deadlines due at once fire
// interleaved by tenant, so one tenant's hundred due deadlines do not all
// fire before another tenant's first.
func TestDueDeadlinesTakeTurnsByTenant(t *testing.T) {
	t.Parallel()
	in := []dueDeadline{{tenant: "a", name: "1"}, {tenant: "a", name: "2"}, {tenant: "a", name: "3"}, {tenant: "b", name: "1"}, {tenant: "c", name: "1"}, {tenant: "c", name: "2"}}
	var got []string
	for _, d := range interleave(in, func(d dueDeadline) string { return d.tenant }) {
		got = append(got, d.tenant+d.name)
	}
	if fmt.Sprint(got) != "[a1 b1 c1 a2 c2 a3]" {
		t.Errorf("fired in the order %v", got)
	}
}
