package orderview

import (
	"fmt"
	"time"

	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/projections"
)

var _ projections.Folder = (*OrderDetails)(nil)

// NewFold implements projections.Folder: OrderDetails' rows folded in
// memory, for a rebuild to COPY into its configured tables.
func (p *OrderDetails) NewFold() projections.Fold {
	return &orderDetailsFold{tables: p.tables, orders: map[orderKey]*detailRow{}, lines: map[lineKey]*lineRow{}}
}

// orderDetailsFold holds the rows Apply's statements would leave in
// order_details and order_detail_lines, with the same bigint arithmetic
// and constraints (see Apply's SQL in order_details.go).
type orderDetailsFold struct {
	tables OrderDetailsTables
	orders map[orderKey]*detailRow
	lines  map[lineKey]*lineRow
}

// detailRow is one order_details row.
type detailRow struct {
	key                        orderKey
	customer, status, currency string
	total, version             int64
	created                    time.Time
	placed, paid, cancelled    time.Time // NULL unless the has... flag is set
	hasPlaced, hasPaid         bool
	hasCancelled               bool
}

// lineKey is an order_detail_lines row's key.
type lineKey struct{ tenant, order, product string }

// lineRow is one order_detail_lines row.
type lineRow struct {
	key                   lineKey
	seq, qty, unit, total int64
	currency              string
}

// checkVersion is order_details' CHECK (version > 0): every statement
// sets the version to the event's.
func checkVersion(v int64) error {
	if v <= 0 {
		return fmt.Errorf("version %d violates the order_details version check constraint", v)
	}
	return nil
}

func (f *orderDetailsFold) Add(ev projections.Event) error {
	id, err := orderID(ev)
	if err != nil {
		return err
	}
	k := orderKey{ev.Tenant, id}
	switch e := ev.Payload.(type) {
	case order.Created:
		// INSERT without ON CONFLICT: a second Created is a duplicate key.
		if f.orders[k] != nil {
			return fmt.Errorf("order_details: order %q of tenant %s exists (duplicate key)", id, ev.Tenant)
		}
		if err := firstErr(checkTenant(ev.Tenant), checkText(id, e.CustomerID, e.Currency), checkVersion(ev.Version)); err != nil {
			return err
		}
		f.orders[k] = &detailRow{key: k, customer: e.CustomerID, status: string(order.StatusDraft), currency: e.Currency,
			version: ev.Version, created: e.At}
	case order.LineAdded:
		// The line's INSERT computes quantity * unit price and checks the
		// new row (quantity > 0) before it meets a conflict; on one it adds
		// the quantity and multiplies by the line's own unit price, keeping
		// its seq and currency. Then the order's total grows by the added
		// quantity times this event's unit price, and the order must exist.
		if err := firstErr(checkTenant(ev.Tenant), checkText(id, e.ProductID, e.UnitPrice.Currency)); err != nil {
			return err
		}
		added, err := mulInt64(e.Quantity, e.UnitPrice.Amount)
		if err != nil {
			return fmt.Errorf("order %s line %s: %w", id, e.ProductID, err)
		}
		if e.Quantity <= 0 {
			return fmt.Errorf("order %s line %s: quantity %d violates the quantity check constraint", id, e.ProductID, e.Quantity)
		}
		lk := lineKey{ev.Tenant, id, e.ProductID}
		l := f.lines[lk]
		var qty, lineTotal int64
		if l != nil {
			if qty, err = addInt64(l.qty, e.Quantity); err == nil {
				lineTotal, err = mulInt64(qty, l.unit)
			}
			if err != nil {
				return fmt.Errorf("order %s line %s: %w", id, e.ProductID, err)
			}
		}
		o := f.orders[k]
		if o == nil {
			return missingRow("order", id)
		}
		total, err := addInt64(o.total, added)
		if err != nil {
			return fmt.Errorf("order %s total: %w", id, err)
		}
		if err := checkVersion(ev.Version); err != nil {
			return err
		}
		if l == nil {
			f.lines[lk] = &lineRow{key: lk, seq: ev.Version, qty: e.Quantity, unit: e.UnitPrice.Amount, total: added,
				currency: e.UnitPrice.Currency}
		} else {
			l.qty, l.total = qty, lineTotal
		}
		o.total, o.version = total, ev.Version
	case order.LineRemoved:
		// The line goes (if it is there) and the order's total loses its
		// line total.
		if err := checkText(id, e.ProductID); err != nil {
			return err
		}
		o := f.orders[k]
		if o == nil {
			return missingRow("order", id)
		}
		lk := lineKey{ev.Tenant, id, e.ProductID}
		var removed int64
		if l := f.lines[lk]; l != nil {
			removed = l.total
		}
		total, err := subInt64(o.total, removed)
		if err != nil {
			return fmt.Errorf("order %s total: %w", id, err)
		}
		if err := checkVersion(ev.Version); err != nil {
			return err
		}
		delete(f.lines, lk)
		o.total, o.version = total, ev.Version
	case order.Placed:
		o, err := f.order(k, ev.Version)
		if err != nil {
			return err
		}
		o.status, o.placed, o.hasPlaced, o.total, o.version = string(order.StatusPlaced), e.At, true, e.Total.Amount, ev.Version
	case order.Paid:
		o, err := f.order(k, ev.Version)
		if err != nil {
			return err
		}
		o.status, o.paid, o.hasPaid, o.version = string(order.StatusPaid), e.At, true, ev.Version
	case order.Cancelled:
		o, err := f.order(k, ev.Version)
		if err != nil {
			return err
		}
		o.status, o.cancelled, o.hasCancelled, o.version = string(order.StatusCancelled), e.At, true, ev.Version
	default:
		return projections.Unexpected(ev)
	}
	return nil
}

// order is the row a status UPDATE changes, which must exist.
func (f *orderDetailsFold) order(k orderKey, version int64) (*detailRow, error) {
	o := f.orders[k]
	if o == nil {
		return nil, missingRow("order", k.order)
	}
	return o, checkVersion(version)
}

func (f *orderDetailsFold) Rows() int { return len(f.orders) + len(f.lines) }

func (f *orderDetailsFold) Tables() []projections.FoldedTable {
	out := appendFolded(nil, f.tables.Orders, []string{"tenant_id", "order_id", "customer_id", "status", "currency",
		"total_amount", "version", "created_at", "placed_at", "paid_at", "cancelled_at"}, f.orders,
		func(o *detailRow) []any {
			return []any{o.key.tenant, o.key.order, o.customer, o.status, o.currency, o.total, o.version, o.created,
				nullTime(o.placed, o.hasPlaced), nullTime(o.paid, o.hasPaid), nullTime(o.cancelled, o.hasCancelled)}
		})
	return appendFolded(out, f.tables.Lines, []string{"tenant_id", "order_id", "product_id", "seq", "quantity", "unit_price",
		"currency", "line_total"}, f.lines,
		func(l *lineRow) []any {
			return []any{l.key.tenant, l.key.order, l.key.product, l.seq, l.qty, l.unit, l.currency, l.total}
		})
}
