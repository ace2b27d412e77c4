package order

import (
	"errors"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/domain/money"
)

// Fixed times, so that expected events compare with reflect.DeepEqual.
var (
	t0 = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	t1 = t0.Add(1 * time.Minute)
	t2 = t0.Add(2 * time.Minute)
	t3 = t0.Add(3 * time.Minute)
	t4 = t0.Add(4 * time.Minute)
)

const (
	oid = "ord-1"
	cid = "cust-1"
)

func eur(amount int64) money.Money { return money.Money{Amount: amount, Currency: "EUR"} }

// Event builders for givens and thens.
func created() Created { return Created{OrderID: oid, CustomerID: cid, Currency: "EUR", At: t0} }

func added(product string, qty, price int64) LineAdded {
	return LineAdded{OrderID: oid, ProductID: product, Quantity: qty, UnitPrice: eur(price), At: t1}
}

func removed(product string) LineRemoved {
	return LineRemoved{OrderID: oid, ProductID: product, At: t2}
}

func placed(total int64) Placed { return Placed{OrderID: oid, Total: eur(total), At: t3} }

func paid(ref string, amount int64) Paid {
	return Paid{OrderID: oid, PaymentReference: ref, Amount: eur(amount), At: t4}
}

func cancelled(reason string) Cancelled { return Cancelled{OrderID: oid, Reason: reason, At: t4} }

func events(es ...event.Payload) []event.Payload { return es }

// withLines is a draft holding n lines of distinct products p-0, p-1, ...
// at 1 EUR each.
func withLines(n int) []event.Payload {
	h := events(created())
	for i := range n {
		h = append(h, added("p-"+strconv.Itoa(i), 1, 1))
	}
	return h
}

// Common histories.
var (
	draft       = events(created())
	draftLine   = events(created(), added("p-1", 2, 150))
	placedOrder = events(created(), added("p-1", 2, 150), placed(300))
	paidOrder   = events(created(), added("p-1", 2, 150), placed(300), paid("pay-1", 300))
	cancelledD  = events(created(), added("p-1", 2, 150), cancelled(""))
	cancelledP  = events(created(), added("p-1", 2, 150), placed(300), cancelled("changed my mind"))
)

// scenario is one given/when/then case. When wantErr and wantKind are both
// nil the decision must succeed with exactly then; otherwise it must fail
// with an error that is wantErr (if set) and wantKind, and return no events.
type scenario struct {
	name     string
	given    []event.Payload
	when     func(o *Order) ([]event.Payload, error)
	then     []event.Payload
	wantErr  error // the specific sentinel, if any
	wantKind error // domain.ErrRejected, domain.ErrInvalid or domain.ErrNotFound
}

func mustLoad(t *testing.T, history []event.Payload) *Order {
	t.Helper()
	o, err := Load(history)
	if err != nil {
		t.Fatalf("Load(given): %v", err)
	}
	return o
}

func runScenarios(t *testing.T, scenarios []scenario) {
	t.Helper()
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			o := mustLoad(t, sc.given)
			pristine := mustLoad(t, sc.given)

			got, err := sc.when(o)

			if !reflect.DeepEqual(o, pristine) {
				t.Fatalf("decision mutated the aggregate:\n got %+v\nwant %+v", o, pristine)
			}
			if sc.wantErr != nil || sc.wantKind != nil {
				if err == nil {
					t.Fatalf("no error, events %+v; want %v", got, sc.wantErr)
				}
				if sc.wantErr != nil && !errors.Is(err, sc.wantErr) {
					t.Errorf("error %q is not %q", err, sc.wantErr)
				}
				if sc.wantKind != nil && !errors.Is(err, sc.wantKind) {
					t.Errorf("error %q is not of kind %q", err, sc.wantKind)
				}
				if got != nil {
					t.Errorf("events %+v returned along with error", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if !reflect.DeepEqual(got, sc.then) {
				t.Fatalf("events:\n got %#v\nwant %#v", got, sc.then)
			}
			// The new events must apply cleanly on top of the history.
			for _, e := range got {
				if err := o.Apply(e); err != nil {
					t.Fatalf("Apply(%T): %v", e, err)
				}
			}
			if want := int64(len(sc.given) + len(got)); o.Version != want {
				t.Errorf("Version after applying = %d, want %d", o.Version, want)
			}
		})
	}
}

