package orderview

import (
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/projections"
)

// DailyRevenueName is the checkpoint key of DailyRevenue.
const DailyRevenueName = "daily_revenue"

// DailyRevenueTables names the table DailyRevenue writes; empty takes the
// live name.
type DailyRevenueTables struct {
	Days string // default "daily_revenue"
}

// DailyRevenue sums paid orders per tenant, UTC day of payment and
// currency: amount and number of orders. The amount is a numeric column,
// added up by PostgreSQL on both paths, so that a day's revenue is exact
// whatever it adds up to (one order fits an int64, a day need not;
// migration 006).
type DailyRevenue struct {
	tables        DailyRevenueTables
	pay, payBatch string
}

// NewDailyRevenue returns the projection writing into t.
func NewDailyRevenue(t DailyRevenueTables) *DailyRevenue {
	if t.Days == "" {
		t.Days = "daily_revenue"
	}
	return &DailyRevenue{
		tables: t,
		pay: fmt.Sprintf(`INSERT INTO %s AS r (tenant_id, day, currency, amount, orders) VALUES ($1, $2, $3, $4::bigint, 1)
ON CONFLICT (tenant_id, day, currency) DO UPDATE SET amount = r.amount + EXCLUDED.amount, orders = r.orders + 1`, projections.Ident(t.Days)),
		// The batch's sums are PostgreSQL's too (sum of bigint is numeric),
		// not Go's: an int64 sum of two maximal orders wraps around.
		payBatch: fmt.Sprintf(`INSERT INTO %s AS r (tenant_id, day, currency, amount, orders)
SELECT $1, u.day, u.currency, sum(u.amount), count(*) FROM unnest($2::date[], $3::text[], $4::bigint[]) AS u(day, currency, amount)
GROUP BY u.day, u.currency
ON CONFLICT (tenant_id, day, currency) DO UPDATE SET amount = r.amount + EXCLUDED.amount, orders = r.orders + EXCLUDED.orders`, projections.Ident(t.Days)),
	}
}

// Name implements Projection.
func (p *DailyRevenue) Name() string { return DailyRevenueName }

// EventTypes implements Projection.
func (p *DailyRevenue) EventTypes() []string { return []string{order.TypePaid} }

// Tables implements Projection.
func (p *DailyRevenue) Tables() []string { return []string{p.tables.Days} }

// Apply implements Projection.
func (p *DailyRevenue) Apply(b *pgx.Batch, ev projections.Event) error {
	e, ok := ev.Payload.(order.Paid)
	if !ok {
		return projections.Unexpected(ev)
	}
	if _, err := orderID(ev); err != nil {
		return err
	}
	at := e.At.UTC()
	day := time.Date(at.Year(), at.Month(), at.Day(), 0, 0, 0, 0, time.UTC)
	b.Queue(p.pay, ev.Tenant, day, e.Amount.Currency, e.Amount.Amount)
	return nil
}

// ApplyBatch implements BatchProjection: one upsert of the batch's sums
// per day and currency, grouped and added by PostgreSQL.
func (p *DailyRevenue) ApplyBatch(b *pgx.Batch, evs []projections.Event) error {
	days, currencies, amounts := make([]time.Time, 0, len(evs)), make([]string, 0, len(evs)), make([]int64, 0, len(evs))
	for _, ev := range evs {
		e, ok := ev.Payload.(order.Paid)
		if !ok {
			return projections.Unexpected(ev)
		}
		if _, err := orderID(ev); err != nil {
			return err
		}
		at := e.At.UTC()
		days = append(days, time.Date(at.Year(), at.Month(), at.Day(), 0, 0, 0, 0, time.UTC))
		currencies, amounts = append(currencies, e.Amount.Currency), append(amounts, e.Amount.Amount)
	}
	if len(days) == 0 {
		return nil
	}
	b.Queue(p.payBatch, evs[0].Tenant, days, currencies, amounts)
	return nil
}
