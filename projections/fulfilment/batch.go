package fulfilment

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain/inventory"
	"github.com/strata-es/strata/domain/order"
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
		if _, ok := inventory.SKUFromStream(ev.Stream); ok {
			var op *orderPatch
			switch e := ev.Payload.(type) {
			case inventory.Reserved:
				op = patch(e.ReservationID)
				op.reserved++
				op.at = e.At
			case inventory.Released:
				op = patch(e.ReservationID)
				op.released++
				op.at = e.At
			case inventory.Committed:
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

	var cr struct {
		ids, currencies []string
		versions, poss  []int64
		ats             []time.Time
	}
	var or struct {
		ids                         []string
		patches                     [][]byte
		statuses, refs, reasons     []*string
		setTotal, setRef, setReason []bool
		totals                      []*int64
		versions                    []int64
	}
	var st struct {
		ids      []string
		r, rl, c []int32
	}
	var rs struct {
		ids  []string
		ats  []time.Time
		poss []int64
	}
	for _, id := range ids {
		op := patches[id]
		if c := op.created; c != nil {
			cr.ids, cr.currencies = append(cr.ids, id), append(cr.currencies, c.Currency)
			cr.versions, cr.poss, cr.ats = append(cr.versions, op.createdVersion), append(cr.poss, op.createdPos), append(cr.ats, op.createdAt)
		}
		if op.orderEvents {
			var raw []byte
			if op.lines != nil {
				var err error
				if raw, err = json.Marshal(op.lines); err != nil {
					return err
				}
			}
			or.ids, or.patches, or.statuses = append(or.ids, id), append(or.patches, raw), append(or.statuses, op.status)
			or.setTotal, or.totals = append(or.setTotal, op.setTotal), append(or.totals, op.total)
			or.setRef, or.refs = append(or.setRef, op.setRef), append(or.refs, op.ref)
			or.setReason, or.reasons = append(or.setReason, op.setReason), append(or.reasons, op.reason)
			or.versions = append(or.versions, op.version)
		}
		if op.stock {
			st.ids = append(st.ids, id)
			st.r, st.rl, st.c = append(st.r, op.reserved), append(st.rl, op.released), append(st.c, op.committed)
		}
		rs.ids, rs.ats, rs.poss = append(rs.ids, id), append(rs.ats, op.at), append(rs.poss, op.pos)
	}
	if len(cr.ids) > 0 {
		b.Queue(p.batchCreated, tenant, cr.ids, cr.currencies, cr.versions, cr.ats, cr.poss)
	}
	if len(or.ids) > 0 {
		// Every order an order event names must exist (Apply's ExpectOne).
		patchesText := make([]*string, len(or.patches))
		for i, raw := range or.patches {
			if raw != nil {
				s := string(raw)
				patchesText[i] = &s
			}
		}
		projections.ExpectRows(b.Queue(p.batchOrders, tenant, or.ids, patchesText, or.statuses, or.setTotal, or.totals, or.setRef, or.refs,
			or.setReason, or.reasons, or.versions), int64(len(or.ids)), "orders")
	}
	if len(st.ids) > 0 {
		b.Queue(p.batchStock, tenant, st.ids, st.r, st.rl, st.c)
	}
	b.Queue(p.batchRestage, tenant, rs.ids, rs.ats, rs.poss)
	return nil
}
