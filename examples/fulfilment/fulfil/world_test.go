package fulfil_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strata-es/strata/domain/decision"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/examples/fulfilment/fulfil"
	"github.com/strata-es/strata/examples/inventory/stock"
	"github.com/strata-es/strata/examples/orders/order"
)

// world is everything the process talks to, with the real aggregates'
// rules: the order, one inventory item per SKU, a payment provider with
// idempotency keys and voids (the paysim semantics), and a customer who
// may pay by hand or cancel at any moment. The runtime is modelled by its
// guarantees: a step is executed once, at some later moment; its outcome
// is delivered once, later; the order's events reach the instance in
// stream order; the deadline fires once; a Done instance gets nothing.
type world struct {
	t      *testing.T
	rng    *rand.Rand
	p      fulfil.Process
	now    time.Time
	order  *order.Order
	items  map[string]*stock.Item
	log    []decision.Event // the order stream, not yet delivered from next
	next   int
	toRun  []step             // issued, not yet executed
	toTell []decision.Outcome // executed, outcome not yet delivered
	told   []decision.Input   // delivered, for redelivery (duplicates)

	deadlineSet, deadlineFired, deadlineCancelled bool

	// The provider, by idempotency key.
	captured, voided, declinedKeys map[string]bool
	declineRate                    float64
	customerPays, customerCancels  float64

	state  fulfil.State
	exists bool
	done   bool
	trace  []string
}

type step struct {
	cmd    *decision.Command
	intent *decision.Intent
}

func newWorld(t *testing.T, seed uint64, p fulfil.Process) *world {
	rng := rand.New(rand.NewPCG(seed, 7))
	w := &world{t: t, rng: rng, p: p, now: t0, order: &order.Order{}, items: map[string]*stock.Item{},
		captured: map[string]bool{}, voided: map[string]bool{}, declinedKeys: map[string]bool{},
		declineRate: rng.Float64() * 0.5, customerPays: rng.Float64() * 0.3, customerCancels: rng.Float64() * 0.1}
	if !p.CapturePayments {
		w.customerPays = 0.2 + rng.Float64()*0.5
	}
	for _, sku := range []string{"a", "b", "c"} {
		it, _ := stock.Load(nil)
		w.items[sku] = it
		if n := rng.Int64N(6); n > 0 {
			must(t, w.itemDo(sku, func(it *stock.Item) ([]event.Payload, error) { return it.Receive(sku, n, w.now) }))
		}
	}
	return w
}

func (w *world) tick() time.Time { w.now = w.now.Add(time.Second); return w.now }

// orderDo runs a decision on the order aggregate and logs its events.
func (w *world) orderDo(evs []event.Payload, err error) error {
	if err != nil {
		return err
	}
	for _, e := range evs {
		if err := w.order.Apply(e); err != nil {
			w.t.Fatal(err)
		}
		w.log = append(w.log, decision.Event{Record: event.Record{Version: w.order.Version}, Payload: e})
	}
	return nil
}

func (w *world) itemDo(sku string, decide func(*stock.Item) ([]event.Payload, error)) error {
	it := w.items[sku]
	evs, err := decide(it)
	if err != nil {
		return err
	}
	for _, e := range evs {
		if err := it.Apply(e); err != nil {
			w.t.Fatal(err)
		}
	}
	return nil
}

