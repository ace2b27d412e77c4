package fulfilview

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/examples/inventory/stock"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/projections"
)

// linePatch is what a batch did to one line of an order: reset (removed,
// perhaps added again after) and the quantity added since.
type linePatch struct {
	Reset bool  `json:"reset"`
	Add   int64 `json:"add"`
}

// orderPatch folds one order's order events of a batch.
type orderPatch struct {
	lines                         map[string]*linePatch
	status                        *string
	setTotal, setRef, setReason   bool
	total                         *int64
	ref, reason                   *string
	version                       int64
	created                       *order.Created
	createdVersion, createdPos    int64
	createdAt                     time.Time
	reserved, released, committed int32
	stock, orderEvents            bool
	at                            time.Time // the last event touching the row
	pos                           int64
}

// ApplyBatch implements projections.BatchProjection: a tenant's batch in
// four statements (new orders, order changes, stock counts, stages), each
// over arrays, with exactly the rows Apply makes event by event.
func (p *OrderFulfilment) ApplyBatch(b *pgx.Batch, evs []projections.Event) error {
	if len(evs) == 0 {
		return nil
	}
	tenant := evs[0].Tenant
	patches := map[string]*orderPatch{}
	var ids []string
	patch := func(id string) *orderPatch {
		op := patches[id]
		if op == nil {
			op = &orderPatch{}
			patches[id] = op
			ids = append(ids, id)
		}
		return op
	}
	for _, ev := range evs {
		pos := int64(ev.Position.Minor)
		if _, ok := stock.SKUFromStream(ev.Stream); ok {
			var op *orderPatch
			switch e := ev.Payload.(type) {
			case stock.Reserved:
				op = patch(e.ReservationID)
				op.reserved++
				op.at = e.At
			case stock.Released:
				op = patch(e.ReservationID)
				op.released++
				op.at = e.At
			case stock.Committed:
				op = patch(e.ReservationID)
				op.committed++
				op.at = e.At
			default:
				return projections.Unexpected(ev)
			}
			op.stock, op.pos = true, pos
			continue
		}
		id, ok := order.OrderIDFromStream(ev.Stream)
		if !ok {
			return fmt.Errorf("%w: stream %q is neither an order nor an inventory stream", projections.ErrUnexpectedEvent, ev.Stream)
		}
		op := patch(id)
		op.pos = pos
		set := func(status string) { op.status = &status }
		switch e := ev.Payload.(type) {
		case order.Created:
			if op.created != nil || op.orderEvents {
				return fmt.Errorf("%w: order %q created after other events in one batch", projections.ErrUnexpectedEvent, id)
			}
			op.created, op.createdVersion, op.createdPos, op.createdAt, op.at = &e, ev.Version, pos, e.At, e.At
			// Stock events before the order existed changed no row (Apply's
			// UPDATE matched nothing).
			op.reserved, op.released, op.committed, op.stock = 0, 0, 0, false
			continue
		case order.LineAdded:
			if op.lines == nil {
				op.lines = map[string]*linePatch{}
			}
			l := op.lines[e.ProductID]
			if l == nil {
				l = &linePatch{}
				op.lines[e.ProductID] = l
			}
			l.Add += e.Quantity
			op.at = e.At
		case order.LineRemoved:
			if op.lines == nil {
				op.lines = map[string]*linePatch{}
			}
			op.lines[e.ProductID] = &linePatch{Reset: true}
			op.at = e.At
		case order.Placed:
			amount := e.Total.Amount
			set("placed")
			op.setTotal, op.total, op.at = true, &amount, e.At
		case order.Paid:
			ref := e.PaymentReference
			set("paid")
			op.setRef, op.ref, op.at = true, &ref, e.At
		case order.Cancelled:
			set("cancelled")
			op.setReason, op.at = true, e.At
			op.reason = nil
			if e.Reason != "" {
				reason := e.Reason
				op.reason = &reason
			}
		default:
			return projections.Unexpected(ev)
		}
		op.orderEvents, op.version = true, ev.Version
	}

	var in struct {
		ids, statuses, currencies, lines []string
		r, rl, c                         []int32
		totals                           []*int64
		refs, reasons                    []*string
		versions, poss                   []int64
		ats                              []time.Time
	}
	var up struct {
		ids                         []string
		patches                     []*string
		statuses, refs, reasons     []*string
		setTotal, setRef, setReason []bool
		totals                      []*int64
		versions                    []*int64
		r, rl, c                    []int32
		ats                         []time.Time
		poss                        []int64
		orderEvents                 int
	}
	for _, id := range ids {
		op := patches[id]
		if c := op.created; c != nil {
			row, err := op.newLines()
			if err != nil {
				return err
			}
			status, version := "draft", op.createdVersion
			if op.status != nil {
				status = *op.status
			}
			if op.orderEvents {
				version = op.version
			}
			var total *int64
			var ref, reason *string
			if op.setTotal {
				total = op.total
			}
			if op.setRef {
				ref = op.ref
			}
			if op.setReason {
				reason = op.reason
			}
			in.ids, in.statuses, in.currencies, in.lines = append(in.ids, id), append(in.statuses, status), append(in.currencies, c.Currency), append(in.lines, row)
			in.r, in.rl, in.c = append(in.r, op.reserved), append(in.rl, op.released), append(in.c, op.committed)
			in.totals, in.refs, in.reasons = append(in.totals, total), append(in.refs, ref), append(in.reasons, reason)
			in.versions, in.ats, in.poss = append(in.versions, version), append(in.ats, op.at), append(in.poss, op.pos)
			continue
		}
		var patch *string
		if op.lines != nil {
			raw, err := json.Marshal(op.lines)
			if err != nil {
				return err
			}
			s := string(raw)
			patch = &s
		}
		var version *int64
		if op.orderEvents {
			v := op.version
			version = &v
			up.orderEvents++
		}
		up.ids, up.patches, up.statuses = append(up.ids, id), append(up.patches, patch), append(up.statuses, op.status)
		up.setTotal, up.totals = append(up.setTotal, op.setTotal), append(up.totals, op.total)
		up.setRef, up.refs = append(up.setRef, op.setRef), append(up.refs, op.ref)
		up.setReason, up.reasons = append(up.setReason, op.setReason), append(up.reasons, op.reason)
		up.versions = append(up.versions, version)
		up.r, up.rl, up.c = append(up.r, op.reserved), append(up.rl, op.released), append(up.c, op.committed)
		up.ats, up.poss = append(up.ats, op.at), append(up.poss, op.pos)
	}
	if len(in.ids) > 0 {
		b.Queue(p.batchInsert, tenant, in.ids, in.statuses, in.currencies, in.lines, in.r, in.rl, in.c,
			in.totals, in.refs, in.reasons, in.versions, in.ats, in.poss)
	}
	if len(up.ids) > 0 {
		want := up.orderEvents
		b.Queue(p.batchUpdate, tenant, up.ids, up.patches, up.statuses, up.setTotal, up.totals, up.setRef, up.refs,
			up.setReason, up.reasons, up.versions, up.r, up.rl, up.c, up.ats, up.poss).Query(func(rows pgx.Rows) error {
			// Every order an order event names must exist (Apply's
			// ExpectOne); a stock event's reservation may be no order.
			got := 0
			for rows.Next() {
				var byOrder bool
				if err := rows.Scan(&byOrder); err != nil {
					return err
				}
				if byOrder {
					got++
				}
			}
			if err := rows.Err(); err != nil {
				return err
			}
			if got != want {
				return fmt.Errorf("%w: orders: %d rows changed by order events, want %d", projections.ErrMissingRow, got, want)
			}
			return nil
		})
	}
	return nil
}

// newLines is the lines of an order created in the batch, as the update of
// an existing order's lines would leave '{}': a reset line left at zero is
// gone, every other line holds what was added since its last reset.
func (op *orderPatch) newLines() (string, error) {
	lines := map[string]int64{}
	for product, l := range op.lines {
		if l.Reset && l.Add == 0 {
			continue
		}
		lines[product] = l.Add
	}
	raw, err := json.Marshal(lines)
	return string(raw), err
}
