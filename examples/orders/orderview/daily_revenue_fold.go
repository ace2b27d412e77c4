package orderview

import (
	"fmt"
	"math/big"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/projections"
)

var _ projections.Folder = (*DailyRevenue)(nil)

// NewFold implements projections.Folder: DailyRevenue's rows folded in
// memory, for a rebuild to COPY into its configured table.
func (p *DailyRevenue) NewFold() projections.Fold {
	return &dailyRevenueFold{tables: p.tables, days: map[dayKey]*dayRow{}}
}

// dailyRevenueFold holds the rows Apply's upserts would leave in
// daily_revenue (see Apply's SQL in daily_revenue.go): the amount exactly,
// as the numeric column adds it, the number of orders in bigint
// arithmetic.
type dailyRevenueFold struct {
	tables  DailyRevenueTables
	days    map[dayKey]*dayRow
	scratch big.Int
}

// dayKey is a daily_revenue row's key; day is the Unix time of the day's
// midnight UTC.
type dayKey struct {
	tenant   string
	day      int64
	currency string
}

// dayRow is one daily_revenue row; day is the value Apply passes for the
// date column (midnight UTC), amount is numeric.
type dayRow struct {
	key    dayKey
	day    time.Time
	amount big.Int
	orders int64
}

func (f *dailyRevenueFold) Add(ev projections.Event) error {
	e, ok := ev.Payload.(order.Paid)
	if !ok {
		return projections.Unexpected(ev)
	}
	if _, err := orderID(ev); err != nil {
		return err
	}
	if err := firstErr(checkTenant(ev.Tenant), checkText(e.Amount.Currency)); err != nil {
		return err
	}
	at := e.At.UTC()
	day := time.Date(at.Year(), at.Month(), at.Day(), 0, 0, 0, 0, time.UTC) // as Apply computes it
	k := dayKey{ev.Tenant, day.Unix(), e.Amount.Currency}
	r := f.days[k]
	if r == nil {
		r = &dayRow{key: k, day: day, orders: 1}
		f.days[k] = r
	} else {
		orders, err := addInt64(r.orders, 1)
		if err != nil {
			return fmt.Errorf("daily revenue of %s: %w", day.Format(time.DateOnly), err)
		}
		r.orders = orders
	}
	r.amount.Add(&r.amount, f.scratch.SetInt64(e.Amount.Amount))
	return nil
}

func (f *dailyRevenueFold) Rows() int { return len(f.days) }

func (f *dailyRevenueFold) Tables() []projections.FoldedTable {
	return appendFolded(nil, f.tables.Days, []string{"tenant_id", "day", "currency", "amount", "orders"}, f.days,
		func(r *dayRow) []any {
			return []any{r.key.tenant, r.day, r.key.currency, pgtype.Numeric{Int: &r.amount, Valid: true}, r.orders}
		})
}
