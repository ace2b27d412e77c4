package stock

import (
	"fmt"
	"time"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
)

// The inventory events' own rules, for payloads that come from outside
// the item's decisions (an imported archive, event.Validator): the checks
// the decisions make on their input, and that the event is in its SKU's
// stream. Rules that need the item's state (enough stock, an open
// reservation) are the aggregate's and are not checked here.

var (
	_ event.Validator = Received{}
	_ event.Validator = Reserved{}
	_ event.Validator = Released{}
	_ event.Validator = Committed{}
)

// Validate implements event.Validator.
func (e Received) Validate(stream string) error { return valid(stream, e.SKU, e.Quantity, e.At) }

// Validate implements event.Validator.
func (e Reserved) Validate(stream string) error {
	return reserved(stream, e.SKU, e.ReservationID, e.Quantity, e.At)
}

// Validate implements event.Validator.
func (e Released) Validate(stream string) error {
	return reserved(stream, e.SKU, e.ReservationID, e.Quantity, e.At)
}

// Validate implements event.Validator.
func (e Committed) Validate(stream string) error {
	return reserved(stream, e.SKU, e.ReservationID, e.Quantity, e.At)
}

// valid checks what every inventory event holds.
func valid(stream, sku string, quantity int64, at time.Time) error {
	if err := check(sku, quantity, at); err != nil {
		return err
	}
	if stream != StreamID(sku) {
		return fmt.Errorf("%w: an event of SKU %q in stream %q (want %q)", domain.ErrInvalid, sku, stream, StreamID(sku))
	}
	return nil
}

// reserved is valid for an event about a reservation.
func reserved(stream, sku, reservationID string, quantity int64, at time.Time) error {
	if err := valid(stream, sku, quantity, at); err != nil {
		return err
	}
	return domain.ValidateEntityID("reservation_id", reservationID)
}
