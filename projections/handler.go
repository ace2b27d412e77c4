package projections

import (
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/strata-es/strata/domain/order"
)

// Errors of applying one event.
var (
	// ErrUnexpectedEvent: the event does not fit the projection (a payload
	// of another type than its event type says, a stream that is not an
	// order stream, an order ID that contradicts the stream).
	ErrUnexpectedEvent = errors.New("unexpected event")
	// ErrMissingRow: the row an event updates does not exist, i.e. an
	// earlier event of the stream was never applied.
	ErrMissingRow = errors.New("read-model row missing")
)

func unexpected(ev Event) error {
	return fmt.Errorf("%w: %s carries a %T payload", ErrUnexpectedEvent, ev.Type, ev.Payload)
}

// orderID returns the order the event belongs to, from its stream, and
// checks that the payload agrees.
func orderID(ev Event) (string, error) {
	id, ok := order.OrderIDFromStream(ev.Stream)
	if !ok {
		return "", fmt.Errorf("%w: stream %q is not an order stream", ErrUnexpectedEvent, ev.Stream)
	}
	var inPayload string
	switch e := ev.Payload.(type) {
	case order.Created:
		inPayload = e.OrderID
	case order.LineAdded:
		inPayload = e.OrderID
	case order.LineRemoved:
		inPayload = e.OrderID
	case order.Placed:
		inPayload = e.OrderID
	case order.Paid:
		inPayload = e.OrderID
	case order.Cancelled:
		inPayload = e.OrderID
	}
	if inPayload != "" && inPayload != id {
		return "", fmt.Errorf("%w: stream %q holds an event of order %q", ErrUnexpectedEvent, ev.Stream, inPayload)
	}
	return id, nil
}

// expectOne makes qq fail unless it changed exactly one row.
func expectOne(qq *pgx.QueuedQuery, what, id string) {
	qq.Exec(func(ct pgconn.CommandTag) error {
		if n := ct.RowsAffected(); n != 1 {
			return fmt.Errorf("%w: %s %q (%d rows changed, want 1)", ErrMissingRow, what, id, n)
		}
		return nil
	})
}

// How set-based statements find their rows ("keyed plans").
//
// A statement over an array of keys, written as a plain join
// (UPDATE t ... FROM unnest(...) u WHERE t.tenant_id = $1 AND t.key = u.key),
// leaves the join method to the planner. Read-model tables are often empty
// when their statements are first prepared (a fresh install, a rebuild)
// and have no statistics yet; the generic plan then chosen (a hash join
// over every row of the tenant) is cached and kept while the table grows
// to millions of rows. The set-based statements therefore find each row
// through a LATERAL subquery on the full key with OFFSET 0 (which the
// planner can only run as one index probe per key) and update or delete it
// by ctid: one index probe per row whatever the statistics. Checked with
// EXPLAIN on a table prepared empty and grown to 100,000 rows.

// orderRun is the events of one order within a batch, in log order.
type orderRun struct {
	id  string
	evs []Event
}

// byOrder splits a tenant's events into runs per order, in the order each
// order first appears.
func byOrder(evs []Event) ([]orderRun, error) {
	at := map[string]int{}
	var runs []orderRun
	for _, ev := range evs {
		id, err := orderID(ev)
		if err != nil {
			return nil, err
		}
		i, ok := at[id]
		if !ok {
			i = len(runs)
			at[id] = i
			runs = append(runs, orderRun{id: id})
		}
		runs[i].evs = append(runs[i].evs, ev)
	}
	return runs, nil
}

// expectRows makes qq fail unless it changed exactly n rows.
func expectRows(qq *pgx.QueuedQuery, n int64, what string) {
	qq.Exec(func(ct pgconn.CommandTag) error {
		if got := ct.RowsAffected(); got != n {
			return fmt.Errorf("%w: %s: %d rows changed, want %d", ErrMissingRow, what, got, n)
		}
		return nil
	})
}

func timePtr(t time.Time) *time.Time { return &t }
