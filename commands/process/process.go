// Package process is the engine's process-manager runtime (ARCHITECTURE
// decision 10): a coordinator with explicit state per instance, keyed by a
// correlation, that consumes the global log like a projection and, on each
// input, decides its new state, the commands it issues, the external effects
// it intends and the deadlines it sets or cancels.
//
// The instance's state, its outgoing commands and intents (an outbox), its
// deadlines and the process's checkpoint commit in one transaction. A
// dispatcher executes outgoing commands against aggregates with a
// deterministic idempotency key (process, instance, step), so a re-dispatch
// after a crash is applied once; an intent is executed through a Port with
// the same kind of key (intent-then-execute). Each outcome, and each fired
// deadline, comes back to the instance as an Input, decided and committed in
// the transaction that records it. A step that keeps failing parks the
// instance (never the whole process) in the dead-letter store.
//
// The package knows no domain: a module describes its process with a
// Definition and binds the commands it issues with Bind.
package process

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/decision"
	"github.com/strata-es/strata/domain/event"
)

// Definition describes one process manager whose instances hold state S.
// S must round-trip through encoding/json: it is stored as JSON.
type Definition[S any] struct {
	// Name is the process's stable identity: the key of its checkpoint, its
	// lease, its dead letters and the prefix of its idempotency keys.
	// Lower-case [a-z][a-z0-9_]*, distinct from every projection's name.
	Name string
	// EventTypes are the log events the process consumes. Others advance
	// its checkpoint without being decoded.
	EventTypes []string
	// Correlate names the instance an event belongs to: its ID and the
	// stream whose events it follows (the dead-letter store parks by
	// stream). ok false: the event is not for this process. An instance
	// that is not an entity ID, an empty stream or a panic makes the event
	// poison: it parks its own stream for its tenant, and the process goes
	// on with every other stream and tenant.
	Correlate func(ev Event) (instance string, stream string, ok bool)
	// Decide is the process itself, pure: given the instance's state
	// (exists false and the zero S for an instance not seen yet) and one
	// input, it returns the decision. An error (or a panic) is a bug or a
	// poison input: the instance is parked, the decision discarded. Decide must be
	// deterministic: the same state and input give the same decision.
	Decide func(state S, exists bool, in Input) (Decision[S], error)
	// Personal names the top-level JSON fields, wherever the runtime
	// stores them for an instance (its state, the payloads and results of
	// its steps), that hold personal data of the subject of the instance's
	// stream (docs/personal-data.md). They are kept in plaintext while the
	// subject is known; a subject's erasure replaces them with their
	// tombstones in every instance on the subject's streams, and clears
	// those instances' free text (history notes and reasons, step errors),
	// which the runtime cannot read for personal data. A tombstone must
	// decode into S as the field's type.
	Personal []event.PersonalField
}

// The inputs and the decision are package decision's (domain/decision),
// so that a module's pure domain decides in the runtime's own types: a
// process.Input is a decision.Input. They are named here too, so that a
// module's write side that wires the runtime needs one import.
type (
	// Event is a log event as a process sees it: the stored record and
	// its decoded payload.
	Event = decision.Event
	// InputKind says which field of an Input is set.
	InputKind = decision.InputKind
	// Input is one thing that happened to an instance.
	Input = decision.Input
	// Outcome is the definite result of one step the instance issued.
	Outcome = decision.Outcome
	// Timeout is a fired deadline.
	Timeout = decision.Timeout
	// StepKind distinguishes outgoing commands from intents.
	StepKind = decision.StepKind
	// Decision is what Decide returns for one input.
	Decision[S any] = decision.Decision[S]
	// Command is an outgoing command on an aggregate.
	Command = decision.Command
	// Intent is an outgoing external effect through a Port.
	Intent = decision.Intent
	// Deadline asks for an InputTimeout named Name at (or soon after) At.
	Deadline = decision.Deadline
)

// Input kinds and step kinds (decision's).
const (
	InputEvent   = decision.InputEvent
	InputOutcome = decision.InputOutcome
	InputTimeout = decision.InputTimeout
	StepCommand  = decision.StepCommand
	StepIntent   = decision.StepIntent
)

// Rejected marks an error as a definite refusal: the step is not retried
// and the instance receives an Outcome with OK false. Command errors that
// wrap domain.ErrRejected, domain.ErrNotFound or domain.ErrInvalid are
// definite without it.
type Rejected struct{ Reason string }

func (r *Rejected) Error() string { return "rejected: " + r.Reason }

// IsDefinite reports whether err is a definite refusal (not retried).
func IsDefinite(err error) bool {
	var r *Rejected
	return errors.As(err, &r) || errors.Is(err, domain.ErrRejected) || errors.Is(err, domain.ErrNotFound) ||
		errors.Is(err, domain.ErrInvalid)
}

// CommandFunc executes one outgoing command for tenant: payload is the
// command's JSON, key the deterministic idempotency key. It returns what
// the instance receives as Outcome.Result. A definite refusal (IsDefinite)
// becomes an Outcome with OK false; any other error is retried with
// backoff and, past the attempts, parks the instance.
type CommandFunc func(ctx context.Context, tenant domain.TenantID, payload json.RawMessage, key string) (json.RawMessage, error)

// Port executes intents of one kind against an external system. Execute
// must pass key to the provider as its idempotency key, so that a call
// repeated after a crash or a lost response has the effect of one. Errors
// as for CommandFunc: Rejected for a definite refusal (a decline), any
// other error (5xx, timeout, connection lost) retried with the same key.
type Port interface {
	Execute(ctx context.Context, tenant domain.TenantID, key string, payload json.RawMessage) (json.RawMessage, error)
}

// PortFunc adapts a function to Port.
type PortFunc func(ctx context.Context, tenant domain.TenantID, key string, payload json.RawMessage) (json.RawMessage, error)

func (f PortFunc) Execute(ctx context.Context, tenant domain.TenantID, key string, payload json.RawMessage) (json.RawMessage, error) {
	return f(ctx, tenant, key, payload)
}

// Manager is a Definition made ready for the runtime (New). The runner,
// the dispatcher and the operator surface take it; its methods beyond
// these are the runtime's own.
type Manager interface {
	Name() string
	EventTypes() []string
	// Personal is the Definition's Personal.
	Personal() []event.PersonalField
}

// Spec is one process as a module hands it to the runtime: the manager,
// the commands its decisions issue (by name) and the ports its intents go
// through (by name). The runner refuses to start when a decision could
// name a command or port the Spec lacks only at the moment it happens, so
// a Spec is checked when the runner is made (every name in Commands and
// Ports must be non-empty and non-nil).
type Spec struct {
	Manager  Manager
	Commands map[string]CommandFunc
	Ports    map[string]Port
}
