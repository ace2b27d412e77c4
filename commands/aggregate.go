package commands

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/strata-es/strata/domain/event"
)

// Aggregate describes one kind of aggregate to a Handler: how its streams
// are named, how its state is rebuilt from its history and how far that
// history goes. A module declares one per aggregate type (e.g.
// examples/orders/ordercmd.Aggregate); the handler knows nothing else about it.
type Aggregate[A any] struct {
	// Kind names the aggregate in messages and telemetry ("order",
	// "inventory item"). Lower-case words.
	Kind string
	// Stream returns the name of the stream holding the events of the
	// aggregate with the given ID. It must be injective: two IDs never
	// share a stream.
	Stream func(id string) string
	// Load rebuilds the state from its history, applying the payloads in
	// order. An empty history gives the state of an aggregate that does not
	// exist yet.
	Load func(history []event.Payload) (A, error)
	// Version returns how many events the state has applied: the stream
	// version the next append must expect.
	Version func(A) int64
	// NotFound is the error of a command with If-Match on an aggregate that
	// does not exist (it must wrap domain.ErrNotFound, so that it answers
	// 404 rather than 409).
	NotFound error
	// Snapshots, optional, keeps the state beside the stream (snapshots.go).
	Snapshots *Snapshots[A]
}

var kindPattern = regexp.MustCompile(`^[a-z][a-z ]{0,62}$`)

// Validate reports every missing or malformed field.
func (a Aggregate[A]) Validate() error {
	var errs []error
	if !kindPattern.MatchString(a.Kind) {
		errs = append(errs, fmt.Errorf("aggregate kind %q: want lower-case words", a.Kind))
	}
	if a.Stream == nil {
		errs = append(errs, errors.New("aggregate: Stream is required"))
	}
	if a.Load == nil {
		errs = append(errs, errors.New("aggregate: Load is required"))
	}
	if a.Version == nil {
		errs = append(errs, errors.New("aggregate: Version is required"))
	}
	if a.NotFound == nil {
		errs = append(errs, errors.New("aggregate: NotFound is required"))
	}
	if err := a.Snapshots.validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Command is a request to change one aggregate of type A. Each command names
// itself (for metrics and idempotency fingerprints) and decides against the
// loaded state. A command is JSON-marshalable: its canonical JSON, with the
// target ID among its fields, fingerprints an idempotent request.
type Command[A any] interface {
	// Name is a stable identifier, e.g. "order.place".
	Name() string
	// Target is the ID of the aggregate the command acts on.
	Target() string
	// Decide returns the events the aggregate emits in response, or a rule
	// error (wrapping domain.ErrRejected, ErrNotFound or ErrInvalid).
	Decide(state A, now time.Time) ([]event.Payload, error)
}

// Guarded is implemented by commands whose decision depends on events
// beyond their aggregate (issue 31, dynamic consistency boundaries): "an
// e-mail address belongs to one customer". The handler reads the tenant's
// events matching Guard (by their tags, event.Codec.Tags), asks Admit,
// decides, and appends on the condition that no event matching Guard was
// appended since the read; when one was, it reads and decides again, as
// after a version conflict. No saga, no unique index on a read model.
// The store must keep tags (eventstore.TagReader). On a first attempt,
// when Admit(nil) admits, the handler does not read: it appends on the
// condition that nothing matches Guard at all, and reads only when
// something does.
type Guarded interface {
	// Guard is the query of the events the decision depends on.
	Guard() event.Query
	// Admit decides, from the events matching Guard in log order (their
	// personal fields opened, or their tombstones once forgotten), whether
	// the command may go on: nil, or a rule error (wrapping
	// domain.ErrRejected) that answers the command. It must depend on
	// matched alone: it is also asked about an empty history.
	Admit(matched []event.Payload) error
}

// StreamStarter is implemented by commands that create their aggregate
// (CreateOrder). On a first attempt without If-Match or an idempotency key
// the handler may then assume the stream is new and let the append's
// expectation (no events yet) check it, saving a read.
type StreamStarter interface{ StartsStream() bool }

// Executor runs commands on aggregates of type A. *Handler[A] implements
// it; decorators (telemetry) wrap it.
type Executor[A any] interface {
	Handle(ctx context.Context, cmd Command[A], opts Options) (Result, error)
}

// Named is what decorators need of any command, whatever its aggregate.
type Named interface {
	Name() string
	Target() string
}