func TestCreate(t *testing.T) {
	t.Parallel()
	create := func(id, customer, currency string, at time.Time) func(*Order) ([]event.Payload, error) {
		return func(o *Order) ([]event.Payload, error) { return o.Create(id, customer, currency, at) }
	}
	runScenarios(t, []scenario{
		{
			name: "creates a draft order",
			when: create(oid, cid, "EUR", t0),
			then: events(created()),
		},
		{
			name: "stores the time in UTC",
			when: create(oid, cid, "EUR", t0.In(time.FixedZone("CET", 3600))),
			then: events(created()),
		},
		{
			name: "accepts IDs at the 64 character limit",
			when: create(strings.Repeat("a", 64), "A.b_c-9", "USD", t0),
			then: events(Created{OrderID: strings.Repeat("a", 64), CustomerID: "A.b_c-9", Currency: "USD", At: t0}),
		},
		{
			name: "rejects creating an existing order", given: draft,
			when: create(oid, cid, "EUR", t1), wantErr: ErrAlreadyExists, wantKind: domain.ErrRejected,
		},
		{
			name: "rejects creating again with another ID", given: draft,
			when: create("ord-2", cid, "EUR", t1), wantErr: ErrAlreadyExists, wantKind: domain.ErrRejected,
		},
		{
			name: "rejects re-creating a cancelled order", given: cancelledD,
			when: create(oid, cid, "EUR", t1), wantErr: ErrAlreadyExists, wantKind: domain.ErrRejected,
		},
		{name: "rejects an empty order id", when: create("", cid, "EUR", t0), wantKind: domain.ErrInvalid},
		{name: "rejects an order id with a space", when: create("a b", cid, "EUR", t0), wantKind: domain.ErrInvalid},
		{name: "rejects an order id over 64 characters", when: create(strings.Repeat("a", 65), cid, "EUR", t0), wantKind: domain.ErrInvalid},
		{name: "rejects an empty customer id", when: create(oid, "", "EUR", t0), wantKind: domain.ErrInvalid},
		{name: "rejects a customer id with a slash", when: create(oid, "c/1", "EUR", t0), wantKind: domain.ErrInvalid},
		{name: "rejects a lower-case currency", when: create(oid, cid, "eur", t0), wantErr: ErrInvalidCurrency, wantKind: domain.ErrInvalid},
		{name: "rejects a two-letter currency", when: create(oid, cid, "EU", t0), wantErr: ErrInvalidCurrency, wantKind: domain.ErrInvalid},
		{name: "rejects a four-letter currency", when: create(oid, cid, "EURO", t0), wantErr: ErrInvalidCurrency, wantKind: domain.ErrInvalid},
		{name: "rejects a currency with a digit", when: create(oid, cid, "E1R", t0), wantErr: ErrInvalidCurrency, wantKind: domain.ErrInvalid},
		{name: "rejects an empty currency", when: create(oid, cid, "", t0), wantErr: ErrInvalidCurrency, wantKind: domain.ErrInvalid},
		{name: "rejects a zero time", when: create(oid, cid, "EUR", time.Time{}), wantErr: ErrTimeRequired, wantKind: domain.ErrInvalid},
	})
}

