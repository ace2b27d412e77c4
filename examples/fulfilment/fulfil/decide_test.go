package fulfil_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strata-es/strata/commands/process/processtest"
	"github.com/strata-es/strata/domain/decision"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/domain/money"
	"github.com/strata-es/strata/examples/fulfilment/fulfil"
	"github.com/strata-es/strata/examples/orders/order"
)

var (
	t0      = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	timeout = 15 * time.Minute
	manual  = fulfil.Process{PaymentTimeout: timeout}
	http    = fulfil.Process{PaymentTimeout: timeout, CapturePayments: true}
)

// Inputs, completed by the process kit as the runtime would (the order
// stream's versions in the order given, each a second after the last);
// again repeats the previous input, as a redelivery would.
type in = processtest.Input

func evt(p event.Payload) in { return processtest.Event(p) }
func created() in {
	return evt(order.Created{OrderID: "o-1", CustomerID: "c-1", Currency: "EUR", At: t0})
}
func line(sku string, q int64) in {
	return evt(order.LineAdded{OrderID: "o-1", ProductID: sku, Quantity: q, UnitPrice: eur(100), At: t0})
}
func unline(sku string) in { return evt(order.LineRemoved{OrderID: "o-1", ProductID: sku, At: t0}) }
func placed() in           { return evt(order.Placed{OrderID: "o-1", Total: eur(500), At: t0.Add(time.Minute)}) }
func paid(ref string) in {
	return evt(&order.Paid{OrderID: "o-1", PaymentReference: ref, Amount: eur(500), At: t0.Add(2 * time.Minute)})
}
func cancelled(reason string) in {
	return evt(order.Cancelled{OrderID: "o-1", Reason: reason, At: t0.Add(2 * time.Minute)})
}
func again() in         { return processtest.Again() }
func ok(step string) in { return processtest.OK(step, nil) }
func no(step string) in { return processtest.Refused(step, "rejected: no") }
func captured(ref string) in {
	return processtest.OK(fulfil.StepCapture, fulfil.Captured{CaptureID: ref})
}
func declined() in { return no(fulfil.StepCapture) }
func deadline() in { return processtest.Fired(fulfil.DeadlinePayment) }

func eur(n int64) money.Money { return money.Money{Amount: n, Currency: "EUR"} }

// Shorthands for histories used again and again.
var (
	draft2    = []in{created(), line("a", 2), line("b", 3)}
	placed2   = append(slices.Clone(draft2), placed())
	held2     = append(slices.Clone(placed2), ok("reserve:a"), ok("reserve:b"))
	capturing = held2
	captured2 = append(slices.Clone(held2), captured("cap-1"))
)

func cat(parts ...[]in) []in { return slices.Concat(parts...) }

// scenario is one order's instance of p, decided by the process kit: the
// state through JSON, the events through the order module's codecs,
// Decide called twice per input (it must be deterministic), nothing
// decided once Done.
func scenario(t testing.TB, p fulfil.Process) *processtest.Scenario[fulfil.State] {
	return processtest.For(t, p.Decide).Instance("o-1").Stream(order.StreamID("o-1")).Codecs(order.Registry).At(t0)
}

