package eventstore

import (
	"context"
	"fmt"

	"github.com/strata-es/strata/domain/event"
)

// Append conditions (issue 31, dynamic consistency boundaries): a command
// reads the events matching a query of tags (ReadTagged), decides, and
// appends on the condition that no event matching the query was appended
// after the position the read returned. Two commands guarding one
// invariant ("an e-mail address belongs to one customer") then cannot
// both commit, whatever streams they append to.

// ErrConditionFailed: an event matching the append's condition was
// appended after the position the condition names; nothing was appended.
// It is an ErrVersionConflict: read again, decide again.
var ErrConditionFailed = fmt.Errorf("%w: append condition failed", ErrVersionConflict)

// AppendCondition makes an append fail unless no event matching Query was
// appended after After.
type AppendCondition struct {
	Query event.Query
	// After is the position a ReadTagged of Query returned (zero: the
	// beginning of the log, so any matching event fails the append).
	After event.Position
}

// TagReader is a Store that keeps tags and checks append conditions:
// AppendRequest.Condition and MultiAppendRequest.Condition are honoured
// only by a store that implements it (the others refuse them).
type TagReader interface {
	// ReadTagged returns the tenant's events matching q, in log order, and
	// the position to condition an append on: every matching event
	// returned is at or before it, and every matching event appended
	// later is after it.
	ReadTagged(ctx context.Context, tenant string, q event.Query) ([]event.Record, event.Position, error)
}
