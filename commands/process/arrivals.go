package process

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain/event"
)

// arrivals are the tenants that came to this placement by a move
// (tenant_arrivals, migration 015): their events up to through are copies
// of history the process managers of the placement they left have already
// decided; their state (instances, steps, deadlines, history) was copied
// with them. A runner passes those events over, so that the target never
// issues a step or an intent a second time. Through unset: the move is
// still copying, every event of the tenant here is a copy.
type arrivals map[string]*event.Position

// readArrivals reads the arrivals in tx (when need: a batch without events
// of the process's types needs none).
func readArrivals(ctx context.Context, tx pgx.Tx, need bool) (arrivals, error) {
	if !need {
		return nil, nil
	}
	rows, err := tx.Query(ctx, `SELECT tenant, through_tx::text, through_pos FROM tenant_arrivals`)
	if err != nil {
		return nil, fmt.Errorf("read the tenants arriving by a move: %w", err)
	}
	defer rows.Close()
	out := arrivals{}
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

// copied reports whether rec is a copy a move brought.
func (a arrivals) copied(rec event.Record) bool {
	through, ok := a[rec.Tenant]
	if !ok {
		return false
	}
	return through == nil || !through.Less(rec.Position)
}
