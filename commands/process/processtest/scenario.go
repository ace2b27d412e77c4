package processtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/strata-es/strata/commands/process"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
)

// DefaultStart is when a scenario's first input is recorded (each next one
// a second later) unless At says otherwise.
var DefaultStart = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// Defaults of a scenario's instance.
const (
	DefaultTenant   domain.TenantID = "t-a"
	DefaultInstance                 = "i-1"
)

// Input is one input of a scenario, made by Event, EventOn, OK, Refused,
// Fired, Again or Raw. The kit completes it as the runtime would (see For).
type Input struct {
	in     process.Input
	stream string // Event: its stream ("": the scenario's)
	again  bool
	raw    bool
	err    error
}

// Event is a log event of the scenario's stream (Stream): the kit numbers
// it (its version in the stream, its position in the log), records it At
// and, with Codecs, round-trips its payload through its codec, so Decide
// sees the payload the runtime decodes.
func Event(p event.Payload) Input {
	return Input{in: process.Input{Kind: process.InputEvent, Event: &process.Event{Payload: p}}}
}

// EventOn is an Event of another stream.
func EventOn(stream string, p event.Payload) Input {
	i := Event(p)
	i.stream = stream
	return i
}

// OK is the successful outcome of step, answered with result's JSON (nil:
// no result). The kit names its kind and command or port after the
// decision that issued it.
func OK(step string, result any) Input {
	i := Input{in: process.Input{Kind: process.InputOutcome, Outcome: &process.Outcome{Step: step, OK: true}}}
	if result != nil {
		i.in.Outcome.Result, i.err = json.Marshal(result)
	}
	return i
}

// Refused is the definite refusal of step (a domain rule said no, the
// provider declined), with reason.
func Refused(step, reason string) Input {
	return Input{in: process.Input{Kind: process.InputOutcome, Outcome: &process.Outcome{Step: step, Reason: reason}}}
}

// Fired is the firing of the deadline name; its due time is the one the
// last decision that set it named.
func Fired(name string) Input {
	return Input{in: process.Input{Kind: process.InputTimeout, Timeout: &process.Timeout{Name: name}}}
}

// Again is the previous input once more, as a redelivery after a crash
// gives it: the same event version, outcome or firing.
func Again() Input { return Input{again: true} }

// Raw is in as given: the kit fills only an empty Instance, Tenant and At.
// For inputs the runtime would not make (an outcome of a step never
// issued), to test how Decide refuses them.
func Raw(in process.Input) Input { return Input{in: in, raw: true} }

// At sets when the input is recorded (Input.At).
func (i Input) At(t time.Time) Input {
	i.in.At = t
	return i
}

// Scenario is the past of one instance of a process.
type Scenario[S any] struct {
	t        testing.TB
	decide   func(state S, exists bool, in process.Input) (process.Decision[S], error)
	registry *event.Registry
	tenant   domain.TenantID
	instance string
	stream   string
	start    time.Time
	given    []Input
}

// For starts a scenario of one instance decided by decide (a Definition's
// Decide). The kit gives Decide each input the way the runtime does:
//
//   - the state as stored, through encoding/json (exists false and the zero
//     S before the first decision);
//   - Instance and Tenant set (DefaultInstance, DefaultTenant), At one second
//     after the previous input's unless At says otherwise;
//   - an event numbered in its stream and the log, decoded by its codec
//     (Codecs); an outcome with the kind and name of the step the instance
//     issued; a firing with the due time it set;
//   - nothing decided for a Done instance (the input is recorded only).
//
// It calls Decide twice per input and fails the test when the two
// decisions differ (Decide must be deterministic) or when a decision is
// one the runtime refuses (decision.Decision.Validate, a payload or state
// that does not encode). A failing given input fails the test; the When
// input's error is the Result's.
func For[S any](t testing.TB, decide func(state S, exists bool, in process.Input) (process.Decision[S], error)) *Scenario[S] {
	t.Helper()
	if decide == nil {
		t.Fatal("processtest: Decide is nil")
	}
	return &Scenario[S]{t: t, decide: decide, tenant: DefaultTenant, instance: DefaultInstance, start: DefaultStart}
}

