package order

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/domain/money"
)

// Limits enforced by the aggregate.
const (
	MinQuantity = 1
	MaxQuantity = 10000 // per line, summed over repeated adds
	// MaxLines bounds the distinct products one order holds. Each line is
	// a reservation (and a commit or a release) the fulfilment process
	// issues: an order of 600 lines kept the process busy for every
	// tenant (issue 29), and no shop needs more on one order.
	MaxLines               = 100
	MaxPaymentReferenceLen = 128 // characters (runes)
	MaxReasonLen           = 512 // characters (runes)
)

// Status is where an order is in its life cycle. The string values are
// stable: they appear in read models and API responses.
type Status string

const (
	StatusNone      Status = ""          // the order does not exist yet
	StatusDraft     Status = "draft"     // created, lines may change
	StatusPlaced    Status = "placed"    // submitted, awaiting payment
	StatusPaid      Status = "paid"      // final
	StatusCancelled Status = "cancelled" // final
)

func (s Status) String() string { return string(s) }

// Line is one product on an order.
type Line struct {
	ProductID string
	Quantity  int64
	UnitPrice money.Money
}

// Total returns UnitPrice times Quantity.
func (l Line) Total() (money.Money, error) { return l.UnitPrice.Mul(l.Quantity) }

// Order is the order aggregate: the state needed to decide commands, rebuilt
// from the order's events. Mutate it only through Apply.
type Order struct {
	ID         string
	CustomerID string
	Currency   string
	Status     Status
	// Lines are ordered by the first time their product was added (a removed
	// and re-added product goes to the end).
	Lines []Line
	// Version is the number of events applied, i.e. the stream version the
	// next append must expect.
	Version int64

	CreatedAt   time.Time
	PlacedAt    time.Time
	PaidAt      time.Time
	CancelledAt time.Time

	PaymentReference   string
	CancellationReason string
}

// Load rebuilds an order from its history, applying the events in order. An
// empty history gives an order that does not exist yet.
func Load(history []event.Payload) (*Order, error) {
	o := &Order{}
	for i, p := range history {
		if err := o.Apply(p); err != nil {
			return nil, fmt.Errorf("order: event %d: %w", i+1, err)
		}
	}
	return o, nil
}

// Exists reports whether the order has been created.
func (o *Order) Exists() bool { return o.Version > 0 }

// Total returns the sum of the line totals in the order currency.
func (o *Order) Total() (money.Money, error) {
	total := money.Money{Currency: o.Currency}
	for _, l := range o.Lines {
		lt, err := l.Total()
		if err != nil {
			return money.Money{}, err
		}
		if total, err = total.Add(lt); err != nil {
			// A line in another currency can only come from a history
			// the order's own rules did not write (AddLine refuses it):
			// it is still the order's rule that is broken, in its words.
			if errors.Is(err, money.ErrCurrencyMismatch) {
				err = ErrCurrencyMismatch
			}
			return money.Money{}, err
		}
	}
	return total, nil
}

// Apply records one past event in the aggregate and increments Version.
// Appliers only apply facts: they check no business rule, since the event
// already happened. p may be a payload value (as event.Registry.Decode
// returns) or a non-nil pointer to one. Any other payload is ErrUnknownEvent.
func (o *Order) Apply(p event.Payload) error {
	switch e := p.(type) {
	case Created:
		o.ID, o.CustomerID, o.Currency = e.OrderID, e.CustomerID, e.Currency
		o.Status = StatusDraft
		o.CreatedAt = e.At
	case LineAdded:
		if i := o.lineIndex(e.ProductID); i >= 0 {
			o.Lines[i].Quantity += e.Quantity
		} else {
			o.Lines = append(o.Lines, Line{ProductID: e.ProductID, Quantity: e.Quantity, UnitPrice: e.UnitPrice})
		}
	case LineRemoved:
		if i := o.lineIndex(e.ProductID); i >= 0 {
			// A fresh slice, so that a shallow copy of the order taken
			// earlier keeps its lines.
			o.Lines = slices.Concat(o.Lines[:i], o.Lines[i+1:])
		}
	case Placed:
		o.Status = StatusPlaced
		o.PlacedAt = e.At
	case Paid:
		o.Status = StatusPaid
		o.PaidAt = e.At
		o.PaymentReference = e.PaymentReference
	case Cancelled:
		o.Status = StatusCancelled
		o.CancelledAt = e.At
		o.CancellationReason = e.Reason
	case *Created:
		return applyPointer(o, e)
	case *LineAdded:
		return applyPointer(o, e)
	case *LineRemoved:
		return applyPointer(o, e)
	case *Placed:
		return applyPointer(o, e)
	case *Paid:
		return applyPointer(o, e)
	case *Cancelled:
		return applyPointer(o, e)
	default:
		return fmt.Errorf("%w: %T", ErrUnknownEvent, p)
	}
	o.Version++
	return nil
}

// applyPointer applies the value p points to.
func applyPointer[T event.Payload](o *Order, p *T) error {
	if p == nil {
		return fmt.Errorf("%w: nil %T", ErrUnknownEvent, p)
	}
	return o.Apply(*p)
}

func (o *Order) lineIndex(productID string) int {
	return slices.IndexFunc(o.Lines, func(l Line) bool { return l.ProductID == productID })
}

// Decisions. Each checks the command against the current state and returns
// the events to append, or an error; none mutates the order. Times are
// stored in UTC.

