package fulfilcmd_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/strata-es/strata/commands"
	"github.com/strata-es/strata/commands/commandapi"
	"github.com/strata-es/strata/commands/process"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples/fulfilment/fulfil"
	"github.com/strata-es/strata/examples/fulfilment/fulfilcmd"
	"github.com/strata-es/strata/examples/inventory/stock"
	"github.com/strata-es/strata/examples/inventory/stockcmd"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/ordercmd"
	"github.com/strata-es/strata/internal/paysim"
	"github.com/strata-es/strata/internal/pgtest"
	"github.com/strata-es/strata/internal/testdb"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var registry = event.NewRegistry(append(order.Codecs(), stock.Codecs()...)...)

// driver stands in for the process runtime with its guarantees, no more:
// it gives the instance the order stream's events in order, dispatches
// every issued step with its deterministic key — twice, as a re-dispatch
// after a crash would — retrying a retryable failure with the same key,
// and delivers each outcome once. It is how this package tests its wiring
// (real handlers on PostgreSQL, the http port against paysim) without the
// runtime, which commands/process tests on its own.
type driver struct {
	t      *testing.T
	ctx    context.Context
	tenant domain.TenantID
	store  *postgres.Store
	spec   process.Spec
	def    process.Definition[fulfil.State]
	orders *commands.Handler[*order.Order]
	items  *commands.Handler[*stock.Item]

	state   fulfil.State
	exists  bool
	status  string
	done    bool
	version int64
	steps   []step
	due     *time.Time
	history []string
}

type step struct {
	key, name string
	intent    bool
	payload   json.RawMessage
}