// Instance sets the instance's ID (and its stream's, unless Stream).
func (s *Scenario[S]) Instance(id string) *Scenario[S] {
	s.instance = id
	return s
}

// Tenant sets the instance's tenant.
func (s *Scenario[S]) Tenant(id domain.TenantID) *Scenario[S] {
	s.tenant = id
	return s
}

// Stream sets the stream of Event inputs (default: the instance's ID).
func (s *Scenario[S]) Stream(stream string) *Scenario[S] {
	s.stream = stream
	return s
}

// Codecs makes the scenario encode every event's payload with reg and
// decode it back, as the store and the runtime do: Decide gets what the
// registry's codec makes (often a pointer), and a payload that would not
// survive the log fails the test.
func (s *Scenario[S]) Codecs(reg *event.Registry) *Scenario[S] {
	s.registry = reg
	return s
}

// At sets when the first input is recorded.
func (s *Scenario[S]) At(start time.Time) *Scenario[S] {
	s.start = start
	return s
}

// Given adds past inputs, oldest first.
func (s *Scenario[S]) Given(inputs ...Input) *Scenario[S] {
	s.given = append(s.given, inputs...)
	return s
}

// When decides in after the given inputs.
func (s *Scenario[S]) When(in Input) *Result[S] {
	s.t.Helper()
	f := &fold[S]{s: s, versions: map[string]int64{}, steps: map[string]process.Outcome{}, deadlines: map[string]time.Time{}}
	for i, g := range s.given {
		if _, _, err := f.next(i, g); err != nil {
			s.t.Fatalf("processtest: given input %d: %v", i+1, err)
		}
	}
	r := &Result[S]{t: s.t}
	r.in, r.decision, r.err = f.next(len(s.given), in)
	return r
}

// fold is the instance as the runtime keeps it, input after input.
type fold[S any] struct {
	s         *Scenario[S]
	state     json.RawMessage // nil: nothing decided yet
	status    string
	done      bool
	versions  map[string]int64           // by stream
	steps     map[string]process.Outcome // issued steps by key: their kind and name
	deadlines map[string]time.Time       // pending, by name
	prev      *process.Input
	n         int
}

// next completes x and decides it; the decision is the instance's view
// after it (for a Done instance: its last state, no effects).
func (f *fold[S]) next(i int, x Input) (process.Input, process.Decision[S], error) {
	t := f.s.t
	t.Helper()
	in, err := f.complete(x)
	if err != nil {
		t.Fatalf("processtest: input %d: %v", i+1, err)
	}
	f.n++
	f.prev = &in
	if f.done {
		var state S
		if err := json.Unmarshal(f.state, &state); err != nil {
			t.Fatalf("processtest: decode the state: %v", err)
		}
		return in, process.Decision[S]{State: state, Status: f.status, Done: true, Note: "done: not decided"}, nil
	}
	d, err := f.decideOnce(in)
	again, err2 := f.decideOnce(in)
	if (err == nil) != (err2 == nil) || err != nil && err.Error() != err2.Error() {
		t.Fatalf("processtest: input %d: Decide is not deterministic: error %v, then %v", i+1, err, err2)
	}
	if err != nil {
		return in, process.Decision[S]{}, err
	}
	first, err := encodeDecision(d)
	if err != nil {
		t.Fatalf("processtest: input %d: %v", i+1, err)
	}
	if second, _ := encodeDecision(again); string(first) != string(second) {
		t.Fatalf("processtest: input %d: Decide is not deterministic:\n  %s\n  %s", i+1, first, second)
	}
	if err := d.Validate(); err != nil {
		t.Fatalf("processtest: input %d: the runtime refuses the decision: %v", i+1, err)
	}
	if f.state, err = json.Marshal(d.State); err != nil {
		t.Fatalf("processtest: input %d: encode the state: %v", i+1, err)
	}
	f.status, f.done = d.Status, d.Done
	for _, c := range d.Commands {
		f.steps[c.Step] = process.Outcome{Kind: process.StepCommand, Name: c.Name}
	}
	for _, it := range d.Intents {
		f.steps[it.Step] = process.Outcome{Kind: process.StepIntent, Name: it.Port}
	}
	for _, dl := range d.Deadlines {
		f.deadlines[dl.Name] = dl.At
	}
	for _, name := range d.Cancel {
		delete(f.deadlines, name)
	}
	if d.Done {
		clear(f.deadlines)
	}
	return in, d, nil
}

