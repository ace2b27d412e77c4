package fulfilcmd_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-es/strata/commands"
	"github.com/strata-es/strata/commands/process"
	"github.com/strata-es/strata/commands/process/processtest"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/domain/money"
	"github.com/strata-es/strata/examples/fulfilment/fulfil"
	"github.com/strata-es/strata/examples/fulfilment/fulfilcmd"
	"github.com/strata-es/strata/examples/inventory/stock"
	"github.com/strata-es/strata/examples/inventory/stockcmd"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/ordercmd"
	"github.com/strata-es/strata/internal/paysim"
)

func TestMain(m *testing.M) { processtest.Main(m) }

var registry = event.NewRegistry(append(order.Codecs(), stock.Codecs()...)...)

// world is the fulfilment process as Processes wires it — its commands
// bound over the real inventory and order handlers, the http provider's
// port against paysim — run by the real runtime (processtest.Runtime)
// on PostgreSQL, with the clock in the test's hands. Every step is
// executed twice under its key (Redispatch), as a re-dispatch after a
// crash would, and must answer the same.
type world struct {
	t      *testing.T
	rt     *processtest.Runtime
	ctx    context.Context
	orders *commands.Handler[*order.Order]
	items  *commands.Handler[*stock.Item]
}

// newWorld starts the process configured by cfg; change, when set, may
// wrap the Spec's commands and ports first (to stage a race).
func newWorld(t *testing.T, cfg fulfilcmd.Config, change func(*process.Spec)) *world {
	t.Helper()
	// A flaky provider needs more than the default 5 attempts per step.
	rt := processtest.NewRuntime(t, processtest.RuntimeConfig{Registry: registry, Redispatch: true, Runner: process.RunnerConfig{Attempts: 50}})
	specs, err := fulfilcmd.Processes(cfg, rt.Deps())
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 1 || specs[0].Manager.Name() != "fulfilment" {
		t.Fatalf("specs %+v", specs)
	}
	if change != nil {
		change(&specs[0])
	}
	rt.Start(specs[0])
	orders, err := commands.NewHandler(ordercmd.Aggregate, rt.Store, rt.Store, rt.Deps().Config)
	if err != nil {
		t.Fatal(err)
	}
	items, err := commands.NewHandler(stockcmd.Aggregate, rt.Store, rt.Store, rt.Deps().Config)
	if err != nil {
		t.Fatal(err)
	}
	return &world{t: t, rt: rt, ctx: domain.NewContext(context.Background(), "t-a"), orders: orders, items: items}
}

func (w *world) order(cmd ordercmd.Command) error {
	_, err := w.orders.Handle(w.ctx, cmd, commands.Options{})
	return err
}

func (w *world) item(cmd stockcmd.Command) {
	w.t.Helper()
	if _, err := w.items.Handle(w.ctx, cmd, commands.Options{}); err != nil {
		w.t.Fatal(err)
	}
}

// run lets the runtime work until nothing is left at the clock's time but
// the deadline: every step that failed transiently is retried (the clock
// moved to each retry) until it has a definite answer.
func (w *world) run() {
	w.t.Helper()
	w.rt.Settle()
	for w.rt.AdvanceToRetry() {
	}
}

func (w *world) placeOrder(lines map[string]int64) {
	w.t.Helper()
	must(w.t, w.order(ordercmd.CreateOrder{OrderID: "o-1", CustomerID: "c-1", Currency: "EUR"}))
	for _, sku := range []string{"a", "b", "c"} {
		if q, ok := lines[sku]; ok {
			must(w.t, w.order(ordercmd.AddLine{OrderID: "o-1", ProductID: sku, Quantity: q, UnitPrice: money.Money{Amount: 250, Currency: "EUR"}}))
		}
	}
	must(w.t, w.order(ordercmd.PlaceOrder{OrderID: "o-1"}))
	w.run()
}

// instance is the order's instance as an operator reads it.
func (w *world) instance() process.InstanceDetail {
	w.t.Helper()
	return w.rt.Instance("t-a", "o-1")
}

// statuses are the statuses the instance went through, in order, each once.
func (w *world) statuses() []string {
	var out []string
	for _, h := range w.instance().History {
		if len(out) == 0 || out[len(out)-1] != h.StatusAfter {
			out = append(out, h.StatusAfter)
		}
	}
	return out
}

func (w *world) expect(status string, orderStatus order.Status, reservations map[string]stock.State) {
	w.t.Helper()
	if d := w.instance(); d.Status != status {
		w.t.Errorf("status %s, want %s (went through %v)", d.Status, status, w.statuses())
	}
	o := loadOrder(w)
	if o.Status != orderStatus {
		w.t.Errorf("order %s, want %s", o.Status, orderStatus)
	}
	for sku, want := range reservations {
		recs, err := w.rt.Store.ReadStream(w.ctx, "t-a", stock.StreamID(sku), 0)
		if err != nil {
			w.t.Fatal(err)
		}
		var hist []event.Payload
		for _, r := range recs {
			p, _ := registry.DecodeRecord(r)
			hist = append(hist, p)
		}
		it, err := stock.Load(hist)
		if err != nil {
			w.t.Fatal(err)
		}
		if got := it.Reservations["o-1"].State; got != want {
			w.t.Errorf("reservation of %s is %q, want %q", sku, got, want)
		}
	}
}

