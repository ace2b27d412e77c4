package ordercmd

import (
	"time"

	"github.com/strata-es/strata/commands"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/domain/money"
	"github.com/strata-es/strata/examples/orders/order"
)

// Aggregate describes the order aggregate to the engine's handler.
var Aggregate = commands.Aggregate[*order.Order]{
	Kind:     "order",
	Stream:   order.StreamID,
	Load:     order.Load,
	Version:  func(o *order.Order) int64 { return o.Version },
	NotFound: order.ErrOrderNotFound,
}

// Command is a command on an order.
type Command = commands.Command[*order.Order]

// Every command here is a commands.Command on the order aggregate.
var (
	_ Command = CreateOrder{}
	_ Command = AddLine{}
	_ Command = RemoveLine{}
	_ Command = PlaceOrder{}
	_ Command = PayOrder{}
	_ Command = CancelOrder{}
)

// CreateOrder starts a draft order.
type CreateOrder struct {
	OrderID    string `json:"order_id"`
	CustomerID string `json:"customer_id"`
	Currency   string `json:"currency"`
}

func (CreateOrder) Name() string { return "order.create" }

// StartsStream: a new order's stream is empty (commands.StreamStarter).
func (CreateOrder) StartsStream() bool { return true }
func (c CreateOrder) Target() string   { return c.OrderID }
func (c CreateOrder) Decide(o *order.Order, now time.Time) ([]event.Payload, error) {
	return o.Create(c.OrderID, c.CustomerID, c.Currency, now)
}

// AddLine adds a product (or more of it) to a draft order.
type AddLine struct {
	OrderID   string      `json:"order_id"`
	ProductID string      `json:"product_id"`
	Quantity  int64       `json:"quantity"`
	UnitPrice money.Money `json:"unit_price"`
}

func (AddLine) Name() string     { return "order.add_line" }
func (c AddLine) Target() string { return c.OrderID }
func (c AddLine) Decide(o *order.Order, now time.Time) ([]event.Payload, error) {
	return o.AddLine(c.ProductID, c.Quantity, c.UnitPrice, now)
}

// RemoveLine removes a product from a draft order.
type RemoveLine struct {
	OrderID   string `json:"order_id"`
	ProductID string `json:"product_id"`
}

func (RemoveLine) Name() string     { return "order.remove_line" }
func (c RemoveLine) Target() string { return c.OrderID }
func (c RemoveLine) Decide(o *order.Order, now time.Time) ([]event.Payload, error) {
	return o.RemoveLine(c.ProductID, now)
}

// PlaceOrder places a draft order.
type PlaceOrder struct {
	OrderID string `json:"order_id"`
}

func (PlaceOrder) Name() string     { return "order.place" }
func (c PlaceOrder) Target() string { return c.OrderID }
func (c PlaceOrder) Decide(o *order.Order, now time.Time) ([]event.Payload, error) {
	return o.Place(now)
}

// PayOrder records the payment of a placed order.
type PayOrder struct {
	OrderID          string `json:"order_id"`
	PaymentReference string `json:"payment_reference"`
}

func (PayOrder) Name() string     { return "order.pay" }
func (c PayOrder) Target() string { return c.OrderID }
func (c PayOrder) Decide(o *order.Order, now time.Time) ([]event.Payload, error) {
	return o.Pay(c.PaymentReference, now)
}

// CancelOrder cancels an order that is not paid.
type CancelOrder struct {
	OrderID string `json:"order_id"`
	Reason  string `json:"reason"`
}

func (CancelOrder) Name() string     { return "order.cancel" }
func (c CancelOrder) Target() string { return c.OrderID }
func (c CancelOrder) Decide(o *order.Order, now time.Time) ([]event.Payload, error) {
	return o.Cancel(c.Reason, now)
}
