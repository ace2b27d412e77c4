package orderview

import (
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain/money"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/projections"
)

// OrderDetailsName is the checkpoint key of OrderDetails.
const OrderDetailsName = "order_details"

// OrderDetailsTables names the tables OrderDetails writes; empty fields
// take the live names.
type OrderDetailsTables struct {
	Orders string // default "order_details": one row per order
	Lines  string // default "order_detail_lines": one row per product on an order
}

// OrderDetails projects each order with its status, lines, line totals,
// order total, timestamps and stream version: what GET /v1/orders/{id}
// answers.
type OrderDetails struct {
	tables                                          OrderDetailsTables
	create, addLine, removeLine, place, pay, cancel string
	createBatch, removeBatch, addBatch, updateBatch string
}

// NewOrderDetails returns the projection writing into t.
func NewOrderDetails(t OrderDetailsTables) *OrderDetails {
	if t.Orders == "" {
		t.Orders = "order_details"
	}
	if t.Lines == "" {
		t.Lines = "order_detail_lines"
	}
	o, l := projections.Ident(t.Orders), projections.Ident(t.Lines)
	return &OrderDetails{
		tables: t,
		create: fmt.Sprintf(`INSERT INTO %s (tenant_id, order_id, customer_id, status, currency, total_amount, version, created_at)
VALUES ($1, $2, $3, 'draft', $4, 0, $5, $6)`, o),
		// A product already on the order keeps its line (and its place in
		// the list); the aggregate guarantees the unit price is the same.
		addLine: fmt.Sprintf(`WITH line AS (
    INSERT INTO %[2]s AS l (tenant_id, order_id, product_id, seq, quantity, unit_price, currency, line_total)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $5::bigint * $6::bigint)
    ON CONFLICT (tenant_id, order_id, product_id) DO UPDATE
    SET quantity = l.quantity + EXCLUDED.quantity, line_total = (l.quantity + EXCLUDED.quantity) * l.unit_price
    RETURNING 1)
UPDATE %[1]s SET total_amount = total_amount + $5::bigint * $6::bigint, version = $4
WHERE tenant_id = $1 AND order_id = $2`, o, l),
		removeLine: fmt.Sprintf(`WITH line AS (
    DELETE FROM %[2]s WHERE tenant_id = $1 AND order_id = $2 AND product_id = $3 RETURNING line_total)
UPDATE %[1]s SET total_amount = total_amount - coalesce((SELECT line_total FROM line), 0), version = $4
WHERE tenant_id = $1 AND order_id = $2`, o, l),
		place: fmt.Sprintf(`UPDATE %s SET status = 'placed', placed_at = $3, total_amount = $4, version = $5
WHERE tenant_id = $1 AND order_id = $2`, o),
		pay: fmt.Sprintf(`UPDATE %s SET status = 'paid', paid_at = $3, version = $4
WHERE tenant_id = $1 AND order_id = $2`, o),
		cancel: fmt.Sprintf(`UPDATE %s SET status = 'cancelled', cancelled_at = $3, version = $4
WHERE tenant_id = $1 AND order_id = $2`, o),
		createBatch: fmt.Sprintf(`INSERT INTO %s (tenant_id, order_id, customer_id, status, currency, total_amount, version,
    created_at, placed_at, paid_at, cancelled_at)
SELECT $1, u.order_id, u.customer_id, u.status, u.currency, u.total, u.version, u.created_at, u.placed_at, u.paid_at, u.cancelled_at
FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::bigint[], $8::timestamptz[], $9::timestamptz[],
            $10::timestamptz[], $11::timestamptz[])
    AS u(order_id, customer_id, status, currency, total, version, created_at, placed_at, paid_at, cancelled_at)`, o),
		// Rows are found by key (keyed plans, handler.go) and changed by ctid.
		removeBatch: fmt.Sprintf(`DELETE FROM %[1]s l USING unnest($2::text[], $3::text[]) AS u(order_id, product_id)
CROSS JOIN LATERAL (SELECT ctid AS tid FROM %[1]s k WHERE k.tenant_id = $1 AND k.order_id = u.order_id AND k.product_id = u.product_id OFFSET 0) k
WHERE l.ctid = k.tid`, l),
		addBatch: fmt.Sprintf(`INSERT INTO %s AS l (tenant_id, order_id, product_id, seq, quantity, unit_price, currency, line_total)
SELECT $1, u.order_id, u.product_id, u.seq, u.qty, u.unit, u.currency, u.qty * u.unit
FROM unnest($2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[], $7::text[]) AS u(order_id, product_id, seq, qty, unit, currency)
ON CONFLICT (tenant_id, order_id, product_id) DO UPDATE
SET quantity = l.quantity + EXCLUDED.quantity, line_total = (l.quantity + EXCLUDED.quantity) * l.unit_price`, l),
		// Runs after the line statements of the same batch. An empty status
		// means the batch did not change it.
		updateBatch: fmt.Sprintf(`UPDATE %[1]s d SET
    status = coalesce(nullif(u.status, ''), d.status),
    placed_at = coalesce(u.placed_at, d.placed_at),
    paid_at = coalesce(u.paid_at, d.paid_at),
    cancelled_at = coalesce(u.cancelled_at, d.cancelled_at),
    version = u.version,
    total_amount = CASE
        WHEN u.total IS NOT NULL THEN u.total
        WHEN u.lines_changed THEN coalesce((SELECT sum(l.line_total) FROM %[2]s l WHERE l.tenant_id = $1 AND l.order_id = d.order_id), 0)
        ELSE d.total_amount END
FROM unnest($2::text[], $3::text[], $4::timestamptz[], $5::timestamptz[], $6::timestamptz[], $7::bigint[], $8::bigint[], $9::bool[])
    AS u(order_id, status, placed_at, paid_at, cancelled_at, version, total, lines_changed)
CROSS JOIN LATERAL (SELECT ctid AS tid FROM %[1]s k WHERE k.tenant_id = $1 AND k.order_id = u.order_id OFFSET 0) k
WHERE d.ctid = k.tid`, o, l),
	}
}