// Create opens a new draft order. It is rejected with ErrAlreadyExists once
// the order exists.
func (o *Order) Create(id, customerID, currency string, at time.Time) ([]event.Payload, error) {
	if o.Exists() {
		return nil, ErrAlreadyExists
	}
	if err := domain.ValidateEntityID("order id", id); err != nil {
		return nil, err
	}
	if err := domain.ValidateEntityID("customer id", customerID); err != nil {
		return nil, err
	}
	if !money.ValidCurrency(currency) {
		return nil, ErrInvalidCurrency
	}
	if at.IsZero() {
		return nil, ErrTimeRequired
	}
	return []event.Payload{Created{OrderID: id, CustomerID: customerID, Currency: currency, At: at.UTC()}}, nil
}

// AddLine adds quantity units of a product at unitPrice to a draft order. A
// product already on the order keeps one line whose quantity grows; its unit
// price must not change.
func (o *Order) AddLine(productID string, quantity int64, unitPrice money.Money, at time.Time) ([]event.Payload, error) {
	if err := o.checkEditable(); err != nil {
		return nil, err
	}
	if err := domain.ValidateEntityID("product id", productID); err != nil {
		return nil, err
	}
	if quantity < MinQuantity || quantity > MaxQuantity {
		return nil, ErrQuantityOutOfRange
	}
	if unitPrice.Amount < 0 {
		return nil, ErrNegativePrice
	}
	if unitPrice.Currency != o.Currency {
		return nil, ErrCurrencyMismatch
	}
	if at.IsZero() {
		return nil, ErrTimeRequired
	}
	// The state after the event, on a copy of the lines, to check the
	// summed quantity and that no total overflows.
	lines := slices.Clone(o.Lines)
	if i := o.lineIndex(productID); i >= 0 {
		if lines[i].UnitPrice != unitPrice {
			return nil, ErrPriceMismatch
		}
		if lines[i].Quantity+quantity > MaxQuantity {
			return nil, ErrQuantityOutOfRange
		}
		lines[i].Quantity += quantity
	} else {
		if len(lines) >= MaxLines {
			return nil, ErrTooManyLines
		}
		lines = append(lines, Line{ProductID: productID, Quantity: quantity, UnitPrice: unitPrice})
	}
	after := Order{Currency: o.Currency, Lines: lines}
	if _, err := after.Total(); err != nil {
		return nil, err
	}
	return []event.Payload{LineAdded{
		OrderID: o.ID, ProductID: productID, Quantity: quantity, UnitPrice: unitPrice, At: at.UTC(),
	}}, nil
}

// RemoveLine takes a product off a draft order, whatever its quantity.
func (o *Order) RemoveLine(productID string, at time.Time) ([]event.Payload, error) {
	if err := o.checkEditable(); err != nil {
		return nil, err
	}
	if err := domain.ValidateEntityID("product id", productID); err != nil {
		return nil, err
	}
	if o.lineIndex(productID) < 0 {
		return nil, ErrLineNotFound
	}
	if at.IsZero() {
		return nil, ErrTimeRequired
	}
	return []event.Payload{LineRemoved{OrderID: o.ID, ProductID: productID, At: at.UTC()}}, nil
}

// Place submits a draft order that has at least one line. The event records
// the order total.
func (o *Order) Place(at time.Time) ([]event.Payload, error) {
	if !o.Exists() {
		return nil, ErrOrderNotFound
	}
	if o.Status != StatusDraft {
		return nil, ErrNotDraft
	}
	if len(o.Lines) == 0 {
		return nil, ErrEmptyOrder
	}
	if at.IsZero() {
		return nil, ErrTimeRequired
	}
	total, err := o.Total()
	if err != nil {
		return nil, err
	}
	return []event.Payload{Placed{OrderID: o.ID, Total: total, At: at.UTC()}}, nil
}

// Pay records the full payment of a placed order. paymentReference is the
// payment provider's reference: 1 to MaxPaymentReferenceLen characters.
func (o *Order) Pay(paymentReference string, at time.Time) ([]event.Payload, error) {
	if !o.Exists() {
		return nil, ErrOrderNotFound
	}
	if o.Status != StatusPlaced {
		return nil, ErrNotPlaced
	}
	if strings.TrimSpace(paymentReference) == "" || !validText(paymentReference, MaxPaymentReferenceLen) {
		return nil, ErrInvalidPaymentReference
	}
	if at.IsZero() {
		return nil, ErrTimeRequired
	}
	total, err := o.Total()
	if err != nil {
		return nil, err
	}
	return []event.Payload{Paid{OrderID: o.ID, PaymentReference: paymentReference, Amount: total, At: at.UTC()}}, nil
}

// Cancel cancels a draft or placed order. reason is optional, at most
// MaxReasonLen characters.
func (o *Order) Cancel(reason string, at time.Time) ([]event.Payload, error) {
	if !o.Exists() {
		return nil, ErrOrderNotFound
	}
	switch o.Status {
	case StatusPaid:
		return nil, ErrAlreadyPaid
	case StatusCancelled:
		return nil, ErrAlreadyCancelled
	}
	if !validText(reason, MaxReasonLen) {
		return nil, ErrInvalidReason
	}
	if at.IsZero() {
		return nil, ErrTimeRequired
	}
	return []event.Payload{Cancelled{OrderID: o.ID, Reason: reason, At: at.UTC()}}, nil
}

func (o *Order) checkEditable() error {
	if !o.Exists() {
		return ErrOrderNotFound
	}
	if o.Status != StatusDraft {
		return ErrNotEditable
	}
	return nil
}

// validText reports whether s is valid UTF-8 (so that it survives JSON
// unchanged) of at most limit runes.
func validText(s string, limit int) bool {
	if !utf8.ValidString(s) || utf8.RuneCountInString(s) > limit {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) { // NUL and friends: PostgreSQL's jsonb refuses U+0000, logs choke on the rest
			return false
		}
	}
	return true
}
