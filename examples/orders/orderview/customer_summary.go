package orderview

import (
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/projections"
)

// CustomerSummaryName is the checkpoint key of CustomerSummaries.
const CustomerSummaryName = "customer_summary"

// CustomerSummaryTables names the tables CustomerSummaries writes; empty
// fields take the live names.
type CustomerSummaryTables struct {
	Summaries  string // default "customer_summaries": orders and open orders per customer
	PaidTotals string // default "customer_paid_totals": paid amount per customer and currency
	Orders     string // default "customer_orders": the projection's order -> customer lookup
}

// CustomerSummaries counts each customer's orders and open orders (draft or
// placed) and sums what they paid per currency. The counters are
// increments: they are exactly right because each event's increment
// commits together with the checkpoint, once. A paid total is a numeric
// column and every sum is PostgreSQL's (sum of bigint is numeric): one
// order's amount fits an int64, a customer's sum over orders need not, and
// both paths must add it exactly (migration 006).
type CustomerSummaries struct {
	tables                                       CustomerSummaryTables
	create, pay, cancel                          string
	lookupBatch, openBatch, closeBatch, payBatch string
}

// NewCustomerSummaries returns the projection writing into t.
func NewCustomerSummaries(t CustomerSummaryTables) *CustomerSummaries {
	if t.Summaries == "" {
		t.Summaries = "customer_summaries"
	}
	if t.PaidTotals == "" {
		t.PaidTotals = "customer_paid_totals"
	}
	if t.Orders == "" {
		t.Orders = "customer_orders"
	}
	s, p, o := projections.Ident(t.Summaries), projections.Ident(t.PaidTotals), projections.Ident(t.Orders)
	return &CustomerSummaries{
		tables: t,
		create: fmt.Sprintf(`WITH lookup AS (
    INSERT INTO %[3]s (tenant_id, order_id, customer_id) VALUES ($1, $2, $3))
INSERT INTO %[1]s AS s (tenant_id, customer_id, orders, open_orders) VALUES ($1, $3, 1, 1)
ON CONFLICT (tenant_id, customer_id) DO UPDATE SET orders = s.orders + 1, open_orders = s.open_orders + 1`, s, p, o),
		// order.paid does not name the customer: the lookup does.
		pay: fmt.Sprintf(`WITH o AS (
    SELECT customer_id FROM %[3]s WHERE tenant_id = $1 AND order_id = $2),
closed AS (
    UPDATE %[1]s s SET open_orders = s.open_orders - 1 FROM o
    WHERE s.tenant_id = $1 AND s.customer_id = o.customer_id)
INSERT INTO %[2]s AS p (tenant_id, customer_id, currency, amount)
SELECT $1, o.customer_id, $3, $4::bigint FROM o
ON CONFLICT (tenant_id, customer_id, currency) DO UPDATE SET amount = p.amount + EXCLUDED.amount`, s, p, o),
		cancel: fmt.Sprintf(`UPDATE %[1]s s SET open_orders = s.open_orders - 1 FROM %[2]s o
WHERE o.tenant_id = $1 AND o.order_id = $2 AND s.tenant_id = $1 AND s.customer_id = o.customer_id`, s, o),
		lookupBatch: fmt.Sprintf(`INSERT INTO %s (tenant_id, order_id, customer_id)
SELECT $1, u.order_id, u.customer_id FROM unnest($2::text[], $3::text[]) AS u(order_id, customer_id)`, o),
		openBatch: fmt.Sprintf(`INSERT INTO %s AS s (tenant_id, customer_id, orders, open_orders)
SELECT $1, u.customer_id, u.n, u.n FROM unnest($2::text[], $3::bigint[]) AS u(customer_id, n)
ON CONFLICT (tenant_id, customer_id) DO UPDATE SET orders = s.orders + EXCLUDED.orders, open_orders = s.open_orders + EXCLUDED.open_orders`, s),
		// Runs after lookupBatch of the same batch, so orders created and
		// closed within one batch find their customer.
		// Rows are found by key (keyed plans, handler.go) and updated by ctid.
		closeBatch: fmt.Sprintf(`WITH closed AS (
    SELECT o.customer_id, count(*) AS n
    FROM unnest($2::text[]) AS u(order_id)
    CROSS JOIN LATERAL (SELECT customer_id FROM %[2]s k WHERE k.tenant_id = $1 AND k.order_id = u.order_id OFFSET 0) o
    GROUP BY o.customer_id)
UPDATE %[1]s s SET open_orders = s.open_orders - closed.n
FROM closed CROSS JOIN LATERAL (SELECT ctid AS tid FROM %[1]s k WHERE k.tenant_id = $1 AND k.customer_id = closed.customer_id OFFSET 0) k
WHERE s.ctid = k.tid
RETURNING closed.n`, s, o),
		payBatch: fmt.Sprintf(`INSERT INTO %[1]s AS p (tenant_id, customer_id, currency, amount)
SELECT $1, o.customer_id, u.currency, sum(u.amount)
FROM unnest($2::text[], $3::text[], $4::bigint[]) AS u(order_id, currency, amount)
CROSS JOIN LATERAL (SELECT customer_id FROM %[2]s k WHERE k.tenant_id = $1 AND k.order_id = u.order_id OFFSET 0) o
GROUP BY o.customer_id, u.currency
ON CONFLICT (tenant_id, customer_id, currency) DO UPDATE SET amount = p.amount + EXCLUDED.amount`, p, o),
	}
}

