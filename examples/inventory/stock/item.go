package stock

import (
	"fmt"
	"time"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
)

// Bounds that keep every sum exact in int64 and in the read model.
const (
	// MaxQuantity is the most units one command moves.
	MaxQuantity = 1_000_000_000
	// MaxStock is the most units one SKU holds on hand.
	MaxStock = 1_000_000_000_000
)

// State of a reservation.
type State string

const (
	StateOpen      State = "open"
	StateReleased  State = "released"
	StateCommitted State = "committed"
)

// Reservation is one reservation of the item.
type Reservation struct {
	Quantity int64
	State    State
}

// Item is the stock of one SKU: the state needed to decide commands,
// rebuilt from its events. Mutate it only through Apply.
type Item struct {
	SKU string
	// OnHand counts the units in stock, reserved ones included.
	OnHand int64
	// Reserved counts the units of open reservations.
	Reserved int64
	// Reservations by ID, every one the SKU ever had (IDs are never
	// reused).
	Reservations map[string]Reservation
	// Version is the number of events applied.
	Version int64
}

// Available is what a new reservation may take.
func (it *Item) Available() int64 { return it.OnHand - it.Reserved }

// Load rebuilds an item from its history.
func Load(history []event.Payload) (*Item, error) {
	return Resume(&Item{}, history)
}

// Resume applies the events after a state (a snapshot's) to it.
func Resume(it *Item, tail []event.Payload) (*Item, error) {
	if it.Reservations == nil {
		it.Reservations = map[string]Reservation{}
	}
	for i, p := range tail {
		if err := it.Apply(p); err != nil {
			return nil, fmt.Errorf("inventory: event %d: %w", it.Version+int64(i)+1, err)
		}
	}
	return it, nil
}

// Apply records one past event (a payload value, as the registry decodes
// it) and increments Version.
func (it *Item) Apply(p event.Payload) error {
	switch e := p.(type) {
	case Received:
		it.SKU = e.SKU
		it.OnHand += e.Quantity
	case Reserved:
		it.SKU = e.SKU
		it.Reserved += e.Quantity
		it.Reservations[e.ReservationID] = Reservation{Quantity: e.Quantity, State: StateOpen}
	case Released:
		it.Reserved -= e.Quantity
		it.Reservations[e.ReservationID] = Reservation{Quantity: e.Quantity, State: StateReleased}
	case Committed:
		it.Reserved -= e.Quantity
		it.OnHand -= e.Quantity
		it.Reservations[e.ReservationID] = Reservation{Quantity: e.Quantity, State: StateCommitted}
	default:
		return fmt.Errorf("%w: %T", ErrUnknownEvent, p)
	}
	it.Version++
	return nil
}

// Decisions: each checks the command against the state and returns the
// events to append (none when the command is already in effect), or an
// error. Times are stored in UTC.

// Receive adds quantity units to the stock of sku.
func (it *Item) Receive(sku string, quantity int64, at time.Time) ([]event.Payload, error) {
	if err := check(sku, quantity, at); err != nil {
		return nil, err
	}
	if it.OnHand+quantity > MaxStock {
		return nil, ErrStockOverflow
	}
	return []event.Payload{Received{SKU: sku, Quantity: quantity, At: at.UTC()}}, nil
}

// Reserve sets quantity units aside under reservationID. Reserving again
// with the same ID and quantity while the reservation is open changes
// nothing (a retried request); any other reuse of the ID is rejected.
func (it *Item) Reserve(sku, reservationID string, quantity int64, at time.Time) ([]event.Payload, error) {
	if err := check(sku, quantity, at); err != nil {
		return nil, err
	}
	if err := domain.ValidateEntityID("reservation_id", reservationID); err != nil {
		return nil, err
	}
	if r, ok := it.Reservations[reservationID]; ok {
		if r.State == StateOpen && r.Quantity == quantity {
			return nil, nil
		}
		return nil, ErrReservationReused
	}
	if quantity > it.Available() {
		return nil, ErrInsufficientStock
	}
	return []event.Payload{Reserved{SKU: sku, ReservationID: reservationID, Quantity: quantity, At: at.UTC()}}, nil
}

// Release ends an open reservation, making its units available again.
// Releasing a released reservation changes nothing.
func (it *Item) Release(sku, reservationID string, at time.Time) ([]event.Payload, error) {
	r, err := it.closing(sku, reservationID, StateReleased, at)
	if err != nil || r == nil {
		return nil, err
	}
	return []event.Payload{Released{SKU: sku, ReservationID: reservationID, Quantity: r.Quantity, At: at.UTC()}}, nil
}

// Commit makes an open reservation's units leave the stock. Committing a
// committed reservation changes nothing.
func (it *Item) Commit(sku, reservationID string, at time.Time) ([]event.Payload, error) {
	r, err := it.closing(sku, reservationID, StateCommitted, at)
	if err != nil || r == nil {
		return nil, err
	}
	return []event.Payload{Committed{SKU: sku, ReservationID: reservationID, Quantity: r.Quantity, At: at.UTC()}}, nil
}

// closing returns the open reservation to close into state, nil when it is
// in that state already, or the rule it breaks.
func (it *Item) closing(sku, reservationID string, into State, at time.Time) (*Reservation, error) {
	if err := domain.ValidateEntityID("sku", sku); err != nil {
		return nil, err
	}
	if err := domain.ValidateEntityID("reservation_id", reservationID); err != nil {
		return nil, err
	}
	if at.IsZero() {
		return nil, ErrTimeRequired
	}
	r, ok := it.Reservations[reservationID]
	switch {
	case !ok:
		return nil, ErrReservationNotFound
	case r.State == into:
		return nil, nil
	case r.State == StateReleased:
		return nil, ErrAlreadyReleased
	case r.State == StateCommitted:
		return nil, ErrAlreadyCommitted
	}
	return &r, nil
}

func check(sku string, quantity int64, at time.Time) error {
	if err := domain.ValidateEntityID("sku", sku); err != nil {
		return err
	}
	if quantity < 1 || quantity > MaxQuantity {
		return ErrQuantityOutOfRange
	}
	if at.IsZero() {
		return ErrTimeRequired
	}
	return nil
}
