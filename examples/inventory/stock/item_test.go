package stock_test

import (
	"testing"

	"github.com/strata-es/strata/commands/commandtest"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/examples/inventory/stock"
	"github.com/strata-es/strata/examples/inventory/stockcmd"
)

var at = commandtest.DefaultNow

func received(q int64) stock.Received {
	return stock.Received{SKU: "sku-1", Quantity: q, At: at}
}

func reserved(id string, q int64) stock.Reserved {
	return stock.Reserved{SKU: "sku-1", ReservationID: id, Quantity: q, At: at}
}

func scenario(t *testing.T) *commandtest.Scenario[*stock.Item] {
	return commandtest.For(t, stockcmd.Aggregate).Codecs(stock.Registry)
}

func TestReceive(t *testing.T) {
	t.Parallel()
	scenario(t).When(stockcmd.Receive{SKU: "sku-1", Quantity: 5}).Then(received(5))
	scenario(t).Given(received(5)).When(stockcmd.Receive{SKU: "sku-1", Quantity: 7}).Then(received(7))
	scenario(t).When(stockcmd.Receive{SKU: "sku-1", Quantity: 0}).ThenError(stock.ErrQuantityOutOfRange)
	scenario(t).When(stockcmd.Receive{SKU: "sku-1", Quantity: -3}).ThenError(domain.ErrInvalid)
	scenario(t).When(stockcmd.Receive{SKU: "..", Quantity: 1}).ThenError(domain.ErrInvalid)
	scenario(t).Given(received(stock.MaxQuantity)).When(stockcmd.Receive{SKU: "sku-1", Quantity: stock.MaxQuantity + 1}).
		ThenError(stock.ErrQuantityOutOfRange)
}

func TestStockNeverExceedsTheBound(t *testing.T) {
	t.Parallel()
	s := scenario(t)
	for range stock.MaxStock / stock.MaxQuantity {
		s.Given(received(stock.MaxQuantity))
	}
	s.When(stockcmd.Receive{SKU: "sku-1", Quantity: 1}).ThenError(stock.ErrStockOverflow)
}

func TestReserveKeepsAvailabilityNonNegative(t *testing.T) {
	t.Parallel()
	scenario(t).Given(received(5)).When(stockcmd.Reserve{SKU: "sku-1", ReservationID: "r-1", Quantity: 5}).Then(reserved("r-1", 5))
	scenario(t).Given(received(5), reserved("r-1", 3)).When(stockcmd.Reserve{SKU: "sku-1", ReservationID: "r-2", Quantity: 3}).
		ThenError(stock.ErrInsufficientStock)
	scenario(t).When(stockcmd.Reserve{SKU: "sku-1", ReservationID: "r-1", Quantity: 1}).ThenError(stock.ErrInsufficientStock)
	scenario(t).Given(received(5), reserved("r-1", 3), stock.Committed{SKU: "sku-1", ReservationID: "r-1", Quantity: 3, At: at}).
		When(stockcmd.Reserve{SKU: "sku-1", ReservationID: "r-2", Quantity: 3}).ThenError(stock.ErrInsufficientStock)
	scenario(t).Given(received(5), reserved("r-1", 3), stock.Released{SKU: "sku-1", ReservationID: "r-1", Quantity: 3, At: at}).
		When(stockcmd.Reserve{SKU: "sku-1", ReservationID: "r-2", Quantity: 5}).Then(reserved("r-2", 5))
}

func TestReservationIDs(t *testing.T) {
	t.Parallel()
	given := func() *commandtest.Scenario[*stock.Item] {
		return scenario(t).Given(received(10), reserved("r-1", 3))
	}
	// The same reservation again, while open: nothing changes (a retry).
	given().When(stockcmd.Reserve{SKU: "sku-1", ReservationID: "r-1", Quantity: 3}).Then()
	// The same ID for another quantity, or after it closed: refused.
	given().When(stockcmd.Reserve{SKU: "sku-1", ReservationID: "r-1", Quantity: 4}).ThenError(stock.ErrReservationReused)
	scenario(t).Given(received(10), reserved("r-1", 3), stock.Released{SKU: "sku-1", ReservationID: "r-1", Quantity: 3, At: at}).
		When(stockcmd.Reserve{SKU: "sku-1", ReservationID: "r-1", Quantity: 3}).ThenError(stock.ErrReservationReused)
	given().When(stockcmd.Reserve{SKU: "sku-1", ReservationID: "r 1", Quantity: 1}).ThenError(domain.ErrInvalid)
}

func TestReleaseAndCommit(t *testing.T) {
	t.Parallel()
	open := func() *commandtest.Scenario[*stock.Item] {
		return scenario(t).Given(received(10), reserved("r-1", 3))
	}
	open().When(stockcmd.Release{SKU: "sku-1", ReservationID: "r-1"}).
		Then(stock.Released{SKU: "sku-1", ReservationID: "r-1", Quantity: 3, At: at})
	open().When(stockcmd.Commit{SKU: "sku-1", ReservationID: "r-1"}).
		Then(stock.Committed{SKU: "sku-1", ReservationID: "r-1", Quantity: 3, At: at})
	open().When(stockcmd.Release{SKU: "sku-1", ReservationID: "r-9"}).ThenError(stock.ErrReservationNotFound)
	open().When(stockcmd.Commit{SKU: "sku-1", ReservationID: "r-9"}).ThenError(stock.ErrReservationNotFound)

	released := scenario(t).Given(received(10), reserved("r-1", 3), stock.Released{SKU: "sku-1", ReservationID: "r-1", Quantity: 3, At: at})
	released.When(stockcmd.Release{SKU: "sku-1", ReservationID: "r-1"}).Then() // idempotent
	scenario(t).Given(received(10), reserved("r-1", 3), stock.Released{SKU: "sku-1", ReservationID: "r-1", Quantity: 3, At: at}).
		When(stockcmd.Commit{SKU: "sku-1", ReservationID: "r-1"}).ThenError(stock.ErrAlreadyReleased)

	committed := func() *commandtest.Scenario[*stock.Item] {
		return scenario(t).Given(received(10), reserved("r-1", 3), stock.Committed{SKU: "sku-1", ReservationID: "r-1", Quantity: 3, At: at})
	}
	committed().When(stockcmd.Commit{SKU: "sku-1", ReservationID: "r-1"}).Then() // idempotent
	committed().When(stockcmd.Release{SKU: "sku-1", ReservationID: "r-1"}).ThenError(stock.ErrAlreadyCommitted)
}

func TestAvailability(t *testing.T) {
	t.Parallel()
	it, err := stock.Load(nil)
	if err != nil || it.Version != 0 || it.Available() != 0 {
		t.Fatalf("empty item: %+v %v", it, err)
	}
	for _, p := range []event.Payload{received(10), reserved("r-1", 3), reserved("r-2", 2),
		stock.Committed{SKU: "sku-1", ReservationID: "r-1", Quantity: 3, At: at},
		stock.Released{SKU: "sku-1", ReservationID: "r-2", Quantity: 2, At: at}} {
		if err := it.Apply(p); err != nil {
			t.Fatal(err)
		}
	}
	if it.OnHand != 7 || it.Reserved != 0 || it.Available() != 7 || it.Version != 5 {
		t.Fatalf("item: %+v", it)
	}
}
