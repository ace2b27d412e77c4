// Package commandtest is strata's public test kit for aggregates, the way
// river ships rivertest: given past events, when a command, then these
// events (or this error). It runs the command's decision exactly as the
// engine's handler does (the aggregate's Load over the history, Decide at
// a fixed time) and, with a registry, round-trips every event through its
// codec, so a payload that would not survive storage fails the test. Pure:
// no database, no mocks.
//
//	commandtest.For(t, orders.Aggregate).
//		Given(order.Created{...}, order.LineAdded{...}).
//		When(orders.PlaceOrder{OrderID: "o-1"}).
//		Then(order.Placed{...})
package commandtest

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/strata-es/strata/commands"
	"github.com/strata-es/strata/domain/event"
)

// DefaultNow is the time commands decide at unless At says otherwise.
var DefaultNow = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// Scenario is the past of one aggregate.
type Scenario[A any] struct {
	t        testing.TB
	agg      commands.Aggregate[A]
	registry *event.Registry
	given    []event.Payload
	now      time.Time
}

// For starts a scenario for the aggregate agg.
func For[A any](t testing.TB, agg commands.Aggregate[A]) *Scenario[A] {
	t.Helper()
	if err := agg.Validate(); err != nil {
		t.Fatalf("commandtest: %v", err)
	}
	return &Scenario[A]{t: t, agg: agg, now: DefaultNow}
}

// Codecs makes the scenario round-trip the given and the decided events
// through reg (encode, then decode), as the store would.
func (s *Scenario[A]) Codecs(reg *event.Registry) *Scenario[A] {
	s.registry = reg
	return s
}

// At sets the time the command decides at.
func (s *Scenario[A]) At(now time.Time) *Scenario[A] {
	s.now = now
	return s
}

// Given sets the aggregate's past events, oldest first.
func (s *Scenario[A]) Given(evs ...event.Payload) *Scenario[A] {
	s.given = append(s.given, evs...)
	return s
}

// When decides cmd against the state the past events give.
func (s *Scenario[A]) When(cmd commands.Command[A]) *Outcome[A] {
	s.t.Helper()
	history := make([]event.Payload, len(s.given))
	for i, p := range s.given {
		history[i] = s.roundTrip("given", i, p)
	}
	state, err := s.agg.Load(history)
	if err != nil {
		s.t.Fatalf("commandtest: the given events do not load: %v", err)
	}
	if v := s.agg.Version(state); v != int64(len(history)) {
		s.t.Fatalf("commandtest: %d given events load to version %d", len(history), v)
	}
	decided, err := cmd.Decide(state, s.now)
	o := &Outcome[A]{s: s, cmd: cmd, err: err}
	for i, p := range decided {
		o.events = append(o.events, s.roundTrip("decided", i, p))
	}
	if err == nil {
		// The decided events must apply on top of the past: the handler's
		// next command loads them.
		if _, err := s.agg.Load(append(history, o.events...)); err != nil {
			s.t.Fatalf("commandtest: %s decided events the aggregate cannot apply: %v", cmd.Name(), err)
		}
	}
	return o
}

func (s *Scenario[A]) roundTrip(what string, i int, p event.Payload) event.Payload {
	s.t.Helper()
	if s.registry == nil {
		return p
	}
	typ, v, data, err := s.registry.Encode(p)
	if err != nil {
		s.t.Fatalf("commandtest: %s event %d (%T) does not encode: %v", what, i, p, err)
	}
	back, err := s.registry.Decode(typ, v, data)
	if err != nil {
		s.t.Fatalf("commandtest: %s event %d (%s) does not decode: %v", what, i, typ, err)
	}
	return back
}

// Outcome is what a command decided.
type Outcome[A any] struct {
	s      *Scenario[A]
	cmd    commands.Command[A]
	events []event.Payload
	err    error
}

// Then requires that the command succeeded with exactly the events want, in
// order (an empty want: it changed nothing, as an idempotent repeat).
func (o *Outcome[A]) Then(want ...event.Payload) {
	t := o.s.t
	t.Helper()
	if o.err != nil {
		t.Fatalf("%s: got error %v, want %d event(s)", o.cmd.Name(), o.err, len(want))
	}
	for i := range want {
		want[i] = o.s.roundTrip("wanted", i, want[i])
	}
	if len(o.events) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(o.events, want) {
		t.Fatalf("%s decided:\n%s\nwant:\n%s", o.cmd.Name(), render(o.events), render(want))
	}
}

// ThenError requires that the command was refused with an error matching
// target (errors.Is) and decided no events.
func (o *Outcome[A]) ThenError(target error) {
	t := o.s.t
	t.Helper()
	switch {
	case o.err == nil:
		t.Fatalf("%s succeeded with:\n%s\nwant error %v", o.cmd.Name(), render(o.events), target)
	case !errors.Is(o.err, target):
		t.Fatalf("%s: got error %v, want %v", o.cmd.Name(), o.err, target)
	case len(o.events) > 0:
		t.Fatalf("%s failed with %v but decided events too:\n%s", o.cmd.Name(), o.err, render(o.events))
	}
}

// Events returns what the command decided and its error, for assertions
// the kit does not make.
func (o *Outcome[A]) Events() ([]event.Payload, error) { return o.events, o.err }

func render(evs []event.Payload) string {
	if len(evs) == 0 {
		return "  (no events)"
	}
	var b strings.Builder
	for _, p := range evs {
		fmt.Fprintf(&b, "  %s %+v\n", p.EventType(), p)
	}
	return strings.TrimRight(b.String(), "\n")
}