// run folds the inputs and returns the last decision.
func run(t *testing.T, p fulfil.Process, inputs []in) decision.Decision[fulfil.State] {
	t.Helper()
	d, err := scenario(t, p).Given(inputs[:len(inputs)-1]...).When(inputs[len(inputs)-1]).Decision()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// captureKey is the capture step's idempotency key, which a void names.
var captureKey = decision.StepKey(fulfil.Name, "o-1", fulfil.StepCapture)

// effects renders a decision's effects, one short line each.
func effects(d decision.Decision[fulfil.State]) []string {
	var out []string
	for _, c := range d.Commands {
		s := c.Step + " " + c.Name
		switch p := c.Payload.(type) {
		case fulfil.ReserveStock:
			s += fmt.Sprintf(" %s x%d for %s", p.SKU, p.Quantity, p.ReservationID)
		case fulfil.ReleaseStock:
			s += fmt.Sprintf(" %s for %s", p.SKU, p.ReservationID)
		case fulfil.CommitStock:
			s += fmt.Sprintf(" %s for %s", p.SKU, p.ReservationID)
		case fulfil.PayOrder:
			s += " ref " + p.PaymentReference
		case fulfil.CancelOrder:
			s += " reason " + p.Reason
		default:
			s += fmt.Sprintf(" %T", p)
		}
		out = append(out, s)
	}
	for _, i := range d.Intents {
		p := i.Payload.(fulfil.Payment)
		switch p.Op {
		case fulfil.PaymentCapture:
			out = append(out, fmt.Sprintf("%s %s capture %d %s of %s", i.Step, i.Port, p.Amount, p.Currency, p.OrderID))
		case fulfil.PaymentVoid:
			voided := p.CaptureKey
			if voided == captureKey {
				voided = fulfil.StepCapture
			}
			out = append(out, fmt.Sprintf("%s %s void %s of %s", i.Step, i.Port, voided, p.OrderID))
		}
	}
	for _, dl := range d.Deadlines {
		out = append(out, "deadline "+dl.Name+" at "+dl.At.Format(time.TimeOnly))
	}
	for _, c := range d.Cancel {
		out = append(out, "cancel deadline "+c)
	}
	return out
}

type transition struct {
	name    string
	p       fulfil.Process
	given   []in
	when    in
	status  string
	done    bool
	effects []string
}

func check(t *testing.T, tests []transition) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d, err := scenario(t, tt.p).Given(tt.given...).When(tt.when).Decision()
			if err != nil {
				t.Fatal(err)
			}
			if d.Status != tt.status || d.Done != tt.done {
				t.Errorf("status %s (done %v), want %s (done %v); note %q", d.Status, d.Done, tt.status, tt.done, d.Note)
			}
			if got := effects(d); !slices.Equal(got, tt.effects) {
				t.Errorf("effects:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tt.effects, "\n  "))
			}
		})
	}
}

// The happy paths, one transition at a time.
func TestDecide_Flow(t *testing.T) {
	t.Parallel()
	check(t, []transition{
		{name: "created: a draft", p: manual, when: created(), status: "draft"},
		{name: "line added: still a draft", p: manual, given: []in{created()}, when: line("a", 2), status: "draft"},
		{name: "line removed: still a draft", p: manual, given: []in{created(), line("a", 2)}, when: unline("a"), status: "draft"},
		{name: "placed: reserve each line, set the deadline", p: manual, given: draft2, when: placed(), status: "reserving",
			effects: []string{"reserve:a inventory.reserve a x2 for o-1", "reserve:b inventory.reserve b x3 for o-1", "deadline payment at 12:16:00"}},
		{name: "placed: a removed line is not reserved, a re-added one sums", p: manual,
			given: []in{created(), line("a", 2), line("b", 1), unline("b"), line("a", 1)}, when: placed(), status: "reserving",
			effects: []string{"reserve:a inventory.reserve a x3 for o-1", "deadline payment at 12:16:00"}},
		{name: "first reservation ok: still reserving", p: manual, given: placed2, when: ok("reserve:a"), status: "reserving"},
		{name: "manual: all reserved, waiting for the customer", p: manual, given: cat(placed2, []in{ok("reserve:a")}), when: ok("reserve:b"),
			status: "awaiting_payment"},
		{name: "http: all reserved, capture", p: http, given: cat(placed2, []in{ok("reserve:b")}), when: ok("reserve:a"),
			status: "awaiting_payment", effects: []string{"capture payment capture 500 EUR of o-1"}},
		{name: "http: captured, pay with the reference", p: http, given: capturing, when: captured("cap-1"),
			status: "paying", effects: []string{"pay order.pay ref cap-1"}},
		{name: "http: pay ok, waiting for order.paid", p: http, given: captured2, when: ok("pay"), status: "paying"},
		{name: "http: paid, commit each line, cancel the deadline", p: http, given: cat(captured2, []in{ok("pay")}), when: paid("cap-1"),
			status: "committing", effects: []string{"commit:a inventory.commit a for o-1", "commit:b inventory.commit b for o-1", "cancel deadline payment"}},
		{name: "manual: paid, commit each line", p: manual, given: held2, when: paid("manual-7"),
			status: "committing", effects: []string{"commit:a inventory.commit a for o-1", "commit:b inventory.commit b for o-1", "cancel deadline payment"}},
		{name: "first commit ok: still committing", p: manual, given: cat(held2, []in{paid("r")}), when: ok("commit:a"), status: "committing"},
		{name: "all committed: completed", p: manual, given: cat(held2, []in{paid("r"), ok("commit:a")}), when: ok("commit:b"),
			status: "completed", done: true},
	})
}