// Name implements Projection.
func (p *CustomerSummaries) Name() string { return CustomerSummaryName }

// EventTypes implements Projection.
func (p *CustomerSummaries) EventTypes() []string {
	return []string{order.TypeCreated, order.TypePaid, order.TypeCancelled}
}

// Tables implements Projection.
func (p *CustomerSummaries) Tables() []string {
	return []string{p.tables.Summaries, p.tables.PaidTotals, p.tables.Orders}
}

// Apply implements Projection.
func (p *CustomerSummaries) Apply(b *pgx.Batch, ev projections.Event) error {
	id, err := orderID(ev)
	if err != nil {
		return err
	}
	switch e := ev.Payload.(type) {
	case order.Created:
		b.Queue(p.create, ev.Tenant, id, e.CustomerID)
	case order.Paid:
		projections.ExpectOne(b.Queue(p.pay, ev.Tenant, id, e.Amount.Currency, e.Amount.Amount), "customer of order", id)
	case order.Cancelled:
		projections.ExpectOne(b.Queue(p.cancel, ev.Tenant, id), "customer of order", id)
	default:
		return projections.Unexpected(ev)
	}
	return nil
}

// ApplyBatch implements BatchProjection: the lookup rows of the batch's new
// orders, then the counters and paid totals summed per customer (and
// currency), each in one statement.
func (p *CustomerSummaries) ApplyBatch(b *pgx.Batch, evs []projections.Event) error {
	var newOrders, newCustomers []string
	opened := map[string]int64{}
	var customers []string
	var closed, paidOrders, paidCurrencies []string
	var paidAmounts []int64
	for _, ev := range evs {
		id, err := orderID(ev)
		if err != nil {
			return err
		}
		switch e := ev.Payload.(type) {
		case order.Created:
			newOrders, newCustomers = append(newOrders, id), append(newCustomers, e.CustomerID)
			if _, ok := opened[e.CustomerID]; !ok {
				customers = append(customers, e.CustomerID)
			}
			opened[e.CustomerID]++
		case order.Paid:
			closed = append(closed, id)
			paidOrders, paidCurrencies, paidAmounts = append(paidOrders, id), append(paidCurrencies, e.Amount.Currency), append(paidAmounts, e.Amount.Amount)
		case order.Cancelled:
			closed = append(closed, id)
		default:
			return projections.Unexpected(ev)
		}
	}
	tenant := evs[0].Tenant
	if len(newOrders) > 0 {
		counts := make([]int64, len(customers))
		for i, c := range customers {
			counts[i] = opened[c]
		}
		b.Queue(p.lookupBatch, tenant, newOrders, newCustomers)
		b.Queue(p.openBatch, tenant, customers, counts)
	}
	if len(closed) > 0 {
		// Every closed order must find its customer in the lookup: the
		// statement returns how many did.
		want := int64(len(closed))
		b.Queue(p.closeBatch, tenant, closed).Query(func(rows pgx.Rows) error {
			var got int64
			for rows.Next() {
				var n int64
				if err := rows.Scan(&n); err != nil {
					return err
				}
				got += n
			}
			if err := rows.Err(); err != nil {
				return err
			}
			if got != want {
				return fmt.Errorf("%w: customers of %d closed orders found for %d", projections.ErrMissingRow, want, got)
			}
			return nil
		})
	}
	if len(paidOrders) > 0 {
		b.Queue(p.payBatch, tenant, paidOrders, paidCurrencies, paidAmounts)
	}
	return nil
}