// Name implements Projection.
func (p *OrderDetails) Name() string { return OrderDetailsName }

// Partitionable implements projections.Partitionable: every row follows
// one order's events.
func (p *OrderDetails) Partitionable() {}

// EventTypes implements Projection: every order event.
func (p *OrderDetails) EventTypes() []string {
	return []string{order.TypeCreated, order.TypeLineAdded, order.TypeLineRemoved, order.TypePlaced, order.TypePaid, order.TypeCancelled}
}

// Tables implements Projection.
func (p *OrderDetails) Tables() []string { return []string{p.tables.Orders, p.tables.Lines} }

// Apply implements Projection. Every event sets the order's version to the
// event's stream version.
func (p *OrderDetails) Apply(b *pgx.Batch, ev projections.Event) error {
	id, err := orderID(ev)
	if err != nil {
		return err
	}
	switch e := ev.Payload.(type) {
	case order.Created:
		b.Queue(p.create, ev.Tenant, id, e.CustomerID, e.Currency, ev.Version, e.At)
	case order.LineAdded:
		projections.ExpectOne(b.Queue(p.addLine, ev.Tenant, id, e.ProductID, ev.Version, e.Quantity, e.UnitPrice.Amount, e.UnitPrice.Currency), "order", id)
	case order.LineRemoved:
		projections.ExpectOne(b.Queue(p.removeLine, ev.Tenant, id, e.ProductID, ev.Version), "order", id)
	case order.Placed:
		projections.ExpectOne(b.Queue(p.place, ev.Tenant, id, e.At, e.Total.Amount, ev.Version), "order", id)
	case order.Paid:
		projections.ExpectOne(b.Queue(p.pay, ev.Tenant, id, e.At, ev.Version), "order", id)
	case order.Cancelled:
		projections.ExpectOne(b.Queue(p.cancel, ev.Tenant, id, e.At, ev.Version), "order", id)
	default:
		return projections.Unexpected(ev)
	}
	return nil
}

// linePatch is what a batch does to one product line of an order.
type linePatch struct {
	product  string
	deleted  bool  // the line was removed in the batch (before the adds below)
	qty      int64 // quantity added after the last removal
	seq      int64 // version of the first of those adds (used if the line is new)
	unit     int64
	currency string
}