// The steps as the runtime stores and dispatches them: each payload's JSON
// is what the bound command (or the payment port) decodes.
func TestDecide_Payloads(t *testing.T) {
	t.Parallel()
	scenario(t, http).Given(draft2...).When(placed()).Then(processtest.Want{Status: "reserving",
		Commands: []decision.Command{
			{Step: "reserve:a", Name: "inventory.reserve", Payload: map[string]any{"sku": "a", "reservation_id": "o-1", "quantity": 2}},
			{Step: "reserve:b", Name: "inventory.reserve", Payload: map[string]any{"sku": "b", "reservation_id": "o-1", "quantity": 3}},
		},
		Deadlines: []decision.Deadline{{Name: "payment", At: t0.Add(16 * time.Minute)}}})
	scenario(t, http).Given(placed2...).Given(ok("reserve:a")).When(ok("reserve:b")).Then(processtest.Want{Status: "awaiting_payment",
		Intents: []decision.Intent{{Step: "capture", Port: "payment", Payload: map[string]any{"op": "capture", "order_id": "o-1", "amount": 500, "currency": "EUR"}}}})
	scenario(t, http).Given(capturing...).When(captured("cap-1")).Then(processtest.Want{Status: "paying",
		Commands: []decision.Command{{Step: "pay", Name: "order.pay", Payload: map[string]any{"order_id": "o-1", "payment_reference": "cap-1"}}}})
	scenario(t, http).Given(capturing...).When(deadline()).Then(processtest.Want{Status: "voiding",
		Intents: []decision.Intent{{Step: "void", Port: "payment", Payload: map[string]any{"op": "void", "order_id": "o-1", "capture_key": "pm:fulfilment:o-1:capture"}}}})
	scenario(t, manual).Given(held2...).When(deadline()).Then(processtest.Want{Status: "cancelling",
		Commands: []decision.Command{{Step: "cancel", Name: "order.cancel", Payload: map[string]any{"order_id": "o-1", "reason": "payment_timeout"}}}})
}

