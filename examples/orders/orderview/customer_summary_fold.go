package orderview

import (
	"fmt"
	"math/big"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/projections"
)

var _ projections.Folder = (*CustomerSummaries)(nil)

// NewFold implements projections.Folder: CustomerSummaries' rows (the
// counters, the paid totals and the order -> customer lookup) folded in
// memory, for a rebuild to COPY into its configured tables.
func (p *CustomerSummaries) NewFold() projections.Fold {
	return &customerSummaryFold{tables: p.tables, summaries: map[customerKey]*summaryRow{},
		paid: map[paidKey]*paidRow{}, lookup: map[orderKey]*lookupRow{}}
}

// customerSummaryFold holds the rows Apply's statements would leave (see
// Apply's SQL in customer_summary.go): the counters in bigint arithmetic,
// the paid totals exactly, as the numeric column adds them.
type customerSummaryFold struct {
	tables    CustomerSummaryTables
	summaries map[customerKey]*summaryRow
	paid      map[paidKey]*paidRow
	lookup    map[orderKey]*lookupRow
	scratch   big.Int
}

type customerKey struct{ tenant, customer string }

// summaryRow is one customer_summaries row.
type summaryRow struct {
	key          customerKey
	orders, open int64
}

type paidKey struct{ tenant, customer, currency string }

// paidRow is one customer_paid_totals row; amount is numeric.
type paidRow struct {
	key    paidKey
	amount big.Int
}

// lookupRow is one customer_orders row.
type lookupRow struct {
	key      orderKey
	customer string
}

func (f *customerSummaryFold) Add(ev projections.Event) error {
	id, err := orderID(ev)
	if err != nil {
		return err
	}
	k := orderKey{ev.Tenant, id}
	switch e := ev.Payload.(type) {
	case order.Created:
		// The lookup's INSERT has no ON CONFLICT: a second Created is a
		// duplicate key. The customer's counters are upserted.
		if f.lookup[k] != nil {
			return fmt.Errorf("customer_orders: order %q of tenant %s exists (duplicate key)", id, ev.Tenant)
		}
		if err := firstErr(checkTenant(ev.Tenant), checkText(id, e.CustomerID)); err != nil {
			return err
		}
		ck := customerKey{ev.Tenant, e.CustomerID}
		s := f.summaries[ck]
		orders, open := int64(1), int64(1)
		if s != nil {
			if orders, err = addInt64(s.orders, 1); err == nil {
				open, err = addInt64(s.open, 1)
			}
			if err != nil {
				return fmt.Errorf("customer %s: %w", e.CustomerID, err)
			}
		}
		f.lookup[k] = &lookupRow{key: k, customer: e.CustomerID}
		if s == nil {
			f.summaries[ck] = &summaryRow{key: ck, orders: orders, open: open}
		} else {
			s.orders, s.open = orders, open
		}
	case order.Paid:
		// The lookup names the customer (the statement inserts or updates
		// no paid total without it); the customer's open orders drop by
		// one and the amount is added to its paid total in the currency.
		if err := firstErr(checkTenant(ev.Tenant), checkText(id, e.Amount.Currency)); err != nil {
			return err
		}
		c := f.lookup[k]
		if c == nil {
			return missingRow("customer of order", id)
		}
		s := f.summaries[customerKey{ev.Tenant, c.customer}]
		var open int64
		if s != nil {
			if open, err = subInt64(s.open, 1); err != nil {
				return fmt.Errorf("customer %s: %w", c.customer, err)
			}
			s.open = open
		}
		pk := paidKey{ev.Tenant, c.customer, e.Amount.Currency}
		p := f.paid[pk]
		if p == nil {
			p = &paidRow{key: pk}
			f.paid[pk] = p
		}
		p.amount.Add(&p.amount, f.scratch.SetInt64(e.Amount.Amount))
	case order.Cancelled:
		// The UPDATE joins the lookup to the customer's row and must
		// change one row.
		c := f.lookup[k]
		if c == nil {
			return missingRow("customer of order", id)
		}
		s := f.summaries[customerKey{ev.Tenant, c.customer}]
		if s == nil {
			return missingRow("customer of order", id)
		}
		open, err := subInt64(s.open, 1)
		if err != nil {
			return fmt.Errorf("customer %s: %w", c.customer, err)
		}
		s.open = open
	default:
		return projections.Unexpected(ev)
	}
	return nil
}

func (f *customerSummaryFold) Rows() int { return len(f.summaries) + len(f.paid) + len(f.lookup) }

func (f *customerSummaryFold) Tables() []projections.FoldedTable {
	out := appendFolded(nil, f.tables.Summaries, []string{"tenant_id", "customer_id", "orders", "open_orders"}, f.summaries,
		func(s *summaryRow) []any { return []any{s.key.tenant, s.key.customer, s.orders, s.open} })
	out = appendFolded(out, f.tables.PaidTotals, []string{"tenant_id", "customer_id", "currency", "amount"}, f.paid,
		func(p *paidRow) []any {
			return []any{p.key.tenant, p.key.customer, p.key.currency, pgtype.Numeric{Int: &p.amount, Valid: true}}
		})
	return appendFolded(out, f.tables.Orders, []string{"tenant_id", "order_id", "customer_id"}, f.lookup,
		func(l *lookupRow) []any { return []any{l.key.tenant, l.key.order, l.customer} })
}