// decideOnce calls Decide on a fresh copy of the stored state; a panic is
// an error, as in the runtime (it parks the instance).
func (f *fold[S]) decideOnce(in process.Input) (d process.Decision[S], err error) {
	defer func() {
		if p := recover(); p != nil {
			d, err = process.Decision[S]{}, fmt.Errorf("Decide panicked: %v", p)
		}
	}()
	var state S
	if f.state != nil {
		if err := json.Unmarshal(f.state, &state); err != nil {
			return d, fmt.Errorf("decode the state: %w", err)
		}
	}
	return f.s.decide(state, f.state != nil, in)
}

// complete makes x the input the runtime would give.
func (f *fold[S]) complete(x Input) (process.Input, error) {
	s := f.s
	if x.err != nil {
		return process.Input{}, x.err
	}
	if x.again {
		if f.prev == nil {
			return process.Input{}, errors.New("Again with no input before it")
		}
		return *f.prev, nil
	}
	in := x.in
	if in.Instance == "" {
		in.Instance = s.instance
	}
	if in.Tenant == "" {
		in.Tenant = s.tenant
	}
	if in.At.IsZero() {
		in.At = s.start.Add(time.Duration(f.n) * time.Second)
	}
	if x.raw {
		return in, nil
	}
	switch in.Kind {
	case process.InputEvent:
		ev := *in.Event
		stream := x.stream
		if stream == "" {
			stream = s.stream
		}
		if stream == "" {
			stream = in.Instance
		}
		if ev.Payload == nil {
			return in, errors.New("an event without a payload")
		}
		f.versions[stream]++
		ev.Record = event.Record{ID: fmt.Sprintf("e-%d", f.n+1), Tenant: string(in.Tenant), Stream: stream, Version: f.versions[stream],
			Type: ev.Payload.EventType(), SchemaVersion: 1, RecordedAt: in.At, Position: event.Position{Major: uint64(f.n + 1)}}
		if s.registry != nil {
			typ, v, data, err := s.registry.Encode(ev.Payload)
			if err != nil {
				return in, fmt.Errorf("event %T does not encode: %w", ev.Payload, err)
			}
			if ev.Payload, err = s.registry.Decode(typ, v, data); err != nil {
				return in, fmt.Errorf("event %s does not decode: %w", typ, err)
			}
			ev.Type, ev.SchemaVersion, ev.Data = typ, v, data
		}
		in.Event = &ev
	case process.InputOutcome:
		o := *in.Outcome
		if issued, ok := f.steps[o.Step]; ok {
			o.Kind, o.Name = issued.Kind, issued.Name
		}
		in.Outcome = &o
	case process.InputTimeout:
		tm := *in.Timeout
		if due, ok := f.deadlines[tm.Name]; ok {
			tm.Due = due
			delete(f.deadlines, tm.Name)
		}
		in.Timeout = &tm
	}
	return in, nil
}

// Result is what one input came to.
type Result[S any] struct {
	t        testing.TB
	in       process.Input
	decision process.Decision[S]
	err      error
}

// Want is the decision a Then expects: every field is compared, so an
// empty one means "none". Payloads are compared as their JSON (a struct,
// a map or a json.RawMessage of the same JSON are equal), deadlines by
// their name and instant.
type Want struct {
	Status    string
	Done      bool
	Commands  []process.Command
	Intents   []process.Intent
	Deadlines []process.Deadline
	Cancel    []string
}

