package fulfilview_test

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/strata-es/strata/commands/commandtest"
	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/domain/money"
	"github.com/strata-es/strata/examples/fulfilment/fulfilview"
	"github.com/strata-es/strata/examples/inventory/stock"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/internal/pgtest"
	"github.com/strata-es/strata/projections/projectiontest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var registry = event.NewRegistry(append(order.Codecs(), stock.Codecs()...)...)

// history decides a deterministic mix of order and inventory commands
// with the aggregates themselves (every event is one the write side could
// store, in any order the process or a client could cause: reservations
// under the order's ID, a foreign reservation ID, payments before
// reservations, releases after a payment) and records the accepted ones
// in log order.
func history(t *testing.T, seed uint64, n int) []projectiontest.Recorded {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 3))
	type key struct{ tenant, id string }
	orders := map[key]*order.Order{}
	items := map[key]*stock.Item{}
	var out []projectiontest.Recorded
	at := commandtest.DefaultNow
	record := func(tenant, stream string, version int64, evs []event.Payload) {
		for i, p := range evs {
			typ, v, data, err := registry.Encode(p)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, projectiontest.Recorded{Tenant: tenant, Stream: stream, Version: version - int64(len(evs)-1-i),
				Type: typ, SchemaVersion: v, Data: data})
		}
	}
	skus := []string{"a", "b", "c", "d"}
	for len(out) < n {
		tenant := fmt.Sprintf("t-%d", rng.IntN(2))
		ok := key{tenant, fmt.Sprintf("o-%d", rng.IntN(24))}
		o := orders[ok]
		if o == nil {
			o, _ = order.Load(nil)
			orders[ok] = o
		}
		sku := skus[rng.IntN(len(skus))]
		if len(o.Lines) > 0 && rng.IntN(3) > 0 {
			sku = o.Lines[rng.IntN(len(o.Lines))].ProductID
		}
		ik := key{tenant, sku}
		it := items[ik]
		if it == nil {
			it, _ = stock.Load(nil)
			items[ik] = it
		}
		at = at.Add(time.Duration(1+rng.IntN(300)) * time.Second)
		var evs []event.Payload
		var err error
		onOrder := true
		qty := int64(1)
		for _, l := range o.Lines {
			if l.ProductID == sku {
				qty = l.Quantity
			}
		}
		action := rng.IntN(12)
		if rng.IntN(2) == 0 {
			action = natural(o, func(sku string) *stock.Item { return items[key{tenant, sku}] }, &sku)
			if it = items[key{tenant, sku}]; it == nil {
				it, _ = stock.Load(nil)
				items[key{tenant, sku}] = it
			}
			for _, l := range o.Lines {
				if l.ProductID == sku {
					qty = l.Quantity
				}
			}
		}
		ik = key{tenant, sku}
		switch action {
		case 0:
			evs, err = o.Create(ok.id, "c-1", "EUR", at)
		case 1, 2:
			evs, err = o.AddLine(sku, 1+rng.Int64N(3), money.Money{Amount: 150, Currency: "EUR"}, at)
		case 3:
			evs, err = o.RemoveLine(sku, at)
		case 4:
			evs, err = o.Place(at)
		case 5:
			evs, err = o.Pay(fmt.Sprintf("ref-%d", rng.IntN(100)), at)
		case 6:
			reasons := []string{"", "out_of_stock", "payment_timeout", "changed my mind"}
			evs, err = o.Cancel(reasons[rng.IntN(len(reasons))], at)
		case 7:
			onOrder = false
			evs, err = it.Receive(sku, 1+rng.Int64N(5), at)
		case 8:
			onOrder = false
			evs, err = it.Reserve(sku, ok.id, qty, at)
		case 9:
			onOrder = false
			evs, err = it.Release(sku, ok.id, at)
		case 10:
			onOrder = false
			evs, err = it.Commit(sku, ok.id, at)
		default:
			onOrder = false
			evs, err = it.Reserve(sku, "foreign-"+ok.id, 1, at) // not an order's reservation
		}
		if err != nil || len(evs) == 0 {
			continue
		}
		if onOrder {
			for _, p := range evs {
				if err := o.Apply(p); err != nil {
					t.Fatal(err)
				}
			}
			record(tenant, order.StreamID(ok.id), o.Version, evs)
		} else {
			for _, p := range evs {
				if err := it.Apply(p); err != nil {
					t.Fatal(err)
				}
			}
			record(tenant, stock.StreamID(sku), it.Version, evs)
		}
	}
	return out
}

// natural picks what the process (or a customer) would do next with o,
// setting *sku for the inventory actions: the histories then reach every
// stage, not only the odd ones.
func natural(o *order.Order, item func(string) *stock.Item, sku *string) int {
	held := func(l order.Line) (stock.Reservation, bool) {
		it := item(l.ProductID)
		if it == nil {
			return stock.Reservation{}, false
		}
		r, ok := it.Reservations[o.ID]
		return r, ok
	}
	switch o.Status {
	case order.StatusNone:
		return 0
	case order.StatusDraft:
		if len(o.Lines) < 2 {
			return 1
		}
		return 4
	case order.StatusPlaced:
		for _, l := range o.Lines {
			if _, ok := held(l); !ok {
				*sku = l.ProductID
				if it := item(l.ProductID); it == nil || it.Available() < l.Quantity {
					return 7 // receive stock first
				}
				return 8
			}
		}
		return 5
	case order.StatusPaid, order.StatusCancelled:
		for _, l := range o.Lines {
			if r, ok := held(l); ok && r.State == stock.StateOpen {
				*sku = l.ProductID
				if o.Status == order.StatusPaid {
					return 10
				}
				return 9
			}
		}
	}
	return 0
}