func TestAddLine(t *testing.T) {
	t.Parallel()
	add := func(product string, qty int64, price money.Money) func(*Order) ([]event.Payload, error) {
		return func(o *Order) ([]event.Payload, error) { return o.AddLine(product, qty, price, t1) }
	}
	const half = math.MaxInt64 / 2 // 2*half fits, 3*half does not
	runScenarios(t, []scenario{
		{name: "adds a line", given: draft, when: add("p-1", 2, eur(150)), then: events(added("p-1", 2, 150))},
		{name: "allows a zero price", given: draft, when: add("p-1", 1, eur(0)), then: events(added("p-1", 1, 0))},
		{name: "allows the minimum quantity", given: draft, when: add("p-1", 1, eur(5)), then: events(added("p-1", 1, 5))},
		{name: "allows the maximum quantity", given: draft, when: add("p-1", 10000, eur(5)), then: events(added("p-1", 10000, 5))},
		{
			name: "stores the time in UTC", given: draft,
			when: func(o *Order) ([]event.Payload, error) {
				return o.AddLine("p-1", 2, eur(150), t1.In(time.FixedZone("X", -7200)))
			},
			then: events(added("p-1", 2, 150)),
		},
		{
			name: "adds a second product", given: draftLine,
			when: add("p-2", 1, eur(99)), then: events(added("p-2", 1, 99)),
		},
		{
			name: "re-adding a product records the added quantity", given: draftLine,
			when: add("p-1", 3, eur(150)), then: events(added("p-1", 3, 150)),
		},
		{
			name: "re-adding up to exactly the maximum quantity", given: events(created(), added("p-1", 9999, 150)),
			when: add("p-1", 1, eur(150)), then: events(added("p-1", 1, 150)),
		},
		{
			name: "re-adding a removed product with a new price", given: events(created(), added("p-1", 2, 150), removed("p-1")),
			when: add("p-1", 1, eur(200)), then: events(added("p-1", 1, 200)),
		},
		{
			name: "order total may reach exactly MaxInt64", given: events(created(), added("p-1", 1, math.MaxInt64-10)),
			when: add("p-2", 1, eur(10)), then: events(added("p-2", 1, 10)),
		},
		{name: "rejects quantity zero", given: draft, when: add("p-1", 0, eur(150)), wantErr: ErrQuantityOutOfRange, wantKind: domain.ErrRejected},
		{name: "rejects a negative quantity", given: draft, when: add("p-1", -1, eur(150)), wantErr: ErrQuantityOutOfRange, wantKind: domain.ErrRejected},
		{name: "rejects quantity MinInt64", given: draft, when: add("p-1", math.MinInt64, eur(150)), wantErr: ErrQuantityOutOfRange, wantKind: domain.ErrRejected},
		{name: "rejects a quantity over 10000", given: draft, when: add("p-1", 10001, eur(150)), wantErr: ErrQuantityOutOfRange, wantKind: domain.ErrRejected},
		{name: "rejects quantity MaxInt64", given: draft, when: add("p-1", math.MaxInt64, eur(150)), wantErr: ErrQuantityOutOfRange, wantKind: domain.ErrRejected},
		{
			name: "rejects re-adding past 10000 in total", given: events(created(), added("p-1", 9999, 150)),
			when: add("p-1", 2, eur(150)), wantErr: ErrQuantityOutOfRange, wantKind: domain.ErrRejected,
		},
		{
			name: "rejects re-adding past 10000 over several adds", given: events(created(), added("p-1", 5000, 1), added("p-1", 5000, 1)),
			when: add("p-1", 1, eur(1)), wantErr: ErrQuantityOutOfRange, wantKind: domain.ErrRejected,
		},
		{
			name: "rejects re-adding at a different price", given: draftLine,
			when: add("p-1", 1, eur(151)), wantErr: ErrPriceMismatch, wantKind: domain.ErrRejected,
		},
		{
			name: "rejects a price in another currency", given: draft,
			when: add("p-1", 1, money.Money{Amount: 150, Currency: "USD"}), wantErr: ErrCurrencyMismatch, wantKind: domain.ErrRejected,
		},
		{
			name: "rejects a price without currency", given: draft,
			when: add("p-1", 1, money.Money{Amount: 150}), wantErr: ErrCurrencyMismatch, wantKind: domain.ErrRejected,
		},
		{
			name: "rejects re-adding in another currency", given: draftLine,
			when: add("p-1", 1, money.Money{Amount: 150, Currency: "USD"}), wantErr: ErrCurrencyMismatch, wantKind: domain.ErrRejected,
		},
		{name: "rejects a negative price", given: draft, when: add("p-1", 1, eur(-1)), wantErr: ErrNegativePrice, wantKind: domain.ErrInvalid},
		{name: "rejects price MinInt64", given: draft, when: add("p-1", 1, eur(math.MinInt64)), wantErr: ErrNegativePrice, wantKind: domain.ErrInvalid},
		{name: "rejects an empty product id", given: draft, when: add("", 1, eur(1)), wantKind: domain.ErrInvalid},
		{name: "rejects a product id with a space", given: draft, when: add("p 1", 1, eur(1)), wantKind: domain.ErrInvalid},
		{name: "rejects a product id over 64 characters", given: draft, when: add(strings.Repeat("p", 65), 1, eur(1)), wantKind: domain.ErrInvalid},
		{
			name: "rejects a line total that overflows", given: draft,
			when: add("p-1", 3, eur(half)), wantErr: ErrAmountOverflow, wantKind: domain.ErrRejected,
		},
		{
			name: "rejects a line total at MaxInt64 price times 2", given: draft,
			when: add("p-1", 2, eur(math.MaxInt64)), wantErr: ErrAmountOverflow, wantKind: domain.ErrRejected,
		},
		{
			name: "rejects re-adding when the summed line total overflows", given: events(created(), added("p-1", 2, half)),
			when: add("p-1", 1, eur(half)), wantErr: ErrAmountOverflow, wantKind: domain.ErrRejected,
		},
		{
			name: "rejects a line whose order total overflows", given: events(created(), added("p-1", 1, math.MaxInt64-10)),
			when: add("p-2", 1, eur(11)), wantErr: ErrAmountOverflow, wantKind: domain.ErrRejected,
		},
		{
			name: "rejects a zero time", given: draft,
			when:    func(o *Order) ([]event.Payload, error) { return o.AddLine("p-1", 1, eur(1), time.Time{}) },
			wantErr: ErrTimeRequired, wantKind: domain.ErrInvalid,
		},
		{
			name: "adds the last line an order may hold", given: withLines(MaxLines - 1),
			when: add("p-last", 1, eur(1)), then: events(added("p-last", 1, 1)),
		},
		{
			name: "re-adding a product to a full order grows its line", given: withLines(MaxLines),
			when: add("p-0", 1, eur(1)), then: events(added("p-0", 1, 1)),
		},
		{
			name: "rejects a line past the lines an order may hold", given: withLines(MaxLines),
			when: add("p-more", 1, eur(1)), wantErr: ErrTooManyLines, wantKind: domain.ErrRejected,
		},
		{
			name: "a removed line frees its place", given: append(withLines(MaxLines), removed("p-0")),
			when: add("p-more", 1, eur(1)), then: events(added("p-more", 1, 1)),
		},
		{name: "rejects a missing order", when: add("p-1", 1, eur(150)), wantErr: ErrOrderNotFound, wantKind: domain.ErrNotFound},
		{name: "rejects editing a placed order", given: placedOrder, when: add("p-2", 1, eur(150)), wantErr: ErrNotEditable, wantKind: domain.ErrRejected},
		{name: "rejects editing a paid order", given: paidOrder, when: add("p-2", 1, eur(150)), wantErr: ErrNotEditable, wantKind: domain.ErrRejected},
		{name: "rejects editing a cancelled draft", given: cancelledD, when: add("p-2", 1, eur(150)), wantErr: ErrNotEditable, wantKind: domain.ErrRejected},
		{name: "rejects editing a cancelled placed order", given: cancelledP, when: add("p-2", 1, eur(150)), wantErr: ErrNotEditable, wantKind: domain.ErrRejected},
	})
}