func newDriver(t *testing.T, cfg fulfilcmd.Config) *driver {
	t.Helper()
	d := testdb.New(t)
	store := postgres.New(d.App, d.Projector)
	deps := commandapi.Deps{Store: store, Idempotency: store, Config: commands.Config{Registry: registry}}
	specs, err := fulfilcmd.Processes(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 1 || specs[0].Manager.Name() != "fulfilment" {
		t.Fatalf("specs %+v", specs)
	}
	orders, err := commands.NewHandler(ordercmd.Aggregate, store, store, deps.Config)
	if err != nil {
		t.Fatal(err)
	}
	items, err := commands.NewHandler(stockcmd.Aggregate, store, store, deps.Config)
	if err != nil {
		t.Fatal(err)
	}
	cfgd := cfg
	if cfgd.PaymentTimeout == 0 {
		cfgd.PaymentTimeout = fulfilcmd.DefaultPaymentTimeout
	}
	return &driver{t: t, ctx: domain.NewContext(context.Background(), "t-a"), tenant: "t-a", store: store, spec: specs[0],
		def: fulfilcmd.Definition(cfgd), orders: orders, items: items}
}

func (d *driver) order(cmd ordercmd.Command) error {
	_, err := d.orders.Handle(d.ctx, cmd, commands.Options{})
	return err
}

func (d *driver) item(cmd stockcmd.Command) {
	d.t.Helper()
	if _, err := d.items.Handle(d.ctx, cmd, commands.Options{}); err != nil {
		d.t.Fatal(err)
	}
}

func (d *driver) decide(in process.Input) {
	d.t.Helper()
	if d.done {
		return
	}
	in.Instance, in.Tenant, in.At = "o-1", d.tenant, time.Now().UTC()
	// Through JSON, as the runtime stores the state.
	raw, _ := json.Marshal(d.state)
	var s fulfil.State
	if err := json.Unmarshal(raw, &s); err != nil {
		d.t.Fatal(err)
	}
	dec, err := d.def.Decide(s, d.exists, in)
	if err != nil {
		d.t.Fatalf("decide: %v", err)
	}
	d.state, d.exists, d.status, d.done = dec.State, true, dec.Status, dec.Done
	d.history = append(d.history, fmt.Sprintf("%s -> %s (%s)", in.Kind, dec.Status, dec.Note))
	for _, c := range dec.Commands {
		p, _ := json.Marshal(c.Payload)
		d.steps = append(d.steps, step{key: c.Step, name: c.Name, payload: p})
	}
	for _, i := range dec.Intents {
		p, _ := json.Marshal(i.Payload)
		d.steps = append(d.steps, step{key: i.Step, name: i.Port, intent: true, payload: p})
	}
	for _, dl := range dec.Deadlines {
		at := dl.At
		d.due = &at
	}
}

// run drives until nothing is left to do.
func (d *driver) run() {
	d.t.Helper()
	for n := 0; n < 100; n++ {
		recs, err := d.store.ReadStream(d.ctx, string(d.tenant), order.StreamID("o-1"), d.version)
		if err != nil {
			d.t.Fatal(err)
		}
		for _, r := range recs {
			p, err := registry.DecodeRecord(r)
			if err != nil {
				d.t.Fatal(err)
			}
			d.version = r.Version
			d.decide(process.Input{Kind: process.InputEvent, Event: &process.Event{Record: r, Payload: p}})
		}
		if len(d.steps) == 0 {
			if len(recs) == 0 {
				return
			}
			continue
		}
		s := d.steps[0]
		d.steps = d.steps[1:]
		d.decide(process.Input{Kind: process.InputOutcome, Outcome: d.dispatch(s)})
	}
	d.t.Fatalf("no end in sight:\n%v", d.history)
}

// dispatch executes a step until it has a definite outcome, then once more
// with the same key (the re-dispatch after a crash), which must agree.
func (d *driver) dispatch(s step) *process.Outcome {
	d.t.Helper()
	key := process.StepKey(fulfilcmd.Name, "o-1", s.key)
	exec := func() (json.RawMessage, error) {
		if s.intent {
			return d.spec.Ports[s.name].Execute(d.ctx, d.tenant, key, s.payload)
		}
		return d.spec.Commands[s.name](d.ctx, d.tenant, s.payload, key)
	}
	definite := func() (json.RawMessage, error) {
		for attempt := 0; ; attempt++ {
			res, err := exec()
			if err == nil || process.IsDefinite(err) {
				return res, err
			}
			if attempt > 30 {
				d.t.Fatalf("step %s: %v", s.key, err)
			}
		}
	}
	res, err := definite()
	again, err2 := definite()
	if (err == nil) != (err2 == nil) || err == nil && !s.intent && string(res) != string(again) {
		d.t.Fatalf("step %s dispatched again: %s %v, first %s %v", s.key, again, err2, res, err)
	}
	o := &process.Outcome{Step: s.key, Name: s.name, OK: err == nil, Result: res}
	if s.intent {
		o.Kind = process.StepIntent
	} else {
		o.Kind = process.StepCommand
	}
	var r *process.Rejected
	if errors.As(err, &r) {
		o.Reason = r.Reason
	} else if err != nil {
		o.Reason = err.Error()
	}
	return o
}

func (d *driver) fireDeadline() {
	d.t.Helper()
	if d.due == nil {
		d.t.Fatal("no deadline set")
	}
	d.decide(process.Input{Kind: process.InputTimeout, Timeout: &process.Timeout{Name: fulfil.DeadlinePayment, Due: *d.due}})
	d.run()
}

func (d *driver) placeOrder(lines map[string]int64) {
	d.t.Helper()
	must(d.t, d.order(ordercmd.CreateOrder{OrderID: "o-1", CustomerID: "c-1", Currency: "EUR"}))
	for _, sku := range []string{"a", "b", "c"} {
		if q, ok := lines[sku]; ok {
			must(d.t, d.order(ordercmd.AddLine{OrderID: "o-1", ProductID: sku, Quantity: q, UnitPrice: order.Money{Amount: 250, Currency: "EUR"}}))
		}
	}
	must(d.t, d.order(ordercmd.PlaceOrder{OrderID: "o-1"}))
	d.run()
}

func (d *driver) expect(status string, orderStatus order.Status, reservations map[string]stock.State) {
	d.t.Helper()
	if d.status != status {
		d.t.Errorf("status %s, want %s\n%v", d.status, status, d.history)
	}
	o := loadOrder(d)
	if o.Status != orderStatus {
		d.t.Errorf("order %s, want %s", o.Status, orderStatus)
	}
	for sku, want := range reservations {
		recs, err := d.store.ReadStream(d.ctx, string(d.tenant), stock.StreamID(sku), 0)
		if err != nil {
			d.t.Fatal(err)
		}
		var hist []event.Payload
		for _, r := range recs {
			p, _ := registry.DecodeRecord(r)
			hist = append(hist, p)
		}
		it, err := stock.Load(hist)
		if err != nil {
			d.t.Fatal(err)
		}
		if got := it.Reservations["o-1"].State; got != want {
			d.t.Errorf("reservation of %s is %q, want %q", sku, got, want)
		}
	}
}

func loadOrder(d *driver) *order.Order {
	recs, err := d.store.ReadStream(d.ctx, string(d.tenant), order.StreamID("o-1"), 0)
	if err != nil {
		d.t.Fatal(err)
	}
	var hist []event.Payload
	for _, r := range recs {
		p, _ := registry.DecodeRecord(r)
		hist = append(hist, p)
	}
	o, err := order.Load(hist)
	if err != nil {
		d.t.Fatal(err)
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
		d := newDriver(t, fulfilcmd.Config{})
		d.item(stockcmd.Receive{SKU: "a", Quantity: 5})
		d.item(stockcmd.Receive{SKU: "b", Quantity: 5})
		d.placeOrder(map[string]int64{"a": 2, "b": 3})
		d.expect("awaiting_payment", order.StatusPlaced, map[string]stock.State{"a": stock.StateOpen, "b": stock.StateOpen})
		must(t, d.order(ordercmd.PayOrder{OrderID: "o-1", PaymentReference: "cash-1"}))
		d.run()
		d.expect("completed", order.StatusPaid, map[string]stock.State{"a": stock.StateCommitted, "b": stock.StateCommitted})
	})
	t.Run("second line out of stock: released and cancelled", func(t *testing.T) {
		t.Parallel()
		d := newDriver(t, fulfilcmd.Config{})
		d.item(stockcmd.Receive{SKU: "a", Quantity: 5})
		d.item(stockcmd.Receive{SKU: "b", Quantity: 1})
		d.placeOrder(map[string]int64{"a": 2, "b": 3})
		d.expect("cancelled", order.StatusCancelled, map[string]stock.State{"a": stock.StateReleased})
		if r := loadOrder(d).CancellationReason; r != "out_of_stock" {
			t.Errorf("reason %q", r)
		}
	})
	t.Run("unpaid past the deadline: cancelled and released", func(t *testing.T) {
		t.Parallel()
		d := newDriver(t, fulfilcmd.Config{PaymentTimeout: time.Minute})
		d.item(stockcmd.Receive{SKU: "a", Quantity: 5})
		d.placeOrder(map[string]int64{"a": 2})
		if d.due == nil || d.due.Sub(loadOrder(d).PlacedAt) != time.Minute {
			t.Fatalf("deadline %v, want placed + 1m", d.due)
		}
		d.fireDeadline()
		d.expect("cancelled", order.StatusCancelled, map[string]stock.State{"a": stock.StateReleased})
		if r := loadOrder(d).CancellationReason; r != "payment_timeout" {
			t.Errorf("reason %q", r)
		}
	})
	t.Run("paid, then the deadline: the cancel is refused, committed", func(t *testing.T) {
		t.Parallel()
		d := newDriver(t, fulfilcmd.Config{})
		d.item(stockcmd.Receive{SKU: "a", Quantity: 5})
		d.placeOrder(map[string]int64{"a": 2})
		must(t, d.order(ordercmd.PayOrder{OrderID: "o-1", PaymentReference: "cash-1"}))
		// The deadline fires before the instance saw order.paid.
		d.decide(process.Input{Kind: process.InputTimeout, Timeout: &process.Timeout{Name: fulfil.DeadlinePayment}})
		d.run()
		d.expect("completed", order.StatusPaid, map[string]stock.State{"a": stock.StateCommitted})
	})
}

