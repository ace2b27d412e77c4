package inventory_test

import (
	"testing"

	"github.com/strata-es/strata/commands/commandtest"
	cmdinventory "github.com/strata-es/strata/commands/inventory"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/domain/inventory"
)

var at = commandtest.DefaultNow

func received(q int64) inventory.Received {
	return inventory.Received{SKU: "sku-1", Quantity: q, At: at}
}

func reserved(id string, q int64) inventory.Reserved {
	return inventory.Reserved{SKU: "sku-1", ReservationID: id, Quantity: q, At: at}
}

func scenario(t *testing.T) *commandtest.Scenario[*inventory.Item] {
	return commandtest.For(t, cmdinventory.Aggregate).Codecs(inventory.Registry)
}

func TestReceive(t *testing.T) {
	t.Parallel()
	scenario(t).When(cmdinventory.Receive{SKU: "sku-1", Quantity: 5}).Then(received(5))
	scenario(t).Given(received(5)).When(cmdinventory.Receive{SKU: "sku-1", Quantity: 7}).Then(received(7))
	scenario(t).When(cmdinventory.Receive{SKU: "sku-1", Quantity: 0}).ThenError(inventory.ErrQuantityOutOfRange)
	scenario(t).When(cmdinventory.Receive{SKU: "sku-1", Quantity: -3}).ThenError(domain.ErrInvalid)
	scenario(t).When(cmdinventory.Receive{SKU: "..", Quantity: 1}).ThenError(domain.ErrInvalid)
	scenario(t).Given(received(inventory.MaxQuantity)).When(cmdinventory.Receive{SKU: "sku-1", Quantity: inventory.MaxQuantity + 1}).
		ThenError(inventory.ErrQuantityOutOfRange)
}

func TestStockNeverExceedsTheBound(t *testing.T) {
	t.Parallel()
	s := scenario(t)
	for range inventory.MaxStock / inventory.MaxQuantity {
		s.Given(received(inventory.MaxQuantity))
	}
	s.When(cmdinventory.Receive{SKU: "sku-1", Quantity: 1}).ThenError(inventory.ErrStockOverflow)
}

func TestReserveKeepsAvailabilityNonNegative(t *testing.T) {
	t.Parallel()
	scenario(t).Given(received(5)).When(cmdinventory.Reserve{SKU: "sku-1", ReservationID: "r-1", Quantity: 5}).Then(reserved("r-1", 5))
	scenario(t).Given(received(5), reserved("r-1", 3)).When(cmdinventory.Reserve{SKU: "sku-1", ReservationID: "r-2", Quantity: 3}).
		ThenError(inventory.ErrInsufficientStock)
	scenario(t).When(cmdinventory.Reserve{SKU: "sku-1", ReservationID: "r-1", Quantity: 1}).ThenError(inventory.ErrInsufficientStock)
	scenario(t).Given(received(5), reserved("r-1", 3), inventory.Committed{SKU: "sku-1", ReservationID: "r-1", Quantity: 3, At: at}).
		When(cmdinventory.Reserve{SKU: "sku-1", ReservationID: "r-2", Quantity: 3}).ThenError(inventory.ErrInsufficientStock)
	scenario(t).Given(received(5), reserved("r-1", 3), inventory.Released{SKU: "sku-1", ReservationID: "r-1", Quantity: 3, At: at}).
		When(cmdinventory.Reserve{SKU: "sku-1", ReservationID: "r-2", Quantity: 5}).Then(reserved("r-2", 5))
}

func TestReservationIDs(t *testing.T) {
	t.Parallel()
	given := func() *commandtest.Scenario[*inventory.Item] {
		return scenario(t).Given(received(10), reserved("r-1", 3))
	}
	// The same reservation again, while open: nothing changes (a retry).
	given().When(cmdinventory.Reserve{SKU: "sku-1", ReservationID: "r-1", Quantity: 3}).Then()
	// The same ID for another quantity, or after it closed: refused.
	given().When(cmdinventory.Reserve{SKU: "sku-1", ReservationID: "r-1", Quantity: 4}).ThenError(inventory.ErrReservationReused)
	scenario(t).Given(received(10), reserved("r-1", 3), inventory.Released{SKU: "sku-1", ReservationID: "r-1", Quantity: 3, At: at}).
		When(cmdinventory.Reserve{SKU: "sku-1", ReservationID: "r-1", Quantity: 3}).ThenError(inventory.ErrReservationReused)
	given().When(cmdinventory.Reserve{SKU: "sku-1", ReservationID: "r 1", Quantity: 1}).ThenError(domain.ErrInvalid)
}

func TestReleaseAndCommit(t *testing.T) {
	t.Parallel()
	open := func() *commandtest.Scenario[*inventory.Item] {
		return scenario(t).Given(received(10), reserved("r-1", 3))
	}
	open().When(cmdinventory.Release{SKU: "sku-1", ReservationID: "r-1"}).
		Then(inventory.Released{SKU: "sku-1", ReservationID: "r-1", Quantity: 3, At: at})
	open().When(cmdinventory.Commit{SKU: "sku-1", ReservationID: "r-1"}).
		Then(inventory.Committed{SKU: "sku-1", ReservationID: "r-1", Quantity: 3, At: at})
	open().When(cmdinventory.Release{SKU: "sku-1", ReservationID: "r-9"}).ThenError(inventory.ErrReservationNotFound)
	open().When(cmdinventory.Commit{SKU: "sku-1", ReservationID: "r-9"}).ThenError(inventory.ErrReservationNotFound)

	released := scenario(t).Given(received(10), reserved("r-1", 3), inventory.Released{SKU: "sku-1", ReservationID: "r-1", Quantity: 3, At: at})
	released.When(cmdinventory.Release{SKU: "sku-1", ReservationID: "r-1"}).Then() // idempotent
	scenario(t).Given(received(10), reserved("r-1", 3), inventory.Released{SKU: "sku-1", ReservationID: "r-1", Quantity: 3, At: at}).
		When(cmdinventory.Commit{SKU: "sku-1", ReservationID: "r-1"}).ThenError(inventory.ErrAlreadyReleased)

	committed := func() *commandtest.Scenario[*inventory.Item] {
		return scenario(t).Given(received(10), reserved("r-1", 3), inventory.Committed{SKU: "sku-1", ReservationID: "r-1", Quantity: 3, At: at})
	}
	committed().When(cmdinventory.Commit{SKU: "sku-1", ReservationID: "r-1"}).Then() // idempotent
	committed().When(cmdinventory.Release{SKU: "sku-1", ReservationID: "r-1"}).ThenError(inventory.ErrAlreadyCommitted)
}

func TestAvailability(t *testing.T) {
	t.Parallel()
	it, err := inventory.Load(nil)
	if err != nil || it.Version != 0 || it.Available() != 0 {
		t.Fatalf("empty item: %+v %v", it, err)
	}
	for _, p := range []event.Payload{received(10), reserved("r-1", 3), reserved("r-2", 2),
		inventory.Committed{SKU: "sku-1", ReservationID: "r-1", Quantity: 3, At: at},
		inventory.Released{SKU: "sku-1", ReservationID: "r-2", Quantity: 2, At: at}} {
		if err := it.Apply(p); err != nil {
			t.Fatal(err)
		}
	}
	if it.OnHand != 7 || it.Reserved != 0 || it.Available() != 7 || it.Version != 5 {
		t.Fatalf("item: %+v", it)
	}
}
