package commands

import (
	"time"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/domain/order"
)

// Command is a request to change one order. Each command names itself
// (for metrics and idempotency fingerprints) and decides against the
// loaded aggregate.
type Command interface {
	// Name is a stable identifier, e.g. "order.place".
	Name() string
	// Target is the ID of the order the command acts on.
	Target() string
	// Decide returns the events the order emits in response, or a rule error.
	Decide(o *order.Order, now time.Time) ([]event.Payload, error)
}

// CreateOrder starts a draft order.
type CreateOrder struct {
	OrderID    string `json:"order_id"`
	CustomerID string `json:"customer_id"`
	Currency   string `json:"currency"`
}

func (CreateOrder) Name() string     { return "order.create" }
func (c CreateOrder) Target() string { return c.OrderID }
func (c CreateOrder) Decide(o *order.Order, now time.Time) ([]event.Payload, error) {
	return o.Create(c.OrderID, c.CustomerID, c.Currency, now)
}

// AddLine adds a product (or more of it) to a draft order.
type AddLine struct {
	OrderID   string      `json:"order_id"`
	ProductID string      `json:"product_id"`
	Quantity  int64       `json:"quantity"`
	UnitPrice order.Money `json:"unit_price"`
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
