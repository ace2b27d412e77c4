package ordercmd_test

import (
	"testing"

	"github.com/strata-es/strata/commands/commandtest"
	"github.com/strata-es/strata/domain/money"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/ordercmd"
)

// The order commands through the public aggregate kit: the decisions the
// handler would append, each event round-tripped through its codec.

var at = commandtest.DefaultNow

func scenario(t *testing.T) *commandtest.Scenario[*order.Order] {
	return commandtest.For(t, ordercmd.Aggregate).Codecs(order.Registry)
}

var (
	created = order.Created{OrderID: "o-1", CustomerID: "c-1", Currency: "EUR", At: at}
	line    = order.LineAdded{OrderID: "o-1", ProductID: "p-1", Quantity: 2, UnitPrice: money.Money{Amount: 150, Currency: "EUR"}, At: at}
	placed  = order.Placed{OrderID: "o-1", Total: money.Money{Amount: 300, Currency: "EUR"}, At: at}
)

func TestOrderCommandsDecide(t *testing.T) {
	t.Parallel()
	scenario(t).When(ordercmd.CreateOrder{OrderID: "o-1", CustomerID: "c-1", Currency: "EUR"}).Then(created)
	scenario(t).Given(created).When(ordercmd.CreateOrder{OrderID: "o-1", CustomerID: "c-1", Currency: "EUR"}).ThenError(order.ErrAlreadyExists)
	scenario(t).Given(created).When(ordercmd.AddLine{OrderID: "o-1", ProductID: "p-1", Quantity: 2, UnitPrice: line.UnitPrice}).Then(line)
	scenario(t).Given(created).When(ordercmd.PlaceOrder{OrderID: "o-1"}).ThenError(order.ErrEmptyOrder)
	scenario(t).Given(created, line).When(ordercmd.PlaceOrder{OrderID: "o-1"}).Then(placed)
	scenario(t).Given(created, line, placed).When(ordercmd.AddLine{OrderID: "o-1", ProductID: "p-2", Quantity: 1, UnitPrice: line.UnitPrice}).
		ThenError(order.ErrNotEditable)
	scenario(t).Given(created, line, placed).When(ordercmd.PayOrder{OrderID: "o-1", PaymentReference: "psp-1"}).
		Then(order.Paid{OrderID: "o-1", PaymentReference: "psp-1", Amount: placed.Total, At: at})
	scenario(t).Given(created, line, placed, order.Paid{OrderID: "o-1", PaymentReference: "psp-1", Amount: placed.Total, At: at}).
		When(ordercmd.CancelOrder{OrderID: "o-1"}).ThenError(order.ErrAlreadyPaid)
}
