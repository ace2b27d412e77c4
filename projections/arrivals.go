package projections

import (
	"context"
	"fmt"
	"strconv"

	"github.com/strata-es/strata/domain/event"
)

// Arrivals are the tenants that came to this placement by a move
// (tenant_arrivals, migration 015): their events up to through are copies
// of history the placement they left has already acted on: its process
// managers decided them (their state was copied with the tenant) and its
// relay published them. The runners with effects outside the read models
// pass those events over, so that the target never issues a step or an
// intent, or publishes an event, a second time; projections apply them
// (the target's read models are rebuilt from them). Through unset: the
// move is still copying, every event of the tenant here is a copy.
type Arrivals map[string]*event.Position

// ReadArrivals reads the arrivals (when need; none otherwise). Read them
// after the batch they judge: an event the batch holds that came after a
// move's copies committed after the arrival's end was recorded.
func ReadArrivals(ctx context.Context, q Querier, need bool) (Arrivals, error) {
	if !need {
		return nil, nil
	}
	rows, err := q.Query(ctx, `SELECT tenant, through_tx::text, through_pos FROM tenant_arrivals`)
	if err != nil {
		return nil, fmt.Errorf("read the tenants arriving by a move: %w", err)
	}
	defer rows.Close()
	out := Arrivals{}
	for rows.Next() {
		var tenant string
		var tx *string
		var pos *int64
		if err := rows.Scan(&tenant, &tx, &pos); err != nil {
			return nil, err
		}
		if tx == nil || pos == nil {
			out[tenant] = nil
			continue
		}
		major, err := strconv.ParseUint(*tx, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("tenant_arrivals of %s: through_tx %q: %w", tenant, *tx, err)
		}
		out[tenant] = &event.Position{Major: major, Minor: uint64(*pos)}
	}
	return out, rows.Err()
}

// Copied reports whether rec is a copy a move brought.
func (a Arrivals) Copied(rec event.Record) bool {
	through, ok := a[rec.Tenant]
	if !ok {
		return false
	}
	return through == nil || !through.Less(rec.Position)
}