func TestRemoveLine(t *testing.T) {
	t.Parallel()
	remove := func(product string) func(*Order) ([]event.Payload, error) {
		return func(o *Order) ([]event.Payload, error) { return o.RemoveLine(product, t2) }
	}
	runScenarios(t, []scenario{
		{name: "removes a line", given: draftLine, when: remove("p-1"), then: events(removed("p-1"))},
		{
			name: "removes one of several lines", given: events(created(), added("p-1", 1, 1), added("p-2", 1, 2)),
			when: remove("p-2"), then: events(removed("p-2")),
		},
		{
			name: "removes a re-added line whatever its quantity", given: events(created(), added("p-1", 1, 1), added("p-1", 4, 1)),
			when: remove("p-1"), then: events(removed("p-1")),
		},
		{
			name: "stores the time in UTC", given: draftLine,
			when: func(o *Order) ([]event.Payload, error) { return o.RemoveLine("p-1", t2.In(time.FixedZone("X", 3600))) },
			then: events(removed("p-1")),
		},
		{name: "rejects a product not on the order", given: draftLine, when: remove("p-2"), wantErr: ErrLineNotFound, wantKind: domain.ErrRejected},
		{name: "rejects removing from an empty order", given: draft, when: remove("p-1"), wantErr: ErrLineNotFound, wantKind: domain.ErrRejected},
		{
			name: "rejects removing twice", given: events(created(), added("p-1", 2, 150), removed("p-1")),
			when: remove("p-1"), wantErr: ErrLineNotFound, wantKind: domain.ErrRejected,
		},
		{name: "rejects an invalid product id", given: draftLine, when: remove("p/1"), wantKind: domain.ErrInvalid},
		{
			name: "rejects a zero time", given: draftLine,
			when:    func(o *Order) ([]event.Payload, error) { return o.RemoveLine("p-1", time.Time{}) },
			wantErr: ErrTimeRequired, wantKind: domain.ErrInvalid,
		},
		{name: "rejects a missing order", when: remove("p-1"), wantErr: ErrOrderNotFound, wantKind: domain.ErrNotFound},
		{name: "rejects editing a placed order", given: placedOrder, when: remove("p-1"), wantErr: ErrNotEditable, wantKind: domain.ErrRejected},
		{name: "rejects editing a paid order", given: paidOrder, when: remove("p-1"), wantErr: ErrNotEditable, wantKind: domain.ErrRejected},
		{name: "rejects editing a cancelled order", given: cancelledD, when: remove("p-1"), wantErr: ErrNotEditable, wantKind: domain.ErrRejected},
	})
}

func TestPlace(t *testing.T) {
	t.Parallel()
	place := func(o *Order) ([]event.Payload, error) { return o.Place(t3) }
	runScenarios(t, []scenario{
		{name: "places a draft with one line", given: draftLine, when: place, then: events(placed(300))},
		{
			name: "records the total of all lines", given: events(created(), added("p-1", 2, 150), added("p-2", 1, 99), added("p-1", 1, 150), added("p-3", 5, 0)),
			when: place, then: events(placed(2*150 + 99 + 150)),
		},
		{
			name: "places an order whose lines total zero", given: events(created(), added("free", 3, 0)),
			when: place, then: events(placed(0)),
		},
		{
			name: "leaves removed lines out of the total", given: events(created(), added("p-1", 2, 150), added("p-2", 1, 99), removed("p-1")),
			when: place, then: events(placed(99)),
		},
		{
			name: "stores the time in UTC", given: draftLine,
			when: func(o *Order) ([]event.Payload, error) { return o.Place(t3.In(time.FixedZone("X", 3600))) },
			then: events(placed(300)),
		},
		{name: "rejects an empty order", given: draft, when: place, wantErr: ErrEmptyOrder, wantKind: domain.ErrRejected},
		{
			name: "rejects an order whose lines were all removed", given: events(created(), added("p-1", 2, 150), removed("p-1")),
			when: place, wantErr: ErrEmptyOrder, wantKind: domain.ErrRejected,
		},
		{name: "rejects placing twice", given: placedOrder, when: place, wantErr: ErrNotDraft, wantKind: domain.ErrRejected},
		{name: "rejects placing a paid order", given: paidOrder, when: place, wantErr: ErrNotDraft, wantKind: domain.ErrRejected},
		{name: "rejects placing a cancelled order", given: cancelledD, when: place, wantErr: ErrNotDraft, wantKind: domain.ErrRejected},
		{
			name: "rejects a zero time", given: draftLine,
			when:    func(o *Order) ([]event.Payload, error) { return o.Place(time.Time{}) },
			wantErr: ErrTimeRequired, wantKind: domain.ErrInvalid,
		},
		{name: "rejects a missing order", when: place, wantErr: ErrOrderNotFound, wantKind: domain.ErrNotFound},
	})
}