// Compensation: out of stock, declines, cancels, the deadline.
func TestDecide_Compensation(t *testing.T) {
	t.Parallel()
	check(t, []transition{
		{name: "second line out of stock, first outstanding: wait", p: manual, given: placed2, when: no("reserve:b"), status: "reserving"},
		{name: "second line out of stock, first held: release it and cancel", p: manual, given: cat(placed2, []in{ok("reserve:a")}), when: no("reserve:b"),
			status: "releasing", effects: []string{"release:a inventory.release a for o-1", "cancel order.cancel reason out_of_stock"}},
		{name: "out of stock, first held later: release it and cancel", p: manual, given: cat(placed2, []in{no("reserve:b")}), when: ok("reserve:a"),
			status: "releasing", effects: []string{"release:a inventory.release a for o-1", "cancel order.cancel reason out_of_stock"}},
		{name: "every line out of stock: cancel, nothing to release", p: manual, given: cat(placed2, []in{no("reserve:b")}), when: no("reserve:a"),
			status: "cancelling", effects: []string{"cancel order.cancel reason out_of_stock"}},
		{name: "out of stock: released and cancel accepted, waiting for the event", p: manual,
			given: cat(placed2, []in{ok("reserve:a"), no("reserve:b"), ok("release:a")}), when: ok("cancel"), status: "cancelling"},
		{name: "out of stock: cancelled, all released: cancelled", p: manual,
			given: cat(placed2, []in{ok("reserve:a"), no("reserve:b"), ok("release:a"), ok("cancel")}), when: cancelled("out_of_stock"),
			status: "cancelled", done: true, effects: []string{"cancel deadline payment"}},
		{name: "out of stock: cancelled before the release's outcome", p: manual,
			given: cat(placed2, []in{ok("reserve:a"), no("reserve:b"), ok("cancel"), cancelled("out_of_stock")}), when: ok("release:a"),
			status: "cancelled", done: true},
		{name: "http: declined: cancel", p: http, given: capturing, when: declined(),
			status: "cancelling", effects: []string{"cancel order.cancel reason payment_declined"}},
		{name: "http: declined, cancelled: release every line", p: http, given: cat(capturing, []in{declined(), ok("cancel")}), when: cancelled("payment_declined"),
			status: "releasing", effects: []string{"release:a inventory.release a for o-1", "release:b inventory.release b for o-1", "cancel deadline payment"}},
		{name: "http: declined, released: cancelled", p: http, given: cat(capturing, []in{declined(), ok("cancel"), cancelled("payment_declined"), ok("release:a")}),
			when: ok("release:b"), status: "cancelled", done: true},
		{name: "customer cancels an awaiting order: release every line", p: manual, given: held2, when: cancelled("changed my mind"),
			status: "releasing", effects: []string{"release:a inventory.release a for o-1", "release:b inventory.release b for o-1", "cancel deadline payment"}},
		{name: "customer cancels while reserving: release what is held, wait for the rest", p: manual, given: cat(placed2, []in{ok("reserve:a")}), when: cancelled(""),
			status: "releasing", effects: []string{"release:a inventory.release a for o-1", "cancel deadline payment"}},
		{name: "customer cancelled while reserving: a late success is released", p: manual, given: cat(placed2, []in{ok("reserve:a"), cancelled("")}), when: ok("reserve:b"),
			status: "releasing", effects: []string{"release:b inventory.release b for o-1"}},
		{name: "customer cancelled while reserving: a late refusal needs nothing", p: manual, given: cat(placed2, []in{ok("reserve:a"), cancelled(""), ok("release:a")}), when: no("reserve:b"),
			status: "cancelled", done: true},
		{name: "cancelled in draft: nothing held", p: manual, given: draft2, when: cancelled(""), status: "cancelled", done: true},
		{name: "manual: deadline: cancel", p: manual, given: held2, when: deadline(),
			status: "cancelling", effects: []string{"cancel order.cancel reason payment_timeout"}},
		{name: "manual: deadline, cancelled: release", p: manual, given: cat(held2, []in{deadline(), ok("cancel")}), when: cancelled("payment_timeout"),
			status: "releasing", effects: []string{"release:a inventory.release a for o-1", "release:b inventory.release b for o-1"}},
		{name: "deadline while reserving: cancel at once", p: manual, given: placed2, when: deadline(),
			status: "cancelling", effects: []string{"cancel order.cancel reason payment_timeout"}},
		{name: "http: deadline with a capture outstanding: void first", p: http, given: capturing, when: deadline(),
			status: "voiding", effects: []string{"void payment void capture of o-1"}},
		{name: "http: voided: cancel", p: http, given: cat(capturing, []in{deadline()}), when: ok("void"),
			status: "cancelling", effects: []string{"cancel order.cancel reason payment_timeout"}},
		{name: "http: timed out, voided, cancelled: release, no second void", p: http, given: cat(capturing, []in{deadline(), ok("void"), ok("cancel")}),
			when: cancelled("payment_timeout"), status: "releasing",
			effects: []string{"release:a inventory.release a for o-1", "release:b inventory.release b for o-1"}},
		{name: "http: deadline after a decline's cancel: nothing more", p: http, given: cat(capturing, []in{declined()}), when: deadline(), status: "cancelling"},
		{name: "http: the provider refuses the void: the capture stands and is paid when it comes", p: http, given: cat(capturing, []in{deadline(), no("void")}),
			when: captured("cap-1"), status: "paying", effects: []string{"pay order.pay ref cap-1"}},
		{name: "http: void refused and the capture declined: cancel", p: http, given: cat(capturing, []in{deadline(), no("void")}),
			when: declined(), status: "cancelling", effects: []string{"cancel order.cancel reason payment_timeout"}},
	})
}