func loadOrder(w *world) *order.Order {
	recs, err := w.rt.Store.ReadStream(w.ctx, "t-a", order.StreamID("o-1"), 0)
	if err != nil {
		w.t.Fatal(err)
	}
	var hist []event.Payload
	for _, r := range recs {
		p, _ := registry.DecodeRecord(r)
		hist = append(hist, p)
	}
	o, err := order.Load(hist)
	if err != nil {
		w.t.Fatal(err)
	}
	return o
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestManual(t *testing.T) {
	t.Parallel()
	t.Run("paid by the customer: committed", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t, fulfilcmd.Config{}, nil)
		w.item(stockcmd.Receive{SKU: "a", Quantity: 5})
		w.item(stockcmd.Receive{SKU: "b", Quantity: 5})
		w.placeOrder(map[string]int64{"a": 2, "b": 3})
		w.expect("awaiting_payment", order.StatusPlaced, map[string]stock.State{"a": stock.StateOpen, "b": stock.StateOpen})
		must(t, w.order(ordercmd.PayOrder{OrderID: "o-1", PaymentReference: "cash-1"}))
		w.run()
		w.expect("completed", order.StatusPaid, map[string]stock.State{"a": stock.StateCommitted, "b": stock.StateCommitted})
		if d := w.instance(); len(d.Deadlines) != 1 || d.Deadlines[0].Status != "cancelled" {
			t.Errorf("the payment deadline after the payment: %+v, want cancelled", d.Deadlines)
		}
	})
	t.Run("second line out of stock: released and cancelled", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t, fulfilcmd.Config{}, nil)
		w.item(stockcmd.Receive{SKU: "a", Quantity: 5})
		w.item(stockcmd.Receive{SKU: "b", Quantity: 1})
		w.placeOrder(map[string]int64{"a": 2, "b": 3})
		w.expect("cancelled", order.StatusCancelled, map[string]stock.State{"a": stock.StateReleased})
		if r := loadOrder(w).CancellationReason; r != "out_of_stock" {
			t.Errorf("reason %q", r)
		}
	})
	t.Run("unpaid past the deadline: cancelled and released", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t, fulfilcmd.Config{PaymentTimeout: time.Minute}, nil)
		w.item(stockcmd.Receive{SKU: "a", Quantity: 5})
		w.placeOrder(map[string]int64{"a": 2})
		d := w.instance()
		if len(d.Deadlines) != 1 || !d.Deadlines[0].DueAt.Equal(loadOrder(w).PlacedAt.Add(time.Minute)) {
			t.Fatalf("deadlines %+v, want one at placed + 1m", d.Deadlines)
		}
		// Not a moment before it is due.
		w.rt.Advance(59 * time.Second)
		w.expect("awaiting_payment", order.StatusPlaced, map[string]stock.State{"a": stock.StateOpen})
		if !w.rt.AdvanceToDeadline() {
			t.Fatal("no deadline pending")
		}
		w.run()
		w.expect("cancelled", order.StatusCancelled, map[string]stock.State{"a": stock.StateReleased})
		if r := loadOrder(w).CancellationReason; r != "payment_timeout" {
			t.Errorf("reason %q", r)
		}
	})
	t.Run("paid while the deadline's cancel is under way: the cancel is refused, committed", func(t *testing.T) {
		t.Parallel()
		// The customer's payment lands just before the process's cancel
		// for the deadline is executed: the order refuses the cancel, and
		// the process, seeing order.paid next, commits.
		var w *world
		var paid sync.Once
		w = newWorld(t, fulfilcmd.Config{}, func(spec *process.Spec) {
			cancel := spec.Commands[fulfil.CommandCancel]
			spec.Commands[fulfil.CommandCancel] = func(ctx context.Context, tenant domain.TenantID, payload json.RawMessage, key string) (json.RawMessage, error) {
				paid.Do(func() { must(t, w.order(ordercmd.PayOrder{OrderID: "o-1", PaymentReference: "cash-1"})) })
				return cancel(ctx, tenant, payload, key)
			}
		})
		w.item(stockcmd.Receive{SKU: "a", Quantity: 5})
		w.placeOrder(map[string]int64{"a": 2})
		w.rt.AdvanceToDeadline()
		w.run()
		w.expect("completed", order.StatusPaid, map[string]stock.State{"a": stock.StateCommitted})
		if got := w.statuses(); !slices.Contains(got, "cancelling") {
			t.Errorf("statuses %v: the deadline's cancel was never issued", got)
		}
		for _, s := range w.instance().Steps {
			if s.Step == fulfil.StepCancel && s.Status != "rejected" {
				t.Errorf("the cancel step is %s, want rejected", s.Status)
			}
		}
	})
}