// execute runs one issued step against the world and queues its outcome.
func (w *world) execute(s step) {
	at := w.tick()
	var err error
	var o decision.Outcome
	if c := s.cmd; c != nil {
		o.Step = c.Step
		switch p := c.Payload.(type) {
		case fulfil.ReserveStock:
			err = w.itemDo(p.SKU, func(it *stock.Item) ([]event.Payload, error) {
				return it.Reserve(p.SKU, p.ReservationID, p.Quantity, at)
			})
		case fulfil.ReleaseStock:
			err = w.itemDo(p.SKU, func(it *stock.Item) ([]event.Payload, error) { return it.Release(p.SKU, p.ReservationID, at) })
		case fulfil.CommitStock:
			err = w.itemDo(p.SKU, func(it *stock.Item) ([]event.Payload, error) { return it.Commit(p.SKU, p.ReservationID, at) })
		case fulfil.PayOrder:
			err = w.orderDo(w.order.Pay(p.PaymentReference, at))
		case fulfil.CancelOrder:
			err = w.orderDo(w.order.Cancel(p.Reason, at))
		default:
			w.t.Fatalf("unknown command %s (%T)", c.Name, c.Payload)
		}
	} else {
		i := s.intent
		o.Step = i.Step
		switch p := i.Payload.(fulfil.Payment); p.Op {
		case fulfil.PaymentCapture:
			key := decision.StepKey(fulfil.Name, "o-1", i.Step)
			switch {
			case w.voided[key] || w.declinedKeys[key]:
				err = fmt.Errorf("declined")
			case w.captured[key]:
			case w.rng.Float64() < w.declineRate:
				w.declinedKeys[key] = true
				err = fmt.Errorf("declined")
			default:
				w.captured[key] = true
			}
			if err == nil {
				o.Result, _ = json.Marshal(fulfil.Captured{CaptureID: "cap-" + i.Step})
			}
		case fulfil.PaymentVoid:
			w.voided[p.CaptureKey] = true // voids a capture, tombstones a key not captured
		}
	}
	o.OK = err == nil
	if err != nil {
		o.Reason = err.Error()
	}
	w.trace = append(w.trace, fmt.Sprintf("exec %s ok=%v", o.Step, o.OK))
	w.toTell = append(w.toTell, o)
}

// decide gives the instance one input, as the runtime does.
func (w *world) decide(in decision.Input) {
	if w.done {
		return
	}
	in.Instance, in.At = "o-1", w.tick()
	// Through JSON, as the runtime stores it.
	raw, err := json.Marshal(w.state)
	if err != nil {
		w.t.Fatal(err)
	}
	var s fulfil.State
	if err := json.Unmarshal(raw, &s); err != nil {
		w.t.Fatal(err)
	}
	d, err := w.p.Decide(s, w.exists, in)
	if err != nil {
		w.t.Fatalf("%v\ntrace:\n%s", err, strings.Join(w.trace, "\n"))
	}
	w.trace = append(w.trace, fmt.Sprintf("decide %s -> %s %s", describe(in), d.Status, strings.Join(effects(d), "; ")))
	w.state, w.exists, w.done = d.State, true, d.Done
	w.told = append(w.told, in)
	for i := range d.Commands {
		w.toRun = append(w.toRun, step{cmd: &d.Commands[i]})
	}
	for i := range d.Intents {
		w.toRun = append(w.toRun, step{intent: &d.Intents[i]})
	}
	for _, dl := range d.Deadlines {
		if dl.Name == fulfil.DeadlinePayment {
			w.deadlineSet = true
		}
	}
	if slices.Contains(d.Cancel, fulfil.DeadlinePayment) {
		w.deadlineCancelled = true
	}
}

func describe(in decision.Input) string {
	switch in.Kind {
	case decision.InputEvent:
		return fmt.Sprintf("event v%d %T", in.Event.Version, in.Event.Payload)
	case decision.InputOutcome:
		return fmt.Sprintf("outcome %s ok=%v", in.Outcome.Step, in.Outcome.OK)
	}
	return "timeout " + in.Timeout.Name
}

