package projections

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Errors of applying one event, for projections to wrap. Both are poison
// (IsPoison): retrying the same event cannot succeed, so after the failure
// policy's attempts the event parks its stream.
var (
	// ErrUnexpectedEvent: the event does not fit the projection (a payload
	// of another type than its event type says, a stream that is not one of
	// the projection's, an ID that contradicts the stream).
	ErrUnexpectedEvent = errors.New("unexpected event")
	// ErrMissingRow: the row an event updates does not exist, i.e. an
	// earlier event of the stream was never applied.
	ErrMissingRow = errors.New("read-model row missing")
)

// Unexpected returns ErrUnexpectedEvent for an event whose payload the
// projection cannot take.
func Unexpected(ev Event) error {
	return fmt.Errorf("%w: %s carries a %T payload", ErrUnexpectedEvent, ev.Type, ev.Payload)
}

// Ident quotes a table name for SQL. Projections take their table names as
// configuration (Retargetable), so every statement quotes them.
func Ident(name string) string { return pgx.Identifier{name}.Sanitize() }

// ExpectOne makes qq fail with ErrMissingRow unless it changed exactly one
// row (what and id name the row in the error).
func ExpectOne(qq *pgx.QueuedQuery, what, id string) {
	qq.Exec(func(ct pgconn.CommandTag) error {
		if n := ct.RowsAffected(); n != 1 {
			return fmt.Errorf("%w: %s %q (%d rows changed, want 1)", ErrMissingRow, what, id, n)
		}
		return nil
	})
}

// ExpectRows makes qq fail with ErrMissingRow unless it changed exactly n
// rows.
func ExpectRows(qq *pgx.QueuedQuery, n int64, what string) {
	qq.Exec(func(ct pgconn.CommandTag) error {
		if got := ct.RowsAffected(); got != n {
			return fmt.Errorf("%w: %s: %d rows changed, want %d", ErrMissingRow, what, got, n)
		}
		return nil
	})
}

// Renamed returns the table rename maps table to, or table itself
// (WithTables of a Retargetable).
func Renamed(rename map[string]string, table string) string {
	if to, ok := rename[table]; ok && to != "" {
		return to
	}
	return table
}

// How set-based statements find their rows ("keyed plans").
//
// A statement over an array of keys, written as a plain join
// (UPDATE t ... FROM unnest(...) u WHERE t.tenant_id = $1 AND t.key = u.key),
// leaves the join method to the planner. Read-model tables are often empty
// when their statements are first prepared (a fresh install, a rebuild)
// and have no statistics yet; the generic plan then chosen (a hash join
// over every row of the tenant) is cached and kept while the table grows
// to millions of rows. Set-based statements should therefore find each row
// through a LATERAL subquery on the full key with OFFSET 0 (which the
// planner can only run as one index probe per key) and update or delete it
// by ctid: one index probe per row whatever the statistics. Checked with
// EXPLAIN on a table prepared empty and grown to 100,000 rows; the orders
// module's projections (examples/orders/orderview) show the pattern.