func TestHTTP(t *testing.T) {
	t.Parallel()
	start := func(t *testing.T, f paysim.Faults, change func(*process.Spec)) (*world, *paysim.Server) {
		sim := paysim.Start(paysim.Config{Seed: 3, Faults: f})
		t.Cleanup(sim.Close)
		w := newWorld(t, fulfilcmd.Config{Provider: "http", PaymentURL: sim.URL(), HTTPTimeout: 200 * time.Millisecond}, change)
		w.item(stockcmd.Receive{SKU: "a", Quantity: 5})
		w.item(stockcmd.Receive{SKU: "b", Quantity: 5})
		return w, sim
	}
	t.Run("captured through a misbehaving provider: paid once, committed", func(t *testing.T) {
		t.Parallel()
		w, sim := start(t, paysim.Faults{FailRate: 0.3, DropRate: 0.5, TimeoutRate: 0.1, Hold: time.Second}, nil)
		w.placeOrder(map[string]int64{"a": 2, "b": 1})
		w.expect("completed", order.StatusPaid, map[string]stock.State{"a": stock.StateCommitted, "b": stock.StateCommitted})
		l := sim.Ledger()
		if l.Captures("o-1") != 1 || l.Kept("o-1") != 1 {
			t.Errorf("ledger %+v, want exactly one capture", l)
		}
		o := loadOrder(w)
		if o.PaymentReference != l.Keys[0].CaptureID || l.Keys[0].Amount != 750 {
			t.Errorf("paid with %q, the provider captured %+v", o.PaymentReference, l.Keys[0])
		}
		if want := "t-a/" + process.StepKey("fulfilment", "o-1", "capture"); l.Keys[0].Key != want {
			t.Errorf("provider key %q, want %q", l.Keys[0].Key, want)
		}
	})
	t.Run("declined: cancelled and released", func(t *testing.T) {
		t.Parallel()
		w, sim := start(t, paysim.Faults{DeclineOrders: []string{"o-1"}}, nil)
		w.placeOrder(map[string]int64{"a": 2, "b": 1})
		w.expect("cancelled", order.StatusCancelled, map[string]stock.State{"a": stock.StateReleased, "b": stock.StateReleased})
		if r := loadOrder(w).CancellationReason; r != "payment_declined" {
			t.Errorf("reason %q", r)
		}
		if sim.Ledger().Kept("o-1") != 0 {
			t.Error("money kept for a declined order")
		}
	})
	t.Run("the deadline while the capture is outstanding: voided, then cancelled", func(t *testing.T) {
		t.Parallel()
		// The capture cannot reach the provider (a transient failure
		// each time) until the deadline has fired and its void is done;
		// then it reaches a provider that refuses the voided key.
		var held atomic.Bool
		held.Store(true)
		w, sim := start(t, paysim.Faults{}, func(spec *process.Spec) {
			port := spec.Ports[fulfil.PortPayment]
			spec.Ports[fulfil.PortPayment] = process.PortFunc(func(ctx context.Context, tenant domain.TenantID, key string, payload json.RawMessage) (json.RawMessage, error) {
				var p fulfil.Payment
				if err := json.Unmarshal(payload, &p); err != nil {
					return nil, err
				}
				if p.Op == fulfil.PaymentCapture && held.Load() {
					return nil, errors.New("the provider cannot be reached")
				}
				return port.Execute(ctx, tenant, key, payload)
			})
		})
		must(t, w.order(ordercmd.CreateOrder{OrderID: "o-1", CustomerID: "c-1", Currency: "EUR"}))
		must(t, w.order(ordercmd.AddLine{OrderID: "o-1", ProductID: "a", Quantity: 1, UnitPrice: money.Money{Amount: 90, Currency: "EUR"}}))
		must(t, w.order(ordercmd.PlaceOrder{OrderID: "o-1"}))
		w.rt.Settle()
		if d := w.instance(); d.Status != "awaiting_payment" {
			t.Fatalf("status %s, want awaiting_payment with the capture outstanding", d.Status)
		}
		w.rt.AdvanceToDeadline() // the void, then the cancel, then the release
		w.expect("cancelled", order.StatusCancelled, map[string]stock.State{"a": stock.StateReleased})
		if got := w.statuses(); !slices.Contains(got, "voiding") {
			t.Errorf("statuses %v, want voiding before the cancel", got)
		}
		held.Store(false)
		w.run() // the capture, after its void
		w.expect("cancelled", order.StatusCancelled, map[string]stock.State{"a": stock.StateReleased})
		l := sim.Ledger()
		if l.Captures("o-1") != 0 || l.Kept("o-1") != 0 {
			t.Errorf("the capture after its void took money: %+v", l)
		}
		for _, s := range w.instance().Steps {
			if s.Step == fulfil.StepCapture && s.Status != "rejected" {
				t.Errorf("the capture step is %s after its void, want rejected", s.Status)
			}
		}
	})
}
