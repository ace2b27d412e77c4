package orderview

import (
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/projections"
)

// OrderListName is the checkpoint key of OrderList.
const OrderListName = "order_list"

// OrderListTables names the table OrderList writes; empty takes the live
// name.
type OrderListTables struct {
	Orders string // default "order_list"
}

// OrderList projects what listing and filtering orders needs: customer,
// status, currency, the total once placed, and the creation and last
// status-change times. Line events do not change the list.
type OrderList struct {
	tables                      OrderListTables
	create, place, changeStatus string
	createBatch, updateBatch    string
}

// NewOrderList returns the projection writing into t.
func NewOrderList(t OrderListTables) *OrderList {
	if t.Orders == "" {
		t.Orders = "order_list"
	}
	o := projections.Ident(t.Orders)
	return &OrderList{
		tables: t,
		create: fmt.Sprintf(`INSERT INTO %s (tenant_id, order_id, customer_id, status, currency, total_amount, created_at, updated_at)
VALUES ($1, $2, $3, 'draft', $4, NULL, $5, $5)`, o),
		place: fmt.Sprintf(`UPDATE %s SET status = 'placed', total_amount = $3, updated_at = $4
WHERE tenant_id = $1 AND order_id = $2`, o),
		changeStatus: fmt.Sprintf(`UPDATE %s SET status = $3, updated_at = $4
WHERE tenant_id = $1 AND order_id = $2`, o),
		createBatch: fmt.Sprintf(`INSERT INTO %s (tenant_id, order_id, customer_id, status, currency, total_amount, created_at, updated_at)
SELECT $1, u.order_id, u.customer_id, u.status, u.currency, u.total, u.created_at, u.updated_at
FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::timestamptz[], $8::timestamptz[])
    AS u(order_id, customer_id, status, currency, total, created_at, updated_at)`, o),
		// Rows are found by key (keyed plans, handler.go) and updated by ctid.
		updateBatch: fmt.Sprintf(`UPDATE %[1]s o SET status = u.status, total_amount = coalesce(u.total, o.total_amount), updated_at = u.updated_at
FROM unnest($2::text[], $3::text[], $4::bigint[], $5::timestamptz[]) AS u(order_id, status, total, updated_at)
CROSS JOIN LATERAL (SELECT ctid AS tid FROM %[1]s k WHERE k.tenant_id = $1 AND k.order_id = u.order_id OFFSET 0) k
WHERE o.ctid = k.tid`, o),
	}
}

// Name implements Projection.
func (p *OrderList) Name() string { return OrderListName }

// Partitionable implements projections.Partitionable: every row follows
// one order's events.
func (p *OrderList) Partitionable() {}

// EventTypes implements Projection.
func (p *OrderList) EventTypes() []string {
	return []string{order.TypeCreated, order.TypePlaced, order.TypePaid, order.TypeCancelled}
}

// Tables implements Projection.
func (p *OrderList) Tables() []string { return []string{p.tables.Orders} }

// Apply implements Projection.
func (p *OrderList) Apply(b *pgx.Batch, ev projections.Event) error {
	id, err := orderID(ev)
	if err != nil {
		return err
	}
	switch e := ev.Payload.(type) {
	case order.Created:
		b.Queue(p.create, ev.Tenant, id, e.CustomerID, e.Currency, e.At)
	case order.Placed:
		projections.ExpectOne(b.Queue(p.place, ev.Tenant, id, e.Total.Amount, e.At), "order", id)
	case order.Paid:
		projections.ExpectOne(b.Queue(p.changeStatus, ev.Tenant, id, string(order.StatusPaid), e.At), "order", id)
	case order.Cancelled:
		projections.ExpectOne(b.Queue(p.changeStatus, ev.Tenant, id, string(order.StatusCancelled), e.At), "order", id)
	default:
		return projections.Unexpected(ev)
	}
	return nil
}

// ApplyBatch implements BatchProjection. Each order's events of the batch
// fold into its final list row: one insert for the orders created in the
// batch, one update for the others.
func (p *OrderList) ApplyBatch(b *pgx.Batch, evs []projections.Event) error {
	runs, err := byOrder(evs)
	if err != nil {
		return err
	}
	var ins struct {
		ids, customers, statuses, currencies []string
		totals                               []*int64
		created, updated                     []time.Time
	}
	var upd struct {
		ids, statuses []string
		totals        []*int64
		updated       []time.Time
	}
	for _, run := range runs {
		var created bool
		var customer, currency, status string
		var total *int64
		var createdAt, updatedAt time.Time
		for _, ev := range run.evs {
			switch e := ev.Payload.(type) {
			case order.Created:
				created, customer, currency, status, createdAt, updatedAt = true, e.CustomerID, e.Currency, string(order.StatusDraft), e.At, e.At
			case order.Placed:
				amount := e.Total.Amount
				status, total, updatedAt = string(order.StatusPlaced), &amount, e.At
			case order.Paid:
				status, updatedAt = string(order.StatusPaid), e.At
			case order.Cancelled:
				status, updatedAt = string(order.StatusCancelled), e.At
			default:
				return projections.Unexpected(ev)
			}
		}
		if created {
			ins.ids = append(ins.ids, run.id)
			ins.customers = append(ins.customers, customer)
			ins.statuses = append(ins.statuses, status)
			ins.currencies = append(ins.currencies, currency)
			ins.totals = append(ins.totals, total)
			ins.created = append(ins.created, createdAt)
			ins.updated = append(ins.updated, updatedAt)
		} else {
			upd.ids = append(upd.ids, run.id)
			upd.statuses = append(upd.statuses, status)
			upd.totals = append(upd.totals, total)
			upd.updated = append(upd.updated, updatedAt)
		}
	}
	tenant := evs[0].Tenant
	if len(ins.ids) > 0 {
		b.Queue(p.createBatch, tenant, ins.ids, ins.customers, ins.statuses, ins.currencies, ins.totals, ins.created, ins.updated)
	}
	if len(upd.ids) > 0 {
		projections.ExpectRows(b.Queue(p.updateBatch, tenant, upd.ids, upd.statuses, upd.totals, upd.updated), int64(len(upd.ids)), "orders")
	}
	return nil
}
