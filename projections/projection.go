package projections

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain/event"
)

// Event is one event as a projection sees it: the stored record and its
// payload, decoded (and upcast to the current schema version) by the
// runner's registry.
type Event struct {
	event.Record
	Payload event.Payload
}

// Projection turns events into rows of the tables it owns.
//
// Apply queues the statements that apply one event into b and executes
// nothing itself: the runner sends a whole batch of events in one pipelined
// round trip inside one transaction that also advances the checkpoint. The
// runner sets the event's tenant (transaction-local) before the first
// statement of each tenant, so every statement runs under row-level
// security for that tenant. Statements must therefore depend only on the
// tables the projection owns and on the event, never on a read-back result;
// a statement may attach an Exec callback (e.g. to require that exactly one
// row changed), whose error fails the event like an SQL error does.
//
// Because each event's statements are queued separately, a failure is
// attributed to the one event that caused it (EventError.Index), and a
// single event can be re-applied on its own.
type Projection interface {
	// Name is the projection's stable identity: the key of its checkpoint
	// and of its lease. Renaming a projection makes it a new projection,
	// which starts from the first event and rebuilds all its rows (and the
	// old name's checkpoint is left behind). Lower-case [a-z0-9_].
	Name() string
	// EventTypes lists the event types Apply handles. Events of other types
	// are not decoded and not passed to Apply, but they still advance the
	// checkpoint.
	EventTypes() []string
	// Tables lists the tables the projection writes, as it is configured
	// (constructors take the table names, so that a rebuild can write into
	// shadow copies and swap them in).
	Tables() []string
	// Apply queues the statements applying ev into b. An error means the
	// event cannot be applied (e.g. an unexpected payload).
	Apply(b *pgx.Batch, ev Event) error
}

// BatchProjection is a Projection that can also apply a run of events
// with set-based statements: a few statements per tenant and batch, each
// over arrays of rows (unnest), instead of one or more per event. That is
// what makes catching up fast: PostgreSQL's cost is mostly per statement.
//
// The runner applies a batch with ApplyBatch first. If that fails, it rolls
// back and applies the same batch event by event with Apply, which either
// succeeds or names the one event that fails (EventError). Both paths must
// therefore produce exactly the same rows; the golden tests check it.
type BatchProjection interface {
	Projection
	// ApplyBatch queues statements applying evs into b. evs belong to one
	// tenant (already set for the transaction) and are in log order; they
	// are only of the types in EventTypes. Statements may attach Exec or
	// Query callbacks to verify what they changed.
	ApplyBatch(b *pgx.Batch, evs []Event) error
}

// CheckDecodable reports a projection handling an event type reg has no
// codec for: every such event would fail to decode, so the process must not
// start it (a misassembled module list, not a poison event).
func CheckDecodable(p Projection, reg *event.Registry) error {
	var missing []string
	for _, t := range p.EventTypes() {
		if !reg.Has(t) {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("projection %s handles event types the registry has no codec for: %s (is their module listed in cmd/strata?): %w",
			p.Name(), strings.Join(missing, ", "), event.ErrUnknownType)
	}
	return nil
}

// Names returns the names of ps.
func Names(ps []Projection) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Name()
	}
	return out
}
