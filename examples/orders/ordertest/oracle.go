package ordertest

import (
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/projections/projectiontest"
)

// Expected computes, without PostgreSQL, what every read-model table
// must hold after applying evs (in log order): an independent statement of
// the projections' meaning, written as a fold over decoded events and
// checked against the order aggregate's own totals.
func Expected(evs []Event) (string, error) {
	type line struct {
		product        string
		seq, qty, unit int64
		currency       string
		removed        bool
	}
	type ord struct {
		tenant, id, customer, status, currency string
		version                                int64
		created, placed, paid, cancelled       time.Time
		updated                                time.Time
		lines                                  []*line
		placedTotal                            *int64
		agg                                    *order.Order
	}
	orders := map[string]*ord{}
	var keys []string
	type custKey struct{ tenant, customer string }
	type paidKey struct{ tenant, customer, currency string }
	type dayKey struct{ tenant, day, currency string }
	// Sums over orders are exact (big.Int), as the read model's numeric
	// columns are: an int64 sum wraps around past the bound of one order.
	type daySum struct {
		amount *big.Int
		orders int64
	}
	paid := map[paidKey]*big.Int{}
	days := map[dayKey]*daySum{}

	for i, e := range evs {
		p, err := order.Registry.Decode(e.Type, e.SchemaVersion, e.Data)
		if err != nil {
			return "", fmt.Errorf("event %d: %w", i, err)
		}
		id, _ := order.OrderIDFromStream(e.Stream)
		k := e.Tenant + "/" + id
		o := orders[k]
		if o == nil {
			o = &ord{tenant: e.Tenant, id: id, agg: &order.Order{}}
			orders[k] = o
			keys = append(keys, k)
		}
		if err := o.agg.Apply(p); err != nil {
			return "", err
		}
		o.version = e.Version
		switch ev := p.(type) {
		case order.Created:
			o.customer, o.currency, o.status, o.created, o.updated = ev.CustomerID, ev.Currency, "draft", ev.At, ev.At
		case order.LineAdded:
			found := false
			for _, l := range o.lines {
				if l.product == ev.ProductID && !l.removed {
					l.qty += ev.Quantity
					found = true
				}
			}
			if !found {
				o.lines = append(o.lines, &line{product: ev.ProductID, seq: e.Version, qty: ev.Quantity, unit: ev.UnitPrice.Amount, currency: ev.UnitPrice.Currency})
			}
		case order.LineRemoved:
			for _, l := range o.lines {
				if l.product == ev.ProductID {
					l.removed = true
				}
			}
		case order.Placed:
			o.status, o.placed, o.updated = "placed", ev.At, ev.At
			t := ev.Total.Amount
			o.placedTotal = &t
		case order.Paid:
			o.status, o.paid, o.updated = "paid", ev.At, ev.At
			pk := paidKey{e.Tenant, o.customer, ev.Amount.Currency}
			if paid[pk] == nil {
				paid[pk] = new(big.Int)
			}
			paid[pk].Add(paid[pk], big.NewInt(ev.Amount.Amount))
			at := ev.At.UTC()
			dk := dayKey{e.Tenant, at.Format(time.DateOnly), ev.Amount.Currency}
			if days[dk] == nil {
				days[dk] = &daySum{amount: new(big.Int)}
			}
			days[dk].amount.Add(days[dk].amount, big.NewInt(ev.Amount.Amount))
			days[dk].orders++
		case order.Cancelled:
			o.status, o.cancelled, o.updated = "cancelled", ev.At, ev.At
		}
	}

	tsOrDash := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Truncate(time.Microsecond).Format("2006-01-02T15:04:05.000000Z")
	}
	var b strings.Builder
	var details, lines, list, sums, totals, lookup, revenue []string
	counts := map[custKey][2]int64{}
	for _, k := range keys {
		o := orders[k]
		var total int64
		for _, l := range o.lines {
			if l.removed {
				continue
			}
			total += l.qty * l.unit
			lines = append(lines, fmt.Sprintf("%s|%s|%s|%d|%d|%d|%s|%d", o.tenant, o.id, l.product, l.seq, l.qty, l.unit, l.currency, l.qty*l.unit))
		}
		aggTotal, err := o.agg.Total()
		if err != nil {
			return "", err
		}
		if aggTotal.Amount != total || o.agg.Status.String() != o.status || o.agg.Version != o.version {
			return "", fmt.Errorf("oracle disagrees with the aggregate on %s: total %d/%d status %s/%s version %d/%d",
				k, total, aggTotal.Amount, o.status, o.agg.Status, o.version, o.agg.Version)
		}
		if o.placedTotal != nil {
			total = *o.placedTotal // the read model takes the placed event's total
		}
		details = append(details, fmt.Sprintf("%s|%s|%s|%s|%s|%d|%d|%s|%s|%s|%s", o.tenant, o.id, o.customer, o.status, o.currency, total, o.version,
			tsOrDash(o.created), tsOrDash(o.placed), tsOrDash(o.paid), tsOrDash(o.cancelled)))
		listTotal := "-"
		if o.placedTotal != nil {
			listTotal = fmt.Sprint(*o.placedTotal)
		}
		list = append(list, fmt.Sprintf("%s|%s|%s|%s|%s|%s|%s|%s", o.tenant, o.id, o.customer, o.status, o.currency, listTotal, tsOrDash(o.created), tsOrDash(o.updated)))
		lookup = append(lookup, fmt.Sprintf("%s|%s|%s", o.tenant, o.id, o.customer))
		c := counts[custKey{o.tenant, o.customer}]
		c[0]++
		if o.status == "draft" || o.status == "placed" {
			c[1]++
		}
		counts[custKey{o.tenant, o.customer}] = c
	}
	for k, c := range counts {
		sums = append(sums, fmt.Sprintf("%s|%s|%d|%d", k.tenant, k.customer, c[0], c[1]))
	}
	for k, v := range paid {
		totals = append(totals, fmt.Sprintf("%s|%s|%s|%s", k.tenant, k.customer, k.currency, v))
	}
	for k, v := range days {
		revenue = append(revenue, fmt.Sprintf("%s|%s|%s|%s|%d", k.tenant, k.day, k.currency, v.amount, v.orders))
	}
	byTable := map[string][]string{
		"order_details": details, "order_detail_lines": lines, "order_list": list,
		"customer_summaries": sums, "customer_paid_totals": totals, "customer_orders": lookup, "daily_revenue": revenue,
	}
	for _, table := range Tables() {
		b.WriteString(projectiontest.Table(table, byTable[table]))
	}
	return b.String(), nil
}