// step takes one random action; false when nothing is left to do.
func (w *world) step() bool {
	type action func()
	var acts []action
	if w.next < len(w.log) {
		acts = append(acts, func() {
			e := w.log[w.next]
			w.next++
			w.decide(decision.Input{Kind: decision.InputEvent, Event: &e})
		})
	}
	if len(w.toRun) > 0 {
		acts = append(acts, func() {
			i := w.rng.IntN(len(w.toRun))
			s := w.toRun[i]
			w.toRun = slices.Delete(w.toRun, i, i+1)
			w.execute(s)
		})
	}
	if len(w.toTell) > 0 {
		acts = append(acts, func() {
			i := w.rng.IntN(len(w.toTell))
			o := w.toTell[i]
			w.toTell = slices.Delete(w.toTell, i, i+1)
			w.decide(decision.Input{Kind: decision.InputOutcome, Outcome: &o})
		})
	}
	if w.deadlineSet && !w.deadlineFired && !w.deadlineCancelled {
		acts = append(acts, func() {
			w.deadlineFired = true
			w.decide(decision.Input{Kind: decision.InputTimeout, Timeout: &decision.Timeout{Name: fulfil.DeadlinePayment}})
		})
	}
	if len(acts) == 0 {
		return false
	}
	// The customer and redeliveries, now and then.
	if w.order.Status == order.StatusPlaced && w.rng.Float64() < w.customerPays/4 {
		_ = w.orderDo(w.order.Pay("by-hand", w.tick()))
	}
	if w.rng.Float64() < w.customerCancels/4 {
		_ = w.orderDo(w.order.Cancel("customer", w.tick()))
	}
	if len(w.told) > 0 && w.rng.IntN(10) == 0 {
		w.decide(w.told[w.rng.IntN(len(w.told))])
	}
	acts[w.rng.IntN(len(acts))]()
	return true
}

// TestDecide_World runs the process against the world in many random
// interleavings and checks the invariants the chaos harness checks, from
// the world's side: the instance ends Done; no stock of the order is left
// reserved; a paid order is completed (or visibly paid_unfulfilled, with
// nothing held), a cancelled one is cancelled with no capture kept; no
// capture is kept for an order not paid with it.
func TestDecide_World(t *testing.T) {
	t.Parallel()
	for _, p := range []fulfil.Process{manual, http} {
		for seed := range uint64(3000) {
			w := newWorld(t, seed, p)
			ctx := fmt.Sprintf("capture=%v seed %d", p.CapturePayments, seed)
			at := w.tick()
			must(t, w.orderDo(w.order.Create("o-1", "c-1", "EUR", at)))
			skus := []string{"a", "b", "c"}[:1+w.rng.IntN(3)]
			for _, sku := range skus {
				must(t, w.orderDo(w.order.AddLine(sku, 1+w.rng.Int64N(3), eur(100), w.tick())))
			}
			must(t, w.orderDo(w.order.Place(w.tick())))
			for w.step() {
			}
			// What the runtime still dispatches after Done.
			for len(w.toRun) > 0 {
				s := w.toRun[0]
				w.toRun = w.toRun[1:]
				w.execute(s)
			}
			fail := func(format string, args ...any) {
				t.Helper()
				t.Fatalf("%s: %s\ntrace:\n%s", ctx, fmt.Sprintf(format, args...), strings.Join(w.trace, "\n"))
			}
			if !w.done {
				fail("not terminal: status %s", w.state.Status)
			}
			for sku, it := range w.items {
				if r, ok := it.Reservations["o-1"]; ok && r.State == stock.StateOpen {
					fail("stock of %s left reserved", sku)
				}
			}
			kept := w.captured[captureKey] && !w.voided[captureKey]
			switch w.order.Status {
			case order.StatusPaid:
				switch w.state.Status {
				case fulfil.StatusCompleted:
					for _, sku := range skus {
						if w.items[sku].Reservations["o-1"].State != stock.StateCommitted {
							fail("completed but %s not committed", sku)
						}
					}
				case fulfil.StatusPaidUnfulfilled:
				default:
					fail("paid order ends %s", w.state.Status)
				}
				ours := w.order.PaymentReference == "cap-"+fulfil.StepCapture
				if ours != kept {
					fail("paid with %q, our capture kept %v", w.order.PaymentReference, kept)
				}
			case order.StatusCancelled:
				if w.state.Status != fulfil.StatusCancelled {
					fail("cancelled order ends %s", w.state.Status)
				}
				if kept {
					fail("a capture is kept for a cancelled order")
				}
			default:
				fail("order left %s, instance %s", w.order.Status, w.state.Status)
			}
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