// Races, duplicates and odd orders.
func TestDecide_Races(t *testing.T) {
	t.Parallel()
	check(t, []transition{
		// Duplicates of every kind of input change nothing.
		{name: "duplicate placed", p: manual, given: placed2, when: again(), status: "reserving"},
		{name: "duplicate reservation outcome", p: http, given: cat(placed2, []in{ok("reserve:a")}), when: again(), status: "reserving"},
		{name: "duplicate last reservation outcome: one capture", p: http, given: held2, when: again(), status: "awaiting_payment"},
		{name: "duplicate capture outcome: one pay", p: http, given: captured2, when: again(), status: "paying"},
		{name: "duplicate paid: one commit each", p: manual, given: cat(held2, []in{paid("r")}), when: again(), status: "committing"},
		{name: "duplicate cancelled", p: manual, given: cat(held2, []in{cancelled("")}), when: again(), status: "releasing"},
		{name: "duplicate deadline", p: manual, given: cat(held2, []in{deadline()}), when: again(), status: "cancelling"},
		{name: "duplicate refusal", p: manual, given: cat(placed2, []in{ok("reserve:a"), no("reserve:b")}), when: again(), status: "releasing"},
		{name: "duplicate line added is not counted twice", p: manual, given: []in{created(), line("a", 2), again()}, when: placed(),
			status: "reserving", effects: []string{"reserve:a inventory.reserve a x2 for o-1", "deadline payment at 12:16:00"}},
		// Manual payment is fast: order.paid before the reservations' outcomes.
		{name: "paid before any reservation outcome: wait", p: manual, given: placed2, when: paid("r"),
			status: "committing", effects: []string{"cancel deadline payment"}},
		{name: "paid, then the first reservation: wait for the second", p: manual, given: cat(placed2, []in{paid("r")}), when: ok("reserve:a"), status: "committing"},
		{name: "paid, then every reservation: commit", p: manual, given: cat(placed2, []in{paid("r"), ok("reserve:a")}), when: ok("reserve:b"),
			status: "committing", effects: []string{"commit:a inventory.commit a for o-1", "commit:b inventory.commit b for o-1"}},
		// Paid, but a line could not be reserved: money taken, stock not there.
		{name: "paid, then a reservation refused: release the held one", p: manual, given: cat(placed2, []in{paid("r"), ok("reserve:a")}), when: no("reserve:b"),
			status: "releasing", effects: []string{"release:a inventory.release a for o-1"}},
		{name: "paid, a line refused, released: paid_unfulfilled", p: manual, given: cat(placed2, []in{paid("r"), ok("reserve:a"), no("reserve:b")}),
			when: ok("release:a"), status: "paid_unfulfilled", done: true},
		{name: "out of stock cancel refused because the customer paid: paid_unfulfilled after release", p: manual,
			given: cat(placed2, []in{ok("reserve:a"), no("reserve:b"), paid("r"), no("cancel")}), when: ok("release:a"),
			status: "paid_unfulfilled", done: true},
		{name: "paid, the only line refused: paid_unfulfilled at once", p: manual, given: cat([]in{created(), line("a", 1), placed()}, []in{paid("r")}),
			when: no("reserve:a"), status: "paid_unfulfilled", done: true},
		{name: "paid, a commit refused: paid_unfulfilled", p: manual, given: cat(held2, []in{paid("r"), ok("commit:a")}),
			when: no("commit:b"), status: "paid_unfulfilled", done: true},
		// The deadline racing the payment.
		{name: "manual: deadline after paid: nothing", p: manual, given: cat(held2, []in{paid("r")}), when: deadline(), status: "committing"},
		{name: "manual: cancel for the deadline refused (paid meanwhile): wait for order.paid", p: manual, given: cat(held2, []in{deadline()}),
			when: no("cancel"), status: "cancelling"},
		{name: "manual: ...then order.paid: commit", p: manual, given: cat(held2, []in{deadline(), no("cancel")}), when: paid("r"),
			status: "committing", effects: []string{"commit:a inventory.commit a for o-1", "commit:b inventory.commit b for o-1"}},
		{name: "manual: paid after the deadline's cancel was sent, before its outcome: commit", p: manual, given: cat(held2, []in{deadline()}), when: paid("r"),
			status: "committing", effects: []string{"commit:a inventory.commit a for o-1", "commit:b inventory.commit b for o-1"}},
		{name: "http: deadline after the capture: the payment is being recorded, no cancel", p: http, given: captured2, when: deadline(), status: "paying"},
		{name: "http: capture ok after the void: not paid", p: http, given: cat(capturing, []in{deadline()}), when: captured("cap-1"), status: "voiding"},
		{name: "http: capture ok after void and cancel: nothing", p: http, given: cat(capturing, []in{deadline(), ok("void"), ok("cancel"), cancelled("payment_timeout")}),
			when: captured("cap-1"), status: "releasing"},
		{name: "http: capture declined after the void: the cancel is already out", p: http, given: cat(capturing, []in{deadline(), ok("void")}), when: declined(),
			status: "cancelling"},
		// Money we hold for an order that is not ours to keep.
		{name: "http: customer cancels while the capture is outstanding: void it", p: http, given: capturing, when: cancelled(""),
			status: "releasing", effects: []string{"release:a inventory.release a for o-1", "release:b inventory.release b for o-1", "void payment void capture of o-1", "cancel deadline payment"}},
		{name: "http: customer cancelled after the capture (pay refused): void it", p: http, given: cat(captured2, []in{cancelled("")}), when: no("pay"), status: "releasing"},
		{name: "http: cancelled with a capture: terminal only when voided", p: http,
			given: cat(captured2, []in{cancelled(""), no("pay"), ok("release:a"), ok("release:b")}), when: ok("void"), status: "cancelled", done: true},
		{name: "http: void refused for a cancelled order: void_refused", p: http,
			given: cat(captured2, []in{cancelled(""), ok("release:a"), ok("release:b")}), when: no("void"), status: "void_refused", done: true},
		{name: "http: customer paid by hand while our capture was outstanding: void ours", p: http, given: capturing, when: paid("by-hand"),
			status: "committing", effects: []string{"commit:a inventory.commit a for o-1", "commit:b inventory.commit b for o-1", "void payment void capture of o-1", "cancel deadline payment"}},
		{name: "http: paid by hand, committed, voided: completed", p: http, given: cat(capturing, []in{paid("by-hand"), ok("commit:a"), ok("commit:b")}),
			when: ok("void"), status: "completed", done: true},
		{name: "http: paid with our own reference: no void", p: http, given: cat(captured2, []in{ok("pay"), paid("cap-1"), ok("commit:a")}),
			when: ok("commit:b"), status: "completed", done: true},
		// After a terminal state.
		{name: "event after completed: ignored", p: manual, given: cat(held2, []in{paid("r"), ok("commit:a"), ok("commit:b")}), when: cancelled(""),
			status: "completed", done: true},
		{name: "deadline after cancelled: ignored", p: manual, given: cat(held2, []in{cancelled(""), ok("release:a"), ok("release:b")}), when: deadline(),
			status: "cancelled", done: true},
		{name: "late outcome after cancelled: ignored", p: http, given: cat(capturing, []in{deadline(), ok("void"), ok("cancel"), cancelled("payment_timeout"), ok("release:a"), ok("release:b")}),
			when: captured("cap-1"), status: "cancelled", done: true},
		// An order the process never saw created.
		{name: "first event is not created: untracked", p: manual, when: placed(), status: "untracked", done: true},
	})
}

