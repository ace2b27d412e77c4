package decision

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
)

// Event is a log event as a process sees it: the stored record and its
// decoded payload.
type Event struct {
	event.Record
	Payload event.Payload
}

// InputKind says which field of an Input is set.
type InputKind string

const (
	// InputEvent: an event of the global log (Input.Event).
	InputEvent InputKind = "event"
	// InputOutcome: the outcome of a command or intent the instance issued
	// (Input.Outcome).
	InputOutcome InputKind = "outcome"
	// InputTimeout: a deadline the instance set has fired (Input.Timeout).
	InputTimeout InputKind = "timeout"
)

// Input is one thing that happened to an instance.
type Input struct {
	Kind     InputKind
	Instance string
	Tenant   domain.TenantID
	// At is when the input was recorded (the event's recording time, the
	// outcome's or the firing's commit clock). Decide uses it instead of
	// the wall clock, so that it stays deterministic.
	At      time.Time
	Event   *Event
	Outcome *Outcome
	Timeout *Timeout
}

// Outcome is the definite result of one step the instance issued.
type Outcome struct {
	// Step is the step's key as the decision named it.
	Step string
	// Kind is StepCommand or StepIntent; Name the command's or port's name.
	Kind StepKind
	Name string
	// OK: the command was applied (or was already in effect) or the intent
	// succeeded. !OK: a definite refusal (a domain rule said no, the
	// provider declined); Reason says why.
	OK     bool
	Reason string
	// Result is what the command or port answered (JSON), e.g. the stream
	// version a command reached or a provider's reference.
	Result json.RawMessage
}

// Timeout is a fired deadline.
type Timeout struct {
	Name string
	Due  time.Time
}

// StepKind distinguishes outgoing commands from intents.
type StepKind string

const (
	StepCommand StepKind = "command"
	StepIntent  StepKind = "intent"
)

// Decision is what Decide returns for one input.
type Decision[S any] struct {
	// State is the instance's new state (stored even when unchanged).
	State S
	// Status labels the state for operators and metrics ("reserving",
	// "awaiting_payment", "completed"): lower-case [a-z_].
	Status string
	// Done marks the state as terminal: later inputs are still recorded in
	// the instance's history but Decide is no longer called for them.
	Done bool
	// Commands are issued after the decision commits, each once.
	Commands []Command
	// Intents are external effects recorded now and executed after commit.
	Intents []Intent
	// Deadlines are set (or moved, by name); Cancel cancels by name.
	Deadlines []Deadline
	Cancel    []string
	// Note is a short human-readable line for the instance's history.
	Note string
}

// Command is an outgoing command on an aggregate.
type Command struct {
	// Step is unique within the instance and deterministic (e.g.
	// "reserve:SKU-1"): the idempotency key is derived from the process
	// name, the instance and Step (StepKey). A step issued twice is
	// dispatched once.
	Step string
	// Name is a command name bound with process.Bind ("inventory.reserve").
	Name string
	// Payload is the command's JSON body (marshaled with encoding/json):
	// what the bound command type decodes, unknown fields refused.
	Payload any
}

// Intent is an outgoing external effect through a port.
type Intent struct {
	// Step as for Command; the port receives the derived key as its
	// idempotency key (the provider's Idempotency-Key).
	Step string
	// Port names a port given to the runner ("payment").
	Port string
	// Payload is the intent's JSON body (amount, currency, order...).
	Payload any
}

// Deadline asks for an InputTimeout named Name at (or soon after) At.
type Deadline struct {
	Name string
	At   time.Time
}

// Limits on what a decision may name, so that every step's idempotency
// key fits the store's 255 characters: KeyPrefix + process name (63) + ":"
// + instance (64) + ":" + step (120).
const (
	MaxStepKey      = 120
	MaxDeadlineName = 120
)

var statusPattern = regexp.MustCompile(`^[a-z][a-z_]{0,62}$`)

// Validate reports what the runtime refuses in a decision, before anything
// of it is written: a status that is not a lower-case label, a command or
// intent without a step key or a name, a step key used twice (across
// commands and intents) or longer than MaxStepKey, a deadline without a
// name or a time, or with a name longer than MaxDeadlineName. The runtime
// parks the instance on such a decision; the process test kit fails the
// test.
func (d Decision[S]) Validate() error {
	var errs []error
	if !statusPattern.MatchString(d.Status) {
		errs = append(errs, fmt.Errorf("decided status %q: want lower-case [a-z_]", d.Status))
	}
	seen := map[string]bool{}
	step := func(kind StepKind, key, name string) {
		switch {
		case key == "" || name == "":
			errs = append(errs, fmt.Errorf("decided %s without a step key or name", map[StepKind]string{StepCommand: "a command", StepIntent: "an intent"}[kind]))
		case len(key) > MaxStepKey:
			errs = append(errs, fmt.Errorf("decided step key %q longer than %d", key, MaxStepKey))
		case seen[key]:
			errs = append(errs, fmt.Errorf("decided step %q twice", key))
		}
		seen[key] = true
	}
	for _, c := range d.Commands {
		step(StepCommand, c.Step, c.Name)
	}
	for _, i := range d.Intents {
		step(StepIntent, i.Step, i.Port)
	}
	for _, dl := range d.Deadlines {
		switch {
		case dl.Name == "" || dl.At.IsZero():
			errs = append(errs, errors.New("decided a deadline without a name or time"))
		case len(dl.Name) > MaxDeadlineName:
			errs = append(errs, fmt.Errorf("decided deadline name %q longer than %d", dl.Name, MaxDeadlineName))
		}
	}
	return errors.Join(errs...)
}

// KeyPrefix starts every step's idempotency key: the engine's reserved
// namespace of keys (commands.EngineKeyPrefix), which the HTTP command API
// refuses to users, so no user can send a step's key first.
const KeyPrefix = "pm:"

// StepKey is the idempotency key the runtime executes step of instance of
// process under: deterministic, so that a re-dispatch carries the same
// key. A decision needs it when it names an earlier step to an external
// system (a void names the capture it voids by the capture's key).
func StepKey(process, instance, step string) string {
	return KeyPrefix + process + ":" + instance + ":" + step
}
