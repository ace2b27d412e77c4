package ordertest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/domain/money"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/projections/projectiontest"
)

// Event is one generated event, in log order.
type Event = projectiontest.Recorded

// Config shapes generated histories.
type Config struct {
	Seed      uint64
	Tenants   int
	Orders    int           // in total, spread over the tenants
	Customers int           // per tenant
	Open      int           // orders in progress at once (interleaving)
	Start     time.Time     // creation time of the first order
	Spacing   time.Duration // between the creation of consecutive orders (default 17m)
}

// Generate returns realistic, valid order histories, interleaved like
// concurrent traffic: every command is decided by the order aggregate, so
// the events are exactly what the write side would store. About 10% of
// line_added events are stored in their v1 schema (upcast on read). Order
// and customer IDs repeat across tenants on purpose.
func Generate(cfg Config) []Event {
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5eed))
	if cfg.Open == 0 {
		cfg.Open = 40
	}
	if cfg.Spacing == 0 {
		cfg.Spacing = 17 * time.Minute
	}
	type live struct {
		tenant, id string
		events     []Event
		next       int
	}
	currencies := []string{"EUR", "USD", "GBP"}
	price := func(product int) int64 { return int64(100 + (product*7919)%9900) }
	plan := func(i int) *live {
		tenant := fmt.Sprintf("t-%d", i%cfg.Tenants+1)
		id := fmt.Sprintf("o-%d", i/cfg.Tenants+1)
		l := &live{tenant: tenant, id: id}
		o := &order.Order{}
		at := cfg.Start.Add(time.Duration(i) * cfg.Spacing).Add(time.Duration(rng.IntN(1_000_000_000)))
		step := func() time.Time {
			at = at.Add(time.Duration(1+rng.IntN(180)) * time.Minute).Add(time.Duration(rng.IntN(1000)) * time.Microsecond)
			return at
		}
		do := func(evs []event.Payload, err error) {
			if err != nil {
				panic(fmt.Sprintf("generator: %s/%s: %v", tenant, id, err))
			}
			for _, p := range evs {
				if err := o.Apply(p); err != nil {
					panic(err)
				}
				typ, sv, data, err := order.Registry.Encode(p)
				if err != nil {
					panic(err)
				}
				if la, ok := p.(order.LineAdded); ok && rng.IntN(10) == 0 {
					sv = 1
					data, _ = json.Marshal(map[string]any{"order_id": la.OrderID, "product_id": la.ProductID, "quantity": la.Quantity,
						"unit_price_minor": la.UnitPrice.Amount, "currency": la.UnitPrice.Currency, "at": la.At})
				}
				l.events = append(l.events, Event{Tenant: tenant, Stream: order.StreamID(id), Version: o.Version,
					Type: typ, SchemaVersion: sv, Data: data})
			}
		}
		currency := currencies[rng.IntN(len(currencies))]
		do(o.Create(id, fmt.Sprintf("c-%d", rng.IntN(cfg.Customers)+1), currency, at))
		for n := 1 + rng.IntN(4); n > 0; n-- {
			p := rng.IntN(12) + 1
			do(o.AddLine(fmt.Sprintf("p-%d", p), int64(1+rng.IntN(5)), money.Money{Amount: price(p), Currency: currency}, step()))
		}
		if rng.IntN(6) == 0 {
			do(o.RemoveLine(o.Lines[rng.IntN(len(o.Lines))].ProductID, step()))
			p := rng.IntN(12) + 1
			do(o.AddLine(fmt.Sprintf("p-%d", p), int64(1+rng.IntN(5)), money.Money{Amount: price(p), Currency: currency}, step()))
		}
		switch r := rng.IntN(20); {
		case r < 2: // stays a draft
		case r < 4:
			do(o.Cancel("changed my mind", step()))
		default:
			do(o.Place(step()))
			switch r := rng.IntN(20); {
			case r < 13:
				do(o.Pay(fmt.Sprintf("pay-%s-%s", tenant, id), step()))
			case r < 16:
				do(o.Cancel("", step()))
			}
		}
		return l
	}
	var out []Event
	var open []*live
	started := 0
	for started < cfg.Orders || len(open) > 0 {
		for len(open) < cfg.Open && started < cfg.Orders {
			open = append(open, plan(started))
			started++
		}
		k := rng.IntN(len(open))
		l := open[k]
		out = append(out, l.events[l.next])
		l.next++
		if l.next == len(l.events) {
			open = append(open[:k], open[k+1:]...)
		}
	}
	return out
}

// EventID gives the i-th seeded event a stable UUID (projectiontest.EventID).
func EventID(i int) string { return projectiontest.EventID(i) }

// Seed inserts evs into the log as a superuser (projectiontest.Seed).
func Seed(ctx context.Context, adminURL string, evs []Event, chunk int) error {
	return projectiontest.Seed(ctx, adminURL, evs, chunk)
}
