package order

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/domain/money"
)

// Stable event type names. They are part of the stored format: never derive
// them from Go type names and never change them.
const (
	TypeCreated     = "order.created"
	TypeLineAdded   = "order.line_added"
	TypeLineRemoved = "order.line_removed"
	TypePlaced      = "order.placed"
	TypePaid        = "order.paid"
	TypeCancelled   = "order.cancelled"
)

// StreamPrefix starts the name of every order stream.
const StreamPrefix = "order-"

// StreamID returns the name of the stream holding the events of orderID.
func StreamID(orderID string) string { return StreamPrefix + orderID }

// OrderIDFromStream is the inverse of StreamID. ok is false for a stream that
// is not an order stream.
func OrderIDFromStream(stream string) (orderID string, ok bool) {
	id, ok := strings.CutPrefix(stream, StreamPrefix)
	if !ok || id == "" {
		return "", false
	}
	return id, true
}

// Created: an order was opened for a customer, in one currency.
// Schema version 1.
type Created struct {
	OrderID    string    `json:"order_id"`
	CustomerID string    `json:"customer_id"`
	Currency   string    `json:"currency"`
	At         time.Time `json:"at"`
}

// LineAdded: quantity units of a product were added to an order. When the
// product was already on the order, Quantity is the added amount, not the new
// total. Schema version 2 (version 1 stored the price as unit_price_minor
// plus currency; see upcastLineAddedV1).
type LineAdded struct {
	OrderID   string      `json:"order_id"`
	ProductID string      `json:"product_id"`
	Quantity  int64       `json:"quantity"`
	UnitPrice money.Money `json:"unit_price"`
	At        time.Time   `json:"at"`
}

// LineRemoved: a product was taken off an order, whatever its quantity.
// Schema version 1.
type LineRemoved struct {
	OrderID   string    `json:"order_id"`
	ProductID string    `json:"product_id"`
	At        time.Time `json:"at"`
}

// Placed: a draft order was submitted; Total is the order total at that
// moment. Schema version 1.
type Placed struct {
	OrderID string      `json:"order_id"`
	Total   money.Money `json:"total"`
	At      time.Time   `json:"at"`
}

// Paid: a placed order was paid in full. Schema version 1.
type Paid struct {
	OrderID          string      `json:"order_id"`
	PaymentReference string      `json:"payment_reference"`
	Amount           money.Money `json:"amount"`
	At               time.Time   `json:"at"`
}

// Cancelled: a draft or placed order was cancelled. Schema version 1.
type Cancelled struct {
	OrderID string    `json:"order_id"`
	Reason  string    `json:"reason,omitempty"`
	At      time.Time `json:"at"`
}

func (Created) EventType() string     { return TypeCreated }
func (LineAdded) EventType() string   { return TypeLineAdded }
func (LineRemoved) EventType() string { return TypeLineRemoved }
func (Placed) EventType() string      { return TypePlaced }
func (Paid) EventType() string        { return TypePaid }
func (Cancelled) EventType() string   { return TypeCancelled }

// The personal data of orders (docs/personal-data.md): an order's
// customer ID is its data subject and personal; the payment reference of
// its payment is the customer's too. Once a customer is forgotten, their
// ID reads as ErasedCustomerPrefix and a pseudonym (one per forgotten
// customer, so that a customer's totals stay apart), and their payment
// references as ErasedPaymentReference. Both pass the events' Validate.
const (
	ErasedCustomerPrefix   = "erased-"
	ErasedPaymentReference = "erased"
)

// Codecs describes every order event for an event.Registry. Each call returns
// fresh values, so callers may combine them with other aggregates' codecs.
func Codecs() []event.Codec {
	return []event.Codec{
		{Type: TypeCreated, Version: 1, New: func() event.Payload { return new(Created) }, Personal: &event.Personal{
			Subject: "customer_id", Fields: []event.PersonalField{{Name: "customer_id", Tombstone: event.Pseudonym(ErasedCustomerPrefix)}}}},
		{Type: TypeLineAdded, Version: 2, New: func() event.Payload { return new(LineAdded) },
			Upcasters: map[int]event.Upcaster{1: upcastLineAddedV1}},
		{Type: TypeLineRemoved, Version: 1, New: func() event.Payload { return new(LineRemoved) }},
		{Type: TypePlaced, Version: 1, New: func() event.Payload { return new(Placed) }},
		{Type: TypePaid, Version: 1, New: func() event.Payload { return new(Paid) }, Personal: &event.Personal{
			Fields: []event.PersonalField{{Name: "payment_reference", Tombstone: event.Erased(ErasedPaymentReference)}}}},
		{Type: TypeCancelled, Version: 1, New: func() event.Payload { return new(Cancelled) }},
	}
}

// NewRegistry returns a registry holding the order events only.
func NewRegistry() *event.Registry { return event.NewRegistry(Codecs()...) }

// Registry holds the order events only. It is read-only after init.
var Registry = NewRegistry()

// upcastLineAddedV1 turns order.line_added v1
//
//	{"order_id","product_id","quantity","unit_price_minor":123,"currency":"EUR","at"}
//
// into v2, where the price is a money.Money: "unit_price":{"amount":123,"currency":"EUR"}.
// Other fields pass through untouched.
func upcastLineAddedV1(data json.RawMessage) (json.RawMessage, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return nil, err
	}
	if fields == nil { // the JSON was null
		return nil, errors.New("line_added v1: not an object")
	}
	rawAmount, ok := fields["unit_price_minor"]
	if !ok {
		return nil, errors.New("line_added v1: unit_price_minor missing")
	}
	rawCurrency, ok := fields["currency"]
	if !ok {
		return nil, errors.New("line_added v1: currency missing")
	}
	var price money.Money
	if err := json.Unmarshal(rawAmount, &price.Amount); err != nil {
		return nil, fmt.Errorf("line_added v1: unit_price_minor: %w", err)
	}
	if err := json.Unmarshal(rawCurrency, &price.Currency); err != nil {
		return nil, fmt.Errorf("line_added v1: currency: %w", err)
	}
	rawPrice, err := json.Marshal(price)
	if err != nil {
		return nil, err
	}
	delete(fields, "unit_price_minor")
	delete(fields, "currency")
	fields["unit_price"] = rawPrice
	return json.Marshal(fields)
}