func TestPay(t *testing.T) {
	t.Parallel()
	pay := func(ref string) func(*Order) ([]event.Payload, error) {
		return func(o *Order) ([]event.Payload, error) { return o.Pay(ref, t4) }
	}
	long := strings.Repeat("r", MaxPaymentReferenceLen)
	wide := strings.Repeat("é", MaxPaymentReferenceLen) // 256 bytes, 128 characters
	runScenarios(t, []scenario{
		{name: "pays a placed order in full", given: placedOrder, when: pay("pay-1"), then: events(paid("pay-1", 300))},
		{name: "accepts a 128 character reference", given: placedOrder, when: pay(long), then: events(paid(long, 300))},
		{name: "counts characters, not bytes", given: placedOrder, when: pay(wide), then: events(paid(wide, 300))},
		{
			name: "stores the time in UTC", given: placedOrder,
			when: func(o *Order) ([]event.Payload, error) { return o.Pay("pay-1", t4.In(time.FixedZone("X", 3600))) },
			then: events(paid("pay-1", 300)),
		},
		{name: "rejects paying a draft", given: draftLine, when: pay("pay-1"), wantErr: ErrNotPlaced, wantKind: domain.ErrRejected},
		{name: "rejects paying twice", given: paidOrder, when: pay("pay-2"), wantErr: ErrNotPlaced, wantKind: domain.ErrRejected},
		{name: "rejects paying a cancelled order", given: cancelledP, when: pay("pay-1"), wantErr: ErrNotPlaced, wantKind: domain.ErrRejected},
		{name: "rejects an empty reference", given: placedOrder, when: pay(""), wantErr: ErrInvalidPaymentReference, wantKind: domain.ErrInvalid},
		{name: "rejects a blank reference", given: placedOrder, when: pay(" \t"), wantErr: ErrInvalidPaymentReference, wantKind: domain.ErrInvalid},
		{name: "rejects a reference over 128 characters", given: placedOrder, when: pay(long + "r"), wantErr: ErrInvalidPaymentReference, wantKind: domain.ErrInvalid},
		{name: "rejects a reference that is not UTF-8", given: placedOrder, when: pay("pay-\xff"), wantErr: ErrInvalidPaymentReference, wantKind: domain.ErrInvalid},
		{
			name: "rejects a zero time", given: placedOrder,
			when:    func(o *Order) ([]event.Payload, error) { return o.Pay("pay-1", time.Time{}) },
			wantErr: ErrTimeRequired, wantKind: domain.ErrInvalid,
		},
		{name: "rejects a missing order", when: pay("pay-1"), wantErr: ErrOrderNotFound, wantKind: domain.ErrNotFound},
	})
}

func TestCancel(t *testing.T) {
	t.Parallel()
	cancel := func(reason string) func(*Order) ([]event.Payload, error) {
		return func(o *Order) ([]event.Payload, error) { return o.Cancel(reason, t4) }
	}
	long := strings.Repeat("x", MaxReasonLen)
	runScenarios(t, []scenario{
		{name: "cancels an empty draft", given: draft, when: cancel("oops"), then: events(cancelled("oops"))},
		{name: "cancels a draft with lines", given: draftLine, when: cancel(""), then: events(cancelled(""))},
		{name: "cancels a placed order", given: placedOrder, when: cancel("out of stock"), then: events(cancelled("out of stock"))},
		{name: "accepts a 512 character reason", given: draft, when: cancel(long), then: events(cancelled(long))},
		{
			name: "stores the time in UTC", given: draft,
			when: func(o *Order) ([]event.Payload, error) { return o.Cancel("", t4.In(time.FixedZone("X", 3600))) },
			then: events(cancelled("")),
		},
		{name: "rejects cancelling a paid order", given: paidOrder, when: cancel(""), wantErr: ErrAlreadyPaid, wantKind: domain.ErrRejected},
		{name: "rejects cancelling a cancelled draft", given: cancelledD, when: cancel(""), wantErr: ErrAlreadyCancelled, wantKind: domain.ErrRejected},
		{name: "rejects cancelling a cancelled placed order", given: cancelledP, when: cancel("again"), wantErr: ErrAlreadyCancelled, wantKind: domain.ErrRejected},
		{name: "rejects a reason over 512 characters", given: draft, when: cancel(long + "x"), wantErr: ErrInvalidReason, wantKind: domain.ErrInvalid},
		{name: "rejects a reason that is not UTF-8", given: draft, when: cancel("bad \xc3"), wantErr: ErrInvalidReason, wantKind: domain.ErrInvalid},
		{
			name: "rejects a zero time", given: draft,
			when:    func(o *Order) ([]event.Payload, error) { return o.Cancel("", time.Time{}) },
			wantErr: ErrTimeRequired, wantKind: domain.ErrInvalid,
		},
		{name: "rejects a missing order", when: cancel(""), wantErr: ErrOrderNotFound, wantKind: domain.ErrNotFound},
	})
}

// decideAndApply runs one decision and applies its events, failing the test
// on any error.
func decideAndApply(t *testing.T, o *Order, events []event.Payload, err error) []event.Payload {
	t.Helper()
	if err != nil {
		t.Fatalf("decision: %v", err)
	}
	for _, e := range events {
		if err := o.Apply(e); err != nil {
			t.Fatalf("Apply(%T): %v", e, err)
		}
	}
	return events
}

