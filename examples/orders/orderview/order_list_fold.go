package orderview

import (
	"fmt"
	"time"

	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/projections"
)

var _ projections.Folder = (*OrderList)(nil)

// NewFold implements projections.Folder: OrderList's rows folded in
// memory, for a rebuild to COPY into its configured table.
func (p *OrderList) NewFold() projections.Fold {
	return &orderListFold{tables: p.tables, orders: map[orderKey]*listRow{}}
}

// orderListFold holds the rows Apply's statements would leave in
// order_list (see Apply's SQL in order_list.go).
type orderListFold struct {
	tables OrderListTables
	orders map[orderKey]*listRow
}

// listRow is one order_list row.
type listRow struct {
	key                        orderKey
	customer, status, currency string
	total                      int64 // NULL until placed
	hasTotal                   bool
	created, updated           time.Time
}

func (f *orderListFold) Add(ev projections.Event) error {
	id, err := orderID(ev)
	if err != nil {
		return err
	}
	k := orderKey{ev.Tenant, id}
	switch e := ev.Payload.(type) {
	case order.Created:
		// INSERT without ON CONFLICT: a second Created is a duplicate key.
		if f.orders[k] != nil {
			return fmt.Errorf("order_list: order %q of tenant %s exists (duplicate key)", id, ev.Tenant)
		}
		if err := firstErr(checkTenant(ev.Tenant), checkText(id, e.CustomerID, e.Currency)); err != nil {
			return err
		}
		f.orders[k] = &listRow{key: k, customer: e.CustomerID, status: string(order.StatusDraft), currency: e.Currency,
			created: e.At, updated: e.At}
	case order.Placed:
		o := f.orders[k]
		if o == nil {
			return missingRow("order", id)
		}
		o.status, o.total, o.hasTotal, o.updated = string(order.StatusPlaced), e.Total.Amount, true, e.At
	case order.Paid:
		o := f.orders[k]
		if o == nil {
			return missingRow("order", id)
		}
		o.status, o.updated = string(order.StatusPaid), e.At
	case order.Cancelled:
		o := f.orders[k]
		if o == nil {
			return missingRow("order", id)
		}
		o.status, o.updated = string(order.StatusCancelled), e.At
	default:
		return projections.Unexpected(ev)
	}
	return nil
}

func (f *orderListFold) Rows() int { return len(f.orders) }

func (f *orderListFold) Tables() []projections.FoldedTable {
	return appendFolded(nil, f.tables.Orders, []string{"tenant_id", "order_id", "customer_id", "status", "currency",
		"total_amount", "created_at", "updated_at"}, f.orders,
		func(o *listRow) []any {
			var total any // NULL
			if o.hasTotal {
				total = o.total
			}
			return []any{o.key.tenant, o.key.order, o.customer, o.status, o.currency, total, o.created, o.updated}
		})
}