func TestHTTP(t *testing.T) {
	t.Parallel()
	start := func(t *testing.T, f paysim.Faults) (*driver, *paysim.Server) {
		sim := paysim.Start(paysim.Config{Seed: 3, Faults: f})
		t.Cleanup(sim.Close)
		d := newDriver(t, fulfilcmd.Config{Provider: "http", PaymentURL: sim.URL(), HTTPTimeout: 200 * time.Millisecond})
		d.item(stockcmd.Receive{SKU: "a", Quantity: 5})
		d.item(stockcmd.Receive{SKU: "b", Quantity: 5})
		return d, sim
	}
	t.Run("captured through a misbehaving provider: paid once, committed", func(t *testing.T) {
		t.Parallel()
		d, sim := start(t, paysim.Faults{FailRate: 0.3, DropRate: 0.5, TimeoutRate: 0.1, Hold: time.Second})
		d.placeOrder(map[string]int64{"a": 2, "b": 1})
		d.expect("completed", order.StatusPaid, map[string]stock.State{"a": stock.StateCommitted, "b": stock.StateCommitted})
		l := sim.Ledger()
		if l.Captures("o-1") != 1 || l.Kept("o-1") != 1 {
			t.Errorf("ledger %+v, want exactly one capture", l)
		}
		o := loadOrder(d)
		if o.PaymentReference != l.Keys[0].CaptureID || l.Keys[0].Amount != 750 {
			t.Errorf("paid with %q, the provider captured %+v", o.PaymentReference, l.Keys[0])
		}
		if want := "t-a/" + process.StepKey("fulfilment", "o-1", "capture"); l.Keys[0].Key != want {
			t.Errorf("provider key %q, want %q", l.Keys[0].Key, want)
		}
	})
	t.Run("declined: cancelled and released", func(t *testing.T) {
		t.Parallel()
		d, sim := start(t, paysim.Faults{DeclineOrders: []string{"o-1"}})
		d.placeOrder(map[string]int64{"a": 2, "b": 1})
		d.expect("cancelled", order.StatusCancelled, map[string]stock.State{"a": stock.StateReleased, "b": stock.StateReleased})
		if r := loadOrder(d).CancellationReason; r != "payment_declined" {
			t.Errorf("reason %q", r)
		}
		if sim.Ledger().Kept("o-1") != 0 {
			t.Error("money kept for a declined order")
		}
	})
	t.Run("the deadline while the capture is outstanding: voided, then cancelled", func(t *testing.T) {
		t.Parallel()
		d, sim := start(t, paysim.Faults{})
		must(t, d.order(ordercmd.CreateOrder{OrderID: "o-1", CustomerID: "c-1", Currency: "EUR"}))
		must(t, d.order(ordercmd.AddLine{OrderID: "o-1", ProductID: "a", Quantity: 1, UnitPrice: order.Money{Amount: 90, Currency: "EUR"}}))
		must(t, d.order(ordercmd.PlaceOrder{OrderID: "o-1"}))
		// Run by hand: the reservation, then the deadline before the
		// capture is dispatched, then the capture (after the void).
		recs, _ := d.store.ReadStream(d.ctx, "t-a", order.StreamID("o-1"), 0)
		for _, r := range recs {
			p, _ := registry.DecodeRecord(r)
			d.version = r.Version
			d.decide(process.Input{Kind: process.InputEvent, Event: &process.Event{Record: r, Payload: p}})
		}
		reserve := d.steps[0]
		d.steps = nil
		d.decide(process.Input{Kind: process.InputOutcome, Outcome: d.dispatch(reserve)})
		if d.status != "awaiting_payment" || len(d.steps) != 1 || d.steps[0].key != "capture" {
			t.Fatalf("status %s, steps %+v", d.status, d.steps)
		}
		capture := d.steps[0]
		d.steps = nil
		d.decide(process.Input{Kind: process.InputTimeout, Timeout: &process.Timeout{Name: fulfil.DeadlinePayment}})
		if d.status != "voiding" {
			t.Fatalf("status %s, want voiding", d.status)
		}
		d.run() // the void, then the cancel, then the release
		d.decide(process.Input{Kind: process.InputOutcome, Outcome: d.dispatch(capture)})
		d.run()
		d.expect("cancelled", order.StatusCancelled, map[string]stock.State{"a": stock.StateReleased})
		l := sim.Ledger()
		if l.Captures("o-1") != 0 || l.Kept("o-1") != 0 {
			t.Errorf("the capture after its void took money: %+v", l)
		}
	})
}