func TestLifecycleCreateAddPlacePay(t *testing.T) {
	t.Parallel()
	o := &Order{}
	if o.Exists() {
		t.Fatal("zero order exists")
	}
	var history []event.Payload
	step := func(es []event.Payload, err error) {
		t.Helper()
		history = append(history, decideAndApply(t, o, es, err)...)
	}
	step(o.Create(oid, cid, "EUR", t0))
	step(o.AddLine("p-1", 2, eur(150), t1))
	step(o.AddLine("p-2", 1, eur(999), t1))
	step(o.AddLine("p-3", 10, eur(5), t1))
	if o.Status != StatusDraft {
		t.Fatalf("status before placing = %q", o.Status)
	}
	step(o.Place(t3))
	step(o.Pay("pay-42", t4))

	want := &Order{
		ID: oid, CustomerID: cid, Currency: "EUR", Status: StatusPaid,
		Lines: []Line{
			{ProductID: "p-1", Quantity: 2, UnitPrice: eur(150)},
			{ProductID: "p-2", Quantity: 1, UnitPrice: eur(999)},
			{ProductID: "p-3", Quantity: 10, UnitPrice: eur(5)},
		},
		Version:   6,
		CreatedAt: t0, PlacedAt: t3, PaidAt: t4,
		PaymentReference: "pay-42",
	}
	if !reflect.DeepEqual(o, want) {
		t.Fatalf("state:\n got %+v\nwant %+v", o, want)
	}
	wantHistory := events(
		created(), added("p-1", 2, 150), added("p-2", 1, 999), added("p-3", 10, 5),
		placed(300+999+50), paid("pay-42", 300+999+50),
	)
	if !reflect.DeepEqual(history, wantHistory) {
		t.Fatalf("history:\n got %#v\nwant %#v", history, wantHistory)
	}
	// Replaying the history gives the same state.
	if replayed := mustLoad(t, history); !reflect.DeepEqual(replayed, want) {
		t.Fatalf("replayed state:\n got %+v\nwant %+v", replayed, want)
	}
	if total, err := o.Total(); err != nil || total != eur(1349) {
		t.Fatalf("Total() = %v, %v; want 1349 EUR", total, err)
	}
}

func TestCancelFromDraftAndPlacedState(t *testing.T) {
	t.Parallel()
	for _, given := range [][]event.Payload{draftLine, placedOrder} {
		o := mustLoad(t, given)
		es, err := o.Cancel("no longer needed", t4)
		decideAndApply(t, o, es, err)
		if o.Status != StatusCancelled || !o.CancelledAt.Equal(t4) || o.CancellationReason != "no longer needed" {
			t.Errorf("after cancel: status %q at %v reason %q", o.Status, o.CancelledAt, o.CancellationReason)
		}
		if o.Version != int64(len(given)+1) {
			t.Errorf("Version = %d, want %d", o.Version, len(given)+1)
		}
		if len(o.Lines) != 1 {
			t.Errorf("cancel changed the lines: %+v", o.Lines)
		}
	}
}

func TestReAddingSumsQuantities(t *testing.T) {
	t.Parallel()
	o := mustLoad(t, events(created(), added("p-1", 2, 150), added("p-2", 1, 10)))
	es, err := o.AddLine("p-1", 3, eur(150), t2)
	decideAndApply(t, o, es, err)
	want := []Line{
		{ProductID: "p-1", Quantity: 5, UnitPrice: eur(150)},
		{ProductID: "p-2", Quantity: 1, UnitPrice: eur(10)},
	}
	if !reflect.DeepEqual(o.Lines, want) {
		t.Fatalf("lines = %+v, want %+v", o.Lines, want)
	}
	if total, err := o.Total(); err != nil || total != eur(760) {
		t.Fatalf("Total() = %v, %v; want 760 EUR", total, err)
	}
}

func TestRemoveThenReAdd(t *testing.T) {
	t.Parallel()
	o := mustLoad(t, events(created(), added("p-1", 2, 150), added("p-2", 1, 10)))
	es, err := o.RemoveLine("p-1", t2)
	decideAndApply(t, o, es, err)
	if want := []Line{{ProductID: "p-2", Quantity: 1, UnitPrice: eur(10)}}; !reflect.DeepEqual(o.Lines, want) {
		t.Fatalf("after remove: lines = %+v, want %+v", o.Lines, want)
	}
	// Re-added, the product starts a fresh line at the end, at a new price.
	es, err = o.AddLine("p-1", 4, eur(120), t3)
	decideAndApply(t, o, es, err)
	want := []Line{
		{ProductID: "p-2", Quantity: 1, UnitPrice: eur(10)},
		{ProductID: "p-1", Quantity: 4, UnitPrice: eur(120)},
	}
	if !reflect.DeepEqual(o.Lines, want) {
		t.Fatalf("after re-add: lines = %+v, want %+v", o.Lines, want)
	}
	if o.Version != 5 {
		t.Fatalf("Version = %d, want 5", o.Version)
	}
}

