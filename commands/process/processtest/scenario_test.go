package processtest_test

import (
	"strings"
	"testing"
	"time"

	"github.com/strata-es/strata/commands/process"
	"github.com/strata-es/strata/commands/process/processtest"
)

func scenario(t testing.TB) *processtest.Scenario[ticket] {
	return processtest.For(t, ticketDefinition.Decide).Instance("k1").Stream("ticket-k1").Codecs(registry)
}

var start = processtest.DefaultStart

func TestScenario_Flow(t *testing.T) {
	t.Parallel()
	open := processtest.Event(opened{ID: "k1"})
	// A payload compares by its JSON: the struct the process issues and
	// the map the test wants are the same command.
	scenario(t).When(open).Then(processtest.Want{Status: "assigning",
		Commands:  []process.Command{{Step: "assign", Name: "test.assign", Payload: map[string]string{"ticket": "k1"}}},
		Deadlines: []process.Deadline{{Name: "escalate", At: start.Add(time.Hour)}}})
	scenario(t).Given(open).When(processtest.OK("assign", nil)).Then(processtest.Want{Status: "notifying",
		Intents: []process.Intent{{Step: "notify", Port: "notifier", Payload: map[string]string{"ticket": "k1"}}}})
	scenario(t).Given(open, processtest.OK("assign", nil)).When(processtest.Refused("notify", "no one answers")).
		Then(processtest.Want{Status: "declined", Done: true})
	scenario(t).Given(open, processtest.OK("assign", nil), processtest.OK("notify", nil)).When(processtest.Event(&closed{ID: "k1"})).
		Then(processtest.Want{Status: "closed", Done: true})
}

// The kit completes each input as the runtime would.
func TestScenario_CompletesInputsAsTheRuntime(t *testing.T) {
	t.Parallel()
	open := processtest.Event(opened{ID: "k1"})

	r := scenario(t).Given(open).When(processtest.Event(closed{ID: "k1"}))
	if ev := r.Input().Event; ev.Version != 2 || ev.Stream != "ticket-k1" || ev.Type != typeClosed || ev.Position.Major != 2 || string(ev.Data) != `{"id":"k1"}` {
		t.Errorf("the second event = %+v, want version 2 of ticket-k1, encoded", ev.Record)
	}
	if in := r.Input(); in.Instance != "k1" || in.Tenant != processtest.DefaultTenant || !in.At.Equal(start.Add(time.Second)) {
		t.Errorf("input %+v: want instance k1 of %s at the start + 1s", in, processtest.DefaultTenant)
	}

	r = scenario(t).Given(open).When(processtest.OK("assign", map[string]int{"version": 1}))
	if o := r.Input().Outcome; o.Kind != process.StepCommand || o.Name != "test.assign" || string(o.Result) != `{"version":1}` {
		t.Errorf("outcome = %+v, want the command test.assign's with its result", o)
	}

	r = scenario(t).Given(open).When(processtest.Fired("escalate"))
	if tm := r.Input().Timeout; !tm.Due.Equal(start.Add(time.Hour)) {
		t.Errorf("fired %+v, want due when the decision set it", tm)
	}
	r.Then(processtest.Want{Status: "escalated", Done: true, Cancel: []string{"escalate"}})

	// A redelivered event has its version again: the process sees it as
	// a duplicate.
	r = scenario(t).Given(open).When(processtest.Again())
	if r.Input().Event.Version != 1 {
		t.Errorf("redelivery = version %d, want 1", r.Input().Event.Version)
	}
	r.Then(processtest.Want{Status: "assigning"})

	// A Done instance's input is recorded, not decided.
	scenario(t).Given(open, processtest.Event(closed{ID: "k1"})).When(processtest.Fired("escalate")).
		Then(processtest.Want{Status: "closed", Done: true})
}

func TestScenario_ThenError(t *testing.T) {
	t.Parallel()
	scenario(t).Given(processtest.Event(opened{ID: "k1"})).
		When(processtest.Raw(process.Input{Kind: process.InputOutcome, Outcome: &process.Outcome{Step: "never", OK: true}})).
		ThenError(errUnknownStep)
}

// The kit fails a test for what the runtime would refuse or what makes a
// process unsafe to run, and for a decision other than the one wanted.
func TestScenario_Fails(t *testing.T) {
	t.Parallel()
	open := processtest.Event(opened{ID: "k1"})
	wrap := func(change func(d *process.Decision[ticket], calls int)) func(ticket, bool, process.Input) (process.Decision[ticket], error) {
		calls := 0
		return func(s ticket, exists bool, in process.Input) (process.Decision[ticket], error) {
			d, err := decideTicket(s, exists, in)
			calls++
			change(&d, calls)
			return d, err
		}
	}
	for _, tt := range []struct {
		name string
		run  func(tb testing.TB)
		want string
	}{
		{"a decision that changes between two calls", func(tb testing.TB) {
			processtest.For(tb, wrap(func(d *process.Decision[ticket], calls int) { d.Note = strings.Repeat("x", calls) })).
				Codecs(registry).When(open)
		}, "Decide is not deterministic"},
		{"a status that is no label", func(tb testing.TB) {
			processtest.For(tb, wrap(func(d *process.Decision[ticket], _ int) { d.Status = "Assigning" })).Codecs(registry).When(open)
		}, `the runtime refuses the decision: decided status "Assigning"`},
		{"a step issued twice in one decision", func(tb testing.TB) {
			processtest.For(tb, wrap(func(d *process.Decision[ticket], _ int) { d.Commands = append(d.Commands, d.Commands...) })).
				Codecs(registry).When(open)
		}, `decided step "assign" twice`},
		{"a payload that does not encode", func(tb testing.TB) {
			processtest.For(tb, wrap(func(d *process.Decision[ticket], _ int) { d.Commands[0].Payload = make(chan int) })).
				Codecs(registry).When(open)
		}, "does not encode"},
		{"a failing given input", func(tb testing.TB) {
			processtest.For(tb, decideTicket).Given(processtest.Raw(process.Input{Kind: "bogus"})).When(open)
		}, "given input 1: unexpected input bogus"},
		{"another decision than wanted", func(tb testing.TB) {
			scenario(tb).When(open).Then(processtest.Want{Status: "assigning"})
		}, "command assign test.assign {\"ticket\":\"k1\"}"},
		// Without Codecs the payload is the one given: a pointer the
		// runtime's registry would never hand over.
		{"an error where a decision is wanted", func(tb testing.TB) {
			processtest.For(tb, decideTicket).When(processtest.Event(&opened{ID: "k1"})).Then(processtest.Want{Status: "assigning"})
		}, "got error unexpected event *processtest_test.opened"},
		{"a decision where an error is wanted", func(tb testing.TB) {
			scenario(tb).When(open).ThenError(errUnknownStep)
		}, "decided status assigning, want error unknown step"},
		{"Again first", func(tb testing.TB) { scenario(tb).When(processtest.Again()) }, "Again with no input before it"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := failures(t, tt.run); !strings.Contains(got, tt.want) {
				t.Errorf("the kit reported %q, want %q", got, tt.want)
			}
		})
	}
}
