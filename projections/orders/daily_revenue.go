package orders

import (
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain/order"
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
// currency: amount and number of orders.
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
		pay: fmt.Sprintf(`INSERT INTO %s AS r (tenant_id, day, currency, amount, orders) VALUES ($1, $2, $3, $4, 1)
ON CONFLICT (tenant_id, day, currency) DO UPDATE SET amount = r.amount + EXCLUDED.amount, orders = r.orders + 1`, projections.Ident(t.Days)),
		payBatch: fmt.Sprintf(`INSERT INTO %s AS r (tenant_id, day, currency, amount, orders)
SELECT $1, u.day, u.currency, u.amount, u.orders FROM unnest($2::date[], $3::text[], $4::bigint[], $5::bigint[]) AS u(day, currency, amount, orders)
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
// per day and currency.
func (p *DailyRevenue) ApplyBatch(b *pgx.Batch, evs []projections.Event) error {
	type key struct {
		day      time.Time
		currency string
	}
	sums := map[key]*[2]int64{}
	var keys []key
	for _, ev := range evs {
		e, ok := ev.Payload.(order.Paid)
		if !ok {
			return projections.Unexpected(ev)
		}
		if _, err := orderID(ev); err != nil {
			return err
		}
		at := e.At.UTC()
		k := key{time.Date(at.Year(), at.Month(), at.Day(), 0, 0, 0, 0, time.UTC), e.Amount.Currency}
		s := sums[k]
		if s == nil {
			s = new([2]int64)
			sums[k] = s
			keys = append(keys, k)
		}
		s[0] += e.Amount.Amount
		s[1]++
	}
	if len(keys) == 0 {
		return nil
	}
	days, currencies, amounts, orders := make([]time.Time, len(keys)), make([]string, len(keys)), make([]int64, len(keys)), make([]int64, len(keys))
	for i, k := range keys {
		days[i], currencies[i], amounts[i], orders[i] = k.day, k.currency, sums[k][0], sums[k][1]
	}
	b.Queue(p.payBatch, evs[0].Tenant, days, currencies, amounts, orders)
	return nil
}