func TestApplyDoesNotDisturbEarlierCopies(t *testing.T) {
	t.Parallel()
	o := mustLoad(t, events(created(), added("p-1", 1, 1), added("p-2", 1, 2), added("p-3", 1, 3)))
	snapshot := *o
	wantLines := []Line{
		{ProductID: "p-1", Quantity: 1, UnitPrice: eur(1)},
		{ProductID: "p-2", Quantity: 1, UnitPrice: eur(2)},
		{ProductID: "p-3", Quantity: 1, UnitPrice: eur(3)},
	}
	if err := o.Apply(removed("p-1")); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(snapshot.Lines, wantLines) {
		t.Fatalf("removing a line changed a copy's lines: %+v", snapshot.Lines)
	}
}

func TestApplyAcceptsPointers(t *testing.T) {
	t.Parallel()
	values := events(created(), added("p-1", 2, 150), added("p-2", 1, 5), removed("p-2"), placed(300), paid("pay-1", 300))
	c := cancelled("x")
	pointers := events(new(created()), new(added("p-1", 2, 150)), new(added("p-2", 1, 5)), new(removed("p-2")), new(placed(300)), new(paid("pay-1", 300)))
	if !reflect.DeepEqual(mustLoad(t, values), mustLoad(t, pointers)) {
		t.Fatal("pointer payloads give another state than values")
	}
	o := mustLoad(t, events(created()))
	if err := o.Apply(&c); err != nil || o.Status != StatusCancelled {
		t.Fatalf("Apply(*Cancelled) = %v, status %q", err, o.Status)
	}
}

type otherEvent struct{}

func (otherEvent) EventType() string { return "other.happened" }

func TestApplyRejectsUnknownPayloads(t *testing.T) {
	t.Parallel()
	for _, p := range []event.Payload{otherEvent{}, nil, (*Created)(nil), (*LineAdded)(nil), (*Cancelled)(nil)} {
		o := mustLoad(t, draft)
		err := o.Apply(p)
		if !errors.Is(err, ErrUnknownEvent) {
			t.Errorf("Apply(%#v) = %v, want ErrUnknownEvent", p, err)
		}
		if o.Version != 1 {
			t.Errorf("Apply(%#v) changed Version to %d", p, o.Version)
		}
	}
	if _, err := Load(events(created(), otherEvent{})); !errors.Is(err, ErrUnknownEvent) {
		t.Fatalf("Load with an unknown event = %v, want ErrUnknownEvent", err)
	}
}

// Appliers record facts; they never check rules. An event stream that a
// decision would not produce today (rules change) must still load.
func TestApplyRecordsFactsWithoutCheckingRules(t *testing.T) {
	t.Parallel()
	o, err := Load(events(created(), added("p-1", 20000, 1), placed(20000), added("p-2", 1, 1), removed("nope")))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if o.Version != 5 || len(o.Lines) != 2 || o.Lines[0].Quantity != 20000 || o.Status != StatusPlaced {
		t.Fatalf("state = %+v", o)
	}
}

func TestLoadEmptyHistory(t *testing.T) {
	t.Parallel()
	for _, h := range [][]event.Payload{nil, {}} {
		o := mustLoad(t, h)
		if o.Exists() || o.Version != 0 || o.Status != StatusNone {
			t.Fatalf("Load(%v) = %+v, want a non-existent order", h, o)
		}
	}
}

func TestTotals(t *testing.T) {
	t.Parallel()
	if total, err := mustLoad(t, draft).Total(); err != nil || total != eur(0) {
		t.Errorf("empty order Total() = %v, %v; want 0 EUR", total, err)
	}
	l := Line{ProductID: "p", Quantity: 3, UnitPrice: eur(7)}
	if total, err := l.Total(); err != nil || total != eur(21) {
		t.Errorf("Line.Total() = %v, %v; want 21 EUR", total, err)
	}
	l = Line{ProductID: "p", Quantity: 2, UnitPrice: eur(math.MaxInt64)}
	if _, err := l.Total(); !errors.Is(err, ErrAmountOverflow) {
		t.Errorf("overflowing Line.Total() error = %v, want ErrAmountOverflow", err)
	}
	// Loaded from events that bypassed today's rules, the total overflows:
	// Total and Place report it instead of wrapping around.
	o := mustLoad(t, events(created(), added("p-1", 1, math.MaxInt64), added("p-2", 1, 1)))
	if _, err := o.Total(); !errors.Is(err, ErrAmountOverflow) {
		t.Errorf("overflowing Order.Total() error = %v, want ErrAmountOverflow", err)
	}
	if _, err := o.Place(t3); !errors.Is(err, ErrAmountOverflow) {
		t.Errorf("Place with an overflowing total: error = %v, want ErrAmountOverflow", err)
	}
}

