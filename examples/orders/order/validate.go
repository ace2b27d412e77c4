package order

import (
	"fmt"
	"strings"
	"time"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/domain/money"
)

// The order events' own rules, for payloads that come from outside the
// order's decisions (an imported archive, event.Validator): the checks
// the decisions make on their input, and that the event is in its order's
// stream (the fulfilment process correlates by stream). Rules that need
// the order's state (a line on a placed order, a total that matches the
// lines) are the aggregate's and are not checked here.

var (
	_ event.Validator = Created{}
	_ event.Validator = LineAdded{}
	_ event.Validator = LineRemoved{}
	_ event.Validator = Placed{}
	_ event.Validator = Paid{}
	_ event.Validator = Cancelled{}
)

// Validate implements event.Validator.
func (e Created) Validate(stream string) error {
	if err := inStream(e.OrderID, stream); err != nil {
		return err
	}
	if err := domain.ValidateEntityID("customer id", e.CustomerID); err != nil {
		return err
	}
	if !money.ValidCurrency(e.Currency) {
		return ErrInvalidCurrency
	}
	return at(e.At)
}

// Validate implements event.Validator.
func (e LineAdded) Validate(stream string) error {
	if err := inStream(e.OrderID, stream); err != nil {
		return err
	}
	if err := domain.ValidateEntityID("product id", e.ProductID); err != nil {
		return err
	}
	if e.Quantity < MinQuantity || e.Quantity > MaxQuantity {
		// Invalid, not ErrQuantityOutOfRange's rejection: a stored event
		// that breaks the rule is malformed data, not a command said no.
		return fmt.Errorf("%w: quantity %d is not between %d and %d", domain.ErrInvalid, e.Quantity, MinQuantity, MaxQuantity)
	}
	if e.UnitPrice.Amount < 0 {
		return ErrNegativePrice
	}
	if !money.ValidCurrency(e.UnitPrice.Currency) {
		return ErrInvalidCurrency
	}
	return at(e.At)
}

// Validate implements event.Validator.
func (e LineRemoved) Validate(stream string) error {
	if err := inStream(e.OrderID, stream); err != nil {
		return err
	}
	if err := domain.ValidateEntityID("product id", e.ProductID); err != nil {
		return err
	}
	return at(e.At)
}

// Validate implements event.Validator.
func (e Placed) Validate(stream string) error {
	if err := inStream(e.OrderID, stream); err != nil {
		return err
	}
	if err := amount("total", e.Total); err != nil {
		return err
	}
	return at(e.At)
}

// Validate implements event.Validator.
func (e Paid) Validate(stream string) error {
	if err := inStream(e.OrderID, stream); err != nil {
		return err
	}
	if strings.TrimSpace(e.PaymentReference) == "" || !validText(e.PaymentReference, MaxPaymentReferenceLen) {
		return ErrInvalidPaymentReference
	}
	if err := amount("amount", e.Amount); err != nil {
		return err
	}
	return at(e.At)
}

// Validate implements event.Validator.
func (e Cancelled) Validate(stream string) error {
	if err := inStream(e.OrderID, stream); err != nil {
		return err
	}
	if !validText(e.Reason, MaxReasonLen) {
		return ErrInvalidReason
	}
	return at(e.At)
}

// inStream checks the order ID and that stream is its order's.
func inStream(orderID, stream string) error {
	if err := domain.ValidateEntityID("order id", orderID); err != nil {
		return err
	}
	if stream != StreamID(orderID) {
		return fmt.Errorf("%w: an event of order %q in stream %q (want %q)", domain.ErrInvalid, orderID, stream, StreamID(orderID))
	}
	return nil
}

func amount(what string, m money.Money) error {
	if !money.ValidCurrency(m.Currency) {
		return ErrInvalidCurrency
	}
	if m.Amount < 0 {
		return fmt.Errorf("%w: the %s must not be negative", domain.ErrInvalid, what)
	}
	return nil
}

func at(t time.Time) error {
	if t.IsZero() {
		return ErrTimeRequired
	}
	return nil
}
