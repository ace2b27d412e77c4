package stockview_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/strata-es/strata/commands/commandtest"
	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/examples/inventory/stock"
	"github.com/strata-es/strata/examples/inventory/stockcmd"
	"github.com/strata-es/strata/examples/inventory/stockview"
	"github.com/strata-es/strata/internal/pgtest"
	"github.com/strata-es/strata/projections/projectiontest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// history decides a deterministic mix of commands for a few tenants and
// SKUs with the aggregate itself (so every event is one the write side
// could store) and records the accepted ones in log order.
func history(t *testing.T, seed uint64, n int) []projectiontest.Recorded {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	type key struct{ tenant, sku string }
	items := map[key]*stock.Item{}
	var out []projectiontest.Recorded
	at := commandtest.DefaultNow
	for i := 0; len(out) < n; i++ {
		k := key{fmt.Sprintf("t-%d", rng.IntN(3)), fmt.Sprintf("sku-%d", rng.IntN(5))}
		it := items[k]
		if it == nil {
			it, _ = stock.Load(nil)
			items[k] = it
		}
		var cmd stockcmd.Command
		res := fmt.Sprintf("r-%d", rng.IntN(8))
		switch rng.IntN(4) {
		case 0:
			cmd = stockcmd.Receive{SKU: k.sku, Quantity: 1 + rng.Int64N(20)}
		case 1:
			cmd = stockcmd.Reserve{SKU: k.sku, ReservationID: res, Quantity: 1 + rng.Int64N(10)}
		case 2:
			cmd = stockcmd.Release{SKU: k.sku, ReservationID: res}
		default:
			cmd = stockcmd.Commit{SKU: k.sku, ReservationID: res}
		}
		at = at.Add(time.Duration(1+rng.IntN(600)) * time.Second)
		evs, err := cmd.Decide(it, at)
		if err != nil {
			continue // a rule said no: nothing is stored
		}
		for _, p := range evs {
			if err := it.Apply(p); err != nil {
				t.Fatal(err)
			}
			typ, v, data, err := stock.Registry.Encode(p)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, projectiontest.Recorded{Tenant: k.tenant, Stream: stock.StreamID(k.sku), Version: it.Version,
				Type: typ, SchemaVersion: v, Data: data})
		}
	}
	return out
}

// TestItems runs the projection over a recorded history event by event and
// rebuilt, and compares the rows with the golden file. The golden rows are
// also checked against the aggregates' own state.
func TestItems(t *testing.T) {
	t.Parallel()
	evs := history(t, 7, 300)
	rows := projectiontest.Check(t, projectiontest.Config{
		Projection: stockview.NewItems(stockview.ItemsTables{}),
		Registry:   stock.Registry,
		Lines:      []db.Line{stockview.Migrations},
		Events:     evs,
		Golden:     "testdata/golden/items.txt",
	})
	if want := oracle(t, evs); rows != want {
		t.Errorf("rows differ from the aggregates' state:\n%s", projectiontest.Diff(want, rows))
	}
}

// oracle renders what inventory_items must hold, from the aggregates.
func oracle(t *testing.T, evs []projectiontest.Recorded) string {
	t.Helper()
	type key struct{ tenant, stream string }
	items := map[key]*stock.Item{}
	last := map[key]time.Time{}
	var order []key
	for _, r := range evs {
		p, err := stock.Registry.Decode(r.Type, r.SchemaVersion, r.Data)
		if err != nil {
			t.Fatal(err)
		}
		k := key{r.Tenant, r.Stream}
		if items[k] == nil {
			items[k], _ = stock.Load(nil)
			order = append(order, k)
		}
		if err := items[k].Apply(p); err != nil {
			t.Fatal(err)
		}
		last[k] = eventTime(p)
	}
	var lines []string
	for _, k := range order {
		it := items[k]
		lines = append(lines, fmt.Sprintf("%s|%s|%d|%d|%d|%s", k.tenant, it.SKU, it.OnHand, it.Reserved, it.Version,
			last[k].UTC().Format("2006-01-02T15:04:05.000000Z")))
	}
	return projectiontest.Table("inventory_items", lines)
}

func eventTime(p event.Payload) time.Time {
	switch e := p.(type) {
	case stock.Received:
		return e.At
	case stock.Reserved:
		return e.At
	case stock.Released:
		return e.At
	case stock.Committed:
		return e.At
	}
	return time.Time{}
}
