package fulfilview

import (
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/examples/inventory/stock"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/projections"
)

var _ projections.Folder = (*OrderFulfilment)(nil)

// NewFold implements projections.Folder: a rebuild keeps one row per order
// in memory, changed as Apply's statements change it, and writes each
// once. The stage is derived from the final row, as the restage statement
// derives it from the row every event leaves.
func (p *OrderFulfilment) NewFold() projections.Fold {
	return &fold{table: p.tables.OrderFulfilment, rows: map[orderKey]*fulfilRow{}}
}

type orderKey struct{ tenant, id string }

type fulfilRow struct {
	tenant, id, status, currency  string
	lines                         map[string]int64
	reserved, released, committed int32
	total                         *int64
	ref, reason                   *string
	version                       int64
	at                            time.Time
	pos                           int64
}

type fold struct {
	table string
	rows  map[orderKey]*fulfilRow
	order []*fulfilRow
}

func (f *fold) Add(ev projections.Event) error {
	pos := int64(ev.Position.Minor)
	if _, ok := stock.SKUFromStream(ev.Stream); ok {
		var id string
		var at time.Time
		var counter func(r *fulfilRow) *int32
		switch e := ev.Payload.(type) {
		case stock.Reserved:
			id, at, counter = e.ReservationID, e.At, func(r *fulfilRow) *int32 { return &r.reserved }
		case stock.Released:
			id, at, counter = e.ReservationID, e.At, func(r *fulfilRow) *int32 { return &r.released }
		case stock.Committed:
			id, at, counter = e.ReservationID, e.At, func(r *fulfilRow) *int32 { return &r.committed }
		default:
			return projections.Unexpected(ev)
		}
		row := f.rows[orderKey{ev.Tenant, id}]
		if row == nil {
			return nil // a reservation that is no order of the tenant's: no row changes
		}
		c := counter(row)
		if *c == math.MaxInt32 {
			return fmt.Errorf("order %q: integer out of range", id)
		}
		*c++
		row.at, row.pos = at, pos
		return nil
	}
	id, ok := order.OrderIDFromStream(ev.Stream)
	if !ok {
		return fmt.Errorf("%w: stream %q is neither an order nor an inventory stream", projections.ErrUnexpectedEvent, ev.Stream)
	}
	k := orderKey{ev.Tenant, id}
	row := f.rows[k]
	if e, ok := ev.Payload.(order.Created); ok {
		if row != nil {
			return fmt.Errorf("%w: order %q created twice", projections.ErrUnexpectedEvent, id)
		}
		row = &fulfilRow{tenant: ev.Tenant, id: id, status: "draft", currency: e.Currency, lines: map[string]int64{},
			version: ev.Version, at: e.At, pos: pos}
		f.rows[k] = row
		f.order = append(f.order, row)
		return nil
	}
	if row == nil {
		return fmt.Errorf("%w: order %q (0 rows changed, want 1)", projections.ErrMissingRow, id)
	}
	switch e := ev.Payload.(type) {
	case order.LineAdded:
		q := row.lines[e.ProductID]
		sum := q + e.Quantity
		if (sum > q) != (e.Quantity > 0) {
			return fmt.Errorf("order %q: bigint out of range", id)
		}
		row.lines[e.ProductID], row.at = sum, e.At
	case order.LineRemoved:
		delete(row.lines, e.ProductID)
		row.at = e.At
	case order.Placed:
		amount := e.Total.Amount
		row.status, row.total, row.at = "placed", &amount, e.At
	case order.Paid:
		ref := e.PaymentReference
		row.status, row.ref, row.at = "paid", &ref, e.At
	case order.Cancelled:
		row.status, row.reason, row.at = "cancelled", nil, e.At
		if e.Reason != "" {
			reason := e.Reason
			row.reason = &reason
		}
	default:
		return projections.Unexpected(ev)
	}
	row.version, row.pos = ev.Version, pos
	return nil
}

// stage is stageOf in Go, over the final row.
func (r *fulfilRow) stage() string {
	reserved, released, committed, lines := int64(r.reserved), int64(r.released), int64(r.committed), int64(len(r.lines))
	switch {
	case r.status == "draft":
		return StageDraft
	case r.status == "cancelled":
		if reserved > released+committed {
			return StageReleasing
		}
		return StageCancelled
	case r.status == "paid" && released > 0:
		if reserved > released+committed {
			return StageReleasing
		}
		return StagePaidUnfulfilled
	case r.status == "paid":
		if committed >= lines {
			return StageCompleted
		}
		return StageCommitting
	case released > 0:
		return StageReleasing
	case reserved >= lines:
		return StageAwaitingPayment
	}
	return StageReserving
}

func (f *fold) Rows() int { return len(f.order) }

func (f *fold) Tables() []projections.FoldedTable {
	return []projections.FoldedTable{{
		Table: f.table,
		Columns: []string{"tenant_id", "order_id", "stage", "order_status", "currency", "lines", "reserved", "released", "committed",
			"total_amount", "payment_reference", "cancel_reason", "version", "updated_at", "last_position"},
		Rows: pgx.CopyFromSlice(len(f.order), func(i int) ([]any, error) {
			r := f.order[i]
			return []any{r.tenant, r.id, r.stage(), r.status, r.currency, r.lines, r.reserved, r.released, r.committed,
				r.total, r.ref, r.reason, r.version, r.at, r.pos}, nil
		}),
	}}
}
