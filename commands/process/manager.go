package process

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"

	"github.com/strata-es/strata/domain/decision"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/internal/failpoint"
)

var namePattern = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)

// New validates def and returns it as a Manager for the runtime.
func New[S any](def Definition[S]) (Manager, error) {
	var errs []error
	if !namePattern.MatchString(def.Name) {
		errs = append(errs, fmt.Errorf("process name %q: want [a-z][a-z0-9_]*", def.Name))
	}
	if len(def.EventTypes) == 0 {
		errs = append(errs, errors.New("process: EventTypes is empty"))
	}
	if def.Correlate == nil {
		errs = append(errs, errors.New("process: Correlate is required"))
	}
	if def.Decide == nil {
		errs = append(errs, errors.New("process: Decide is required"))
	}
	for i, f := range def.Personal {
		if f.Name == "" || f.Tombstone == nil {
			errs = append(errs, fmt.Errorf("process: Personal[%d]: a field needs a name and a tombstone", i))
		} else if slices.ContainsFunc(def.Personal[:i], func(g event.PersonalField) bool { return g.Name == f.Name }) {
			errs = append(errs, fmt.Errorf("process: Personal: %q twice", f.Name))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &manager[S]{def: def}, nil
}

// manager adapts a Definition[S] to the runtime, which stores state as
// JSON and steps and payloads as JSON.
type manager[S any] struct{ def Definition[S] }

func (m *manager[S]) Name() string         { return m.def.Name }
func (m *manager[S]) EventTypes() []string { return m.def.EventTypes }
func (m *manager[S]) Personal() []event.PersonalField {
	return slices.Clone(m.def.Personal)
}

// correlate runs Correlate and checks what it names. A panic, an instance
// that is not an entity ID or an empty stream is an error: the event is
// poison for this process (ARCHITECTURE decision 17), and the caller parks
// its stream instead of stopping the process for every tenant.
func (m *manager[S]) correlate(ev Event) (instance, stream string, ok bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			instance, stream, ok, err = "", "", false, fmt.Errorf("%s: Correlate panicked: %v", m.def.Name, p)
		}
	}()
	instance, stream, ok = m.def.Correlate(ev)
	if !ok {
		return "", "", false, nil
	}
	if err := validInstance(instance); err != nil {
		return "", "", false, fmt.Errorf("%s: Correlate gave an invalid instance %q: %w", m.def.Name, clip(instance, 100), err)
	}
	if stream == "" {
		return "", "", false, fmt.Errorf("%s: Correlate gave instance %q no stream", m.def.Name, instance)
	}
	return instance, stream, true, nil
}

// FailpointDecidePanic is a panic point (internal/failpoint, keyed by the
// input's tenant): a Decide that panics on one tenant's inputs, for the
// fault harness.
const FailpointDecidePanic = "process.decide-panic"

// decided is a Decision with its state and payloads encoded: what the
// runtime writes.
type decided struct {
	State     json.RawMessage
	Status    string
	Done      bool
	Steps     []step
	Deadlines []Deadline
	Cancel    []string
	Note      string
}

// step is an outgoing command or intent, encoded.
type step struct {
	Key     string // the Decision's Step
	Kind    StepKind
	Name    string // command name or port name
	Payload json.RawMessage
}

// decide runs Decide on the stored state (nil: no instance yet) and encodes
// the decision. It checks what the runtime relies on (Decision.Validate: a
// status label, step keys that are non-empty, unique and short enough,
// deadline names). A panic (in Decide, or in a payload's MarshalJSON) is an error like any
// other failing decision: it parks the instance, never the process.
func (m *manager[S]) decide(stored json.RawMessage, in Input) (out decided, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, err = decided{}, fmt.Errorf("%s: Decide panicked: %v", m.def.Name, p)
		}
	}()
	var state S
	exists := stored != nil
	if exists {
		if err := json.Unmarshal(stored, &state); err != nil {
			return decided{}, fmt.Errorf("decode %s state: %w", m.def.Name, err)
		}
	}
	failpoint.PanicFor(FailpointDecidePanic, string(in.Tenant))
	d, err := m.def.Decide(state, exists, in)
	if err != nil {
		return decided{}, err
	}
	if err := d.Validate(); err != nil {
		return decided{}, fmt.Errorf("%s %w", m.def.Name, err)
	}
	out = decided{Status: d.Status, Done: d.Done, Deadlines: d.Deadlines, Cancel: d.Cancel, Note: d.Note}
	if out.State, err = json.Marshal(d.State); err != nil {
		return decided{}, fmt.Errorf("encode %s state: %w", m.def.Name, err)
	}
	add := func(key string, kind StepKind, name string, payload any) error {
		raw, err := json.Marshal(payload)
		if err != nil {
			return fmt.Errorf("encode %s step %q: %w", m.def.Name, key, err)
		}
		out.Steps = append(out.Steps, step{Key: key, Kind: kind, Name: name, Payload: raw})
		return nil
	}
	for _, c := range d.Commands {
		if err := add(c.Step, StepCommand, c.Name, c.Payload); err != nil {
			return decided{}, err
		}
	}
	for _, i := range d.Intents {
		if err := add(i.Step, StepIntent, i.Port, i.Payload); err != nil {
			return decided{}, err
		}
	}
	return out, nil
}

// StepKey is the idempotency key of step within an instance of process:
// deterministic, so that a re-dispatch carries the same key. It fits the
// store's key limit for any step the runtime accepts. It is in the
// engine's namespace (commands.EngineKeyPrefix), which the HTTP command
// API refuses to users, so no user can send a step's key first.
func StepKey(process, instance, stepKey string) string {
	return decision.StepKey(process, instance, stepKey)
}