func TestDecide_Errors(t *testing.T) {
	t.Parallel()
	raw := func(x decision.Input) in { return processtest.Raw(x) }
	scenario(t, manual).Given(placed2...).When(raw(decision.Input{Kind: decision.InputOutcome, Outcome: &decision.Outcome{Step: "reserve:zzz", OK: true}})).
		ThenError(fulfil.ErrUnknownStep)
	scenario(t, manual).Given(placed2...).When(raw(decision.Input{Kind: "bogus"})).ThenError(fulfil.ErrUnknownInput)
	// A foreign event has no codec in the order module's registry.
	processtest.For(t, manual.Decide).Instance("o-1").Given(placed2...).When(evt(foreign{})).ThenError(fulfil.ErrUnknownInput)
	// A capture's outcome without the provider's capture ID cannot be
	// paid with: the instance parks rather than pay with no reference.
	scenario(t, http).Given(capturing...).When(processtest.OK(fulfil.StepCapture, map[string]string{"status": "captured"})).
		ThenError(fulfil.ErrNoCaptureID)
}

// Decide never aliases the state it was given.
func TestDecide_DoesNotMutateItsInput(t *testing.T) {
	t.Parallel()
	s := run(t, manual, placed2).State
	before, _ := json.Marshal(s)
	if _, err := manual.Decide(s, true, decision.Input{Kind: decision.InputOutcome, Instance: "o-1", Outcome: &decision.Outcome{Step: "reserve:a", OK: true}}); err != nil {
		t.Fatal(err)
	}
	after, _ := json.Marshal(s)
	if string(before) != string(after) {
		t.Errorf("Decide changed its input state:\n%s\n%s", before, after)
	}
}

type foreign struct{}

func (foreign) EventType() string { return "other.thing" }