// Then requires that the input was decided without error and that the
// decision is want, effects in order. For an input to a Done instance the
// decision is the instance's last status, Done, and no effects.
func (r *Result[S]) Then(want Want) {
	r.t.Helper()
	if r.err != nil {
		r.t.Fatalf("%s: got error %v, want status %s", describe(r.in), r.err, want.Status)
	}
	d := r.decision
	got, err := render(d.Status, d.Done, d.Commands, d.Intents, d.Deadlines, d.Cancel)
	if err != nil {
		r.t.Fatalf("%s: %v", describe(r.in), err)
	}
	exp, err := render(want.Status, want.Done, want.Commands, want.Intents, want.Deadlines, want.Cancel)
	if err != nil {
		r.t.Fatalf("processtest: the wanted decision: %v", err)
	}
	if strings.Join(got, "\n") != strings.Join(exp, "\n") {
		r.t.Fatalf("%s decided:\n  %s\nwant:\n  %s", describe(r.in), strings.Join(got, "\n  "), strings.Join(exp, "\n  "))
	}
}

// ThenError requires that Decide failed with an error matching target
// (errors.Is): the runtime parks the instance on it.
func (r *Result[S]) ThenError(target error) {
	r.t.Helper()
	switch {
	case r.err == nil:
		r.t.Fatalf("%s decided status %s, want error %v", describe(r.in), r.decision.Status, target)
	case !errors.Is(r.err, target):
		r.t.Fatalf("%s: got error %v, want %v", describe(r.in), r.err, target)
	}
}

// Decision returns the decision and Decide's error, for assertions the kit
// does not make (the state, the note).
func (r *Result[S]) Decision() (process.Decision[S], error) { return r.decision, r.err }

// Input returns the input as the kit completed it.
func (r *Result[S]) Input() process.Input { return r.in }

// render lists a decision one line per fact: its status, done, each
// command and intent with its payload's JSON, each deadline set and
// cancelled.
func render(status string, done bool, commands []process.Command, intents []process.Intent, deadlines []process.Deadline, cancel []string) ([]string, error) {
	out := []string{"status " + status}
	if done {
		out = append(out, "done")
	}
	for _, c := range commands {
		p, err := normalJSON(c.Payload)
		if err != nil {
			return nil, fmt.Errorf("command %s: %w", c.Step, err)
		}
		out = append(out, fmt.Sprintf("command %s %s %s", c.Step, c.Name, p))
	}
	for _, i := range intents {
		p, err := normalJSON(i.Payload)
		if err != nil {
			return nil, fmt.Errorf("intent %s: %w", i.Step, err)
		}
		out = append(out, fmt.Sprintf("intent %s %s %s", i.Step, i.Port, p))
	}
	for _, dl := range deadlines {
		out = append(out, "deadline "+dl.Name+" at "+dl.At.UTC().Format(time.RFC3339Nano))
	}
	for _, c := range cancel {
		out = append(out, "cancel deadline "+c)
	}
	return out, nil
}

// normalJSON is v's JSON with object keys sorted, so that a struct and a
// map (or raw JSON) of the same payload compare equal.
func normalJSON(v any) (string, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("payload does not encode: %w", err)
	}
	var x any
	if err := json.Unmarshal(raw, &x); err != nil {
		return "", err
	}
	raw, err = json.Marshal(x)
	return string(raw), err
}

// encodeDecision is everything a decision says, as JSON, to compare two.
func encodeDecision[S any](d process.Decision[S]) ([]byte, error) {
	raw, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("the decision does not encode (a payload or the state): %w", err)
	}
	return raw, nil
}

func describe(in process.Input) string {
	switch {
	case in.Kind == process.InputEvent && in.Event != nil:
		return fmt.Sprintf("event %s (v%d of %s)", in.Event.Type, in.Event.Version, in.Event.Stream)
	case in.Kind == process.InputOutcome && in.Outcome != nil:
		if in.Outcome.OK {
			return "outcome " + in.Outcome.Step + " ok"
		}
		return "outcome " + in.Outcome.Step + " refused"
	case in.Kind == process.InputTimeout && in.Timeout != nil:
		return "deadline " + in.Timeout.Name + " fired"
	}
	return "input " + string(in.Kind)
}