// A line in another currency (a history AddLine would have refused) breaks
// the order's rule, and Total and Place say so in the order's words, not
// with money's general mismatch.
func TestTotalInAnotherCurrency(t *testing.T) {
	t.Parallel()
	usd := added("p-2", 1, 5)
	usd.UnitPrice.Currency = "USD"
	o := mustLoad(t, events(created(), added("p-1", 1, 3), usd))
	if _, err := o.Total(); !errors.Is(err, ErrCurrencyMismatch) {
		t.Errorf("Total() with a USD line on a EUR order: error = %v, want ErrCurrencyMismatch", err)
	}
	if _, err := o.Place(t3); !errors.Is(err, ErrCurrencyMismatch) {
		t.Errorf("Place with a USD line on a EUR order: error = %v, want ErrCurrencyMismatch", err)
	}
}

// The order's money errors are money's own values: a caller matching
// either name sees the same error, with the message clients got before.
func TestMoneyErrorsAreShared(t *testing.T) {
	t.Parallel()
	if ErrAmountOverflow != money.ErrAmountOverflow || ErrInvalidCurrency != money.ErrInvalidCurrency {
		t.Errorf("order's ErrAmountOverflow/ErrInvalidCurrency are not package money's")
	}
	if _, err := eur(math.MaxInt64).Mul(2); !errors.Is(err, ErrAmountOverflow) {
		t.Errorf("money's overflow %v does not match order.ErrAmountOverflow", err)
	}
}

func TestStatusStringsAreStable(t *testing.T) {
	t.Parallel()
	for s, want := range map[Status]string{StatusNone: "", StatusDraft: "draft", StatusPlaced: "placed", StatusPaid: "paid", StatusCancelled: "cancelled"} {
		if s.String() != want {
			t.Errorf("status %q, want %q", s, want)
		}
	}
}

// The messages reach API clients: short, lower-case, naming the rule, and
// each wrapping the right domain kind.
func TestErrorMessages(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		kind error
		msg  string
	}{
		{ErrAlreadyExists, domain.ErrRejected, "rejected: order already exists"},
		{ErrNotEditable, domain.ErrRejected, "rejected: order is not editable after it was placed or cancelled"},
		{ErrQuantityOutOfRange, domain.ErrRejected, "rejected: quantity must be between 1 and 10000"},
		{ErrCurrencyMismatch, domain.ErrRejected, "rejected: amounts must all be in the order currency"},
		{ErrPriceMismatch, domain.ErrRejected, "rejected: unit price differs from the price already on the order"},
		{ErrAmountOverflow, domain.ErrRejected, "rejected: amount is too large"},
		{ErrLineNotFound, domain.ErrRejected, "rejected: product is not on the order"},
		{ErrEmptyOrder, domain.ErrRejected, "rejected: an empty order cannot be placed"},
		{ErrNotDraft, domain.ErrRejected, "rejected: only a draft order can be placed"},
		{ErrNotPlaced, domain.ErrRejected, "rejected: only a placed order can be paid"},
		{ErrAlreadyPaid, domain.ErrRejected, "rejected: a paid order cannot be cancelled"},
		{ErrAlreadyCancelled, domain.ErrRejected, "rejected: order is already cancelled"},
		{ErrOrderNotFound, domain.ErrNotFound, "not found: order does not exist"},
		{ErrInvalidCurrency, domain.ErrInvalid, "invalid: currency must be three upper-case letters"},
		{ErrNegativePrice, domain.ErrInvalid, "invalid: unit price must not be negative"},
		{ErrInvalidPaymentReference, domain.ErrInvalid, "invalid: payment reference must be 1 to 128 characters of text"},
		{ErrInvalidReason, domain.ErrInvalid, "invalid: cancellation reason must be at most 512 characters of text"},
		{ErrTimeRequired, domain.ErrInvalid, "invalid: time is required"},
	}
	kinds := []error{domain.ErrRejected, domain.ErrInvalid, domain.ErrNotFound}
	for _, tc := range tests {
		if tc.err.Error() != tc.msg {
			t.Errorf("message %q, want %q", tc.err, tc.msg)
		}
		if tc.msg != strings.ToLower(tc.msg) {
			t.Errorf("message %q is not lower-case", tc.msg)
		}
		for _, k := range kinds {
			if errors.Is(tc.err, k) != (k == tc.kind) {
				t.Errorf("%q: errors.Is(%q) = %v", tc.err, k, !(k == tc.kind))
			}
		}
	}
	for _, k := range kinds {
		if errors.Is(ErrUnknownEvent, k) {
			t.Errorf("ErrUnknownEvent wraps %q; it is an internal error", k)
		}
	}
}

func TestTextRejectsControlCharacters(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	placed := []event.Payload{
		Created{OrderID: "o", CustomerID: "c", Currency: "EUR", At: at},
		LineAdded{OrderID: "o", ProductID: "p", Quantity: 1, UnitPrice: money.Money{Amount: 1, Currency: "EUR"}, At: at},
		Placed{OrderID: "o", Total: money.Money{Amount: 1, Currency: "EUR"}, At: at},
	}
	o, err := Load(placed)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Pay("ref\x00", at); !errors.Is(err, ErrInvalidPaymentReference) {
		t.Fatalf("NUL in a payment reference: %v", err)
	}
	if _, err := o.Cancel("line\nbreak\x07", at); !errors.Is(err, ErrInvalidReason) {
		t.Fatalf("control characters in a reason: %v", err)
	}
}