// TestOrderFulfilment runs the projection over a recorded history event by
// event and rebuilt, compares the rows with the golden file, and checks
// them against an oracle folding the events in Go.
func TestOrderFulfilment(t *testing.T) {
	t.Parallel()
	evs := history(t, 11, 400)
	rows := projectiontest.Check(t, projectiontest.Config{
		Projection: fulfilview.New(fulfilview.Tables{}),
		Registry:   registry,
		Lines:      []db.Line{fulfilview.Migrations},
		Events:     evs,
		Golden:     "testdata/golden/order_fulfilment.txt",
	})
	if got, want := withoutPositions(rows), oracle(t, evs); got != want {
		t.Errorf("rows differ from the oracle:\n%s", projectiontest.Diff(want, got))
	}
	for _, stage := range []string{"draft", "reserving", "awaiting_payment", "completed", "cancelled", "releasing"} {
		if !strings.Contains(rows, "|"+stage+"|") {
			t.Errorf("the history reaches no %s row: make it richer", stage)
		}
	}
}

// withoutPositions drops the last column (last_position: the log assigns
// positions, the oracle does not know them).
func withoutPositions(rows string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(rows, "\n") {
		if i := strings.LastIndexByte(l, '|'); i >= 0 && !strings.HasPrefix(l, "## ") {
			l = l[:i] + "\n"
		}
		b.WriteString(l)
	}
	return b.String()
}

type row struct {
	tenant, id, status, currency  string
	lines                         map[string]int64
	reserved, released, committed int
	total                         *int64
	ref, reason                   *string
	version                       int64
	updated                       time.Time
}

func oracle(t *testing.T, evs []projectiontest.Recorded) string {
	t.Helper()
	rows := map[[2]string]*row{}
	for _, r := range evs {
		p, err := registry.Decode(r.Type, r.SchemaVersion, r.Data)
		if err != nil {
			t.Fatal(err)
		}
		if id, ok := order.OrderIDFromStream(r.Stream); ok {
			k := [2]string{r.Tenant, id}
			if c, ok := p.(order.Created); ok {
				rows[k] = &row{tenant: r.Tenant, id: id, status: "draft", currency: c.Currency, lines: map[string]int64{}}
			}
			x := rows[k]
			x.version = r.Version
			switch e := p.(type) {
			case order.Created:
				x.updated = e.At
			case order.LineAdded:
				x.lines[e.ProductID] += e.Quantity
				x.updated = e.At
			case order.LineRemoved:
				delete(x.lines, e.ProductID)
				x.updated = e.At
			case order.Placed:
				x.status, x.total, x.updated = "placed", &e.Total.Amount, e.At
			case order.Paid:
				ref := e.PaymentReference
				x.status, x.ref, x.updated = "paid", &ref, e.At
			case order.Cancelled:
				x.status, x.updated = "cancelled", e.At
				if e.Reason != "" {
					reason := e.Reason
					x.reason = &reason
				}
			}
			continue
		}
		var id string
		var at time.Time
		var dr, dl, dc int
		switch e := p.(type) {
		case stock.Reserved:
			id, at, dr = e.ReservationID, e.At, 1
		case stock.Released:
			id, at, dl = e.ReservationID, e.At, 1
		case stock.Committed:
			id, at, dc = e.ReservationID, e.At, 1
		default:
			continue
		}
		if x := rows[[2]string{r.Tenant, id}]; x != nil {
			x.reserved, x.released, x.committed, x.updated = x.reserved+dr, x.released+dl, x.committed+dc, at
		}
	}
	var lines []string
	for _, x := range rows {
		lines = append(lines, strings.Join([]string{x.tenant, x.id, stage(x), x.status, x.currency, jsonb(x.lines),
			fmt.Sprint(x.reserved), fmt.Sprint(x.released), fmt.Sprint(x.committed), orNull(x.total), orNull(x.ref), orNull(x.reason),
			fmt.Sprint(x.version), x.updated.UTC().Format("2006-01-02T15:04:05.000000Z")}, "|"))
	}
	return projectiontest.Table("order_fulfilment", lines)
}

// stage is the derivation the projection documents, written again.
func stage(x *row) string {
	held := x.reserved > x.released+x.committed
	n := len(x.lines)
	switch {
	case x.status == "draft":
		return fulfilview.StageDraft
	case x.status == "cancelled" && held:
		return fulfilview.StageReleasing
	case x.status == "cancelled":
		return fulfilview.StageCancelled
	case x.status == "paid" && x.released > 0 && held:
		return fulfilview.StageReleasing
	case x.status == "paid" && x.released > 0:
		return fulfilview.StagePaidUnfulfilled
	case x.status == "paid" && x.committed >= n:
		return fulfilview.StageCompleted
	case x.status == "paid":
		return fulfilview.StageCommitting
	case x.released > 0:
		return fulfilview.StageReleasing
	case x.reserved >= n:
		return fulfilview.StageAwaitingPayment
	}
	return fulfilview.StageReserving
}

// jsonb renders an object as PostgreSQL prints jsonb: keys by length,
// then bytewise.
func jsonb(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if len(keys[i]) != len(keys[j]) {
			return len(keys[i]) < len(keys[j])
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%q: %d", k, m[k])
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func orNull[T any](p *T) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}