// ApplyBatch implements BatchProjection. Each order's events of the batch
// fold into one patch. An order created in the batch is inserted with its
// final state (all its events are in the batch, so its total is known);
// for the others, removed lines are deleted, added quantities upserted per
// line, and the order gets its final status, timestamps and version, and
// its total (the placed total if it was placed, otherwise recomputed from
// its lines when they changed).
func (p *OrderDetails) ApplyBatch(b *pgx.Batch, evs []projections.Event) error {
	runs, err := byOrder(evs)
	if err != nil {
		return err
	}
	var ins struct {
		ids, customers, statuses, currencies []string
		totals, versions                     []int64
		created                              []time.Time
		placed, paid, cancels                []*time.Time
	}
	var del struct{ ids, products []string }
	var add struct {
		ids, products, currencies []string
		seqs, qtys, units         []int64
	}
	var upd struct {
		ids, statuses         []string
		placed, paid, cancels []*time.Time
		versions              []int64
		totals                []*int64
		linesChanged          []bool
	}
	for _, run := range runs {
		var created *order.Created
		var status string
		var placedAt, paidAt, cancelledAt *time.Time
		var total *int64
		var version int64
		lines := map[string]*linePatch{}
		var products []string
		line := func(product string) *linePatch {
			l := lines[product]
			if l == nil {
				l = &linePatch{product: product}
				lines[product] = l
				products = append(products, product)
			}
			return l
		}
		for _, ev := range run.evs {
			version = ev.Version
			switch e := ev.Payload.(type) {
			case order.Created:
				created, status = &e, string(order.StatusDraft)
			case order.LineAdded:
				l := line(e.ProductID)
				if l.qty == 0 {
					l.seq, l.unit, l.currency = ev.Version, e.UnitPrice.Amount, e.UnitPrice.Currency
				}
				l.qty += e.Quantity
			case order.LineRemoved:
				l := line(e.ProductID)
				l.deleted, l.qty = true, 0
			case order.Placed:
				amount := e.Total.Amount
				status, placedAt, total = string(order.StatusPlaced), timePtr(e.At), &amount
			case order.Paid:
				status, paidAt = string(order.StatusPaid), timePtr(e.At)
			case order.Cancelled:
				status, cancelledAt = string(order.StatusCancelled), timePtr(e.At)
			default:
				return projections.Unexpected(ev)
			}
		}
		sum := money.Money{} // overflow-checked, like the SQL it mirrors
		for _, product := range products {
			l := lines[product]
			if l.deleted && created == nil {
				del.ids, del.products = append(del.ids, run.id), append(del.products, product)
			}
			if l.qty > 0 {
				add.ids, add.products, add.currencies = append(add.ids, run.id), append(add.products, product), append(add.currencies, l.currency)
				add.seqs, add.qtys, add.units = append(add.seqs, l.seq), append(add.qtys, l.qty), append(add.units, l.unit)
				lt, err := money.Money{Amount: l.unit}.Mul(l.qty)
				if err == nil {
					sum, err = sum.Add(lt)
				}
				if err != nil {
					return fmt.Errorf("order %s: line totals: %w", run.id, err)
				}
			}
		}
		if created != nil {
			if total == nil {
				total = &sum.Amount
			}
			ins.ids, ins.customers, ins.statuses, ins.currencies = append(ins.ids, run.id), append(ins.customers, created.CustomerID),
				append(ins.statuses, status), append(ins.currencies, created.Currency)
			ins.totals, ins.versions, ins.created = append(ins.totals, *total), append(ins.versions, version), append(ins.created, created.At)
			ins.placed, ins.paid, ins.cancels = append(ins.placed, placedAt), append(ins.paid, paidAt), append(ins.cancels, cancelledAt)
			continue
		}
		upd.ids, upd.versions, upd.totals = append(upd.ids, run.id), append(upd.versions, version), append(upd.totals, total)
		upd.statuses = append(upd.statuses, status) // "" when unchanged
		upd.placed, upd.paid, upd.cancels = append(upd.placed, placedAt), append(upd.paid, paidAt), append(upd.cancels, cancelledAt)
		upd.linesChanged = append(upd.linesChanged, len(products) > 0)
	}
	tenant := evs[0].Tenant
	if len(ins.ids) > 0 {
		b.Queue(p.createBatch, tenant, ins.ids, ins.customers, ins.statuses, ins.currencies, ins.totals, ins.versions,
			ins.created, ins.placed, ins.paid, ins.cancels)
	}
	if len(del.ids) > 0 {
		b.Queue(p.removeBatch, tenant, del.ids, del.products)
	}
	if len(add.ids) > 0 {
		b.Queue(p.addBatch, tenant, add.ids, add.products, add.seqs, add.qtys, add.units, add.currencies)
	}
	if len(upd.ids) > 0 {
		projections.ExpectRows(b.Queue(p.updateBatch, tenant, upd.ids, upd.statuses, upd.placed, upd.paid, upd.cancels, upd.versions, upd.totals, upd.linesChanged),
			int64(len(upd.ids)), "orders")
	}
	return nil
}
