package stock

import (
	"strings"
	"time"

	"github.com/strata-es/strata/domain/event"
)

// Stable event type names: part of the stored format, never changed.
const (
	TypeReceived  = "inventory.received"
	TypeReserved  = "inventory.reserved"
	TypeReleased  = "inventory.released"
	TypeCommitted = "inventory.committed"
)

// StreamPrefix starts the name of every inventory stream.
const StreamPrefix = "inventory-"

// StreamID returns the name of the stream holding the events of sku.
func StreamID(sku string) string { return StreamPrefix + sku }

// SKUFromStream is the inverse of StreamID; ok is false for a stream that
// is not an inventory stream.
func SKUFromStream(stream string) (sku string, ok bool) {
	sku, ok = strings.CutPrefix(stream, StreamPrefix)
	return sku, ok && sku != ""
}

// Received: quantity units of sku came into stock. Schema version 1.
type Received struct {
	SKU      string    `json:"sku"`
	Quantity int64     `json:"quantity"`
	At       time.Time `json:"at"`
}

// Reserved: quantity units were set aside under a reservation. Schema
// version 1.
type Reserved struct {
	SKU           string    `json:"sku"`
	ReservationID string    `json:"reservation_id"`
	Quantity      int64     `json:"quantity"`
	At            time.Time `json:"at"`
}

// Released: a reservation ended without the stock leaving; its units are
// available again. Quantity repeats the reservation's. Schema version 1.
type Released struct {
	SKU           string    `json:"sku"`
	ReservationID string    `json:"reservation_id"`
	Quantity      int64     `json:"quantity"`
	At            time.Time `json:"at"`
}

// Committed: a reservation's units left the stock (shipped, consumed).
// Quantity repeats the reservation's. Schema version 1.
type Committed struct {
	SKU           string    `json:"sku"`
	ReservationID string    `json:"reservation_id"`
	Quantity      int64     `json:"quantity"`
	At            time.Time `json:"at"`
}

func (Received) EventType() string  { return TypeReceived }
func (Reserved) EventType() string  { return TypeReserved }
func (Released) EventType() string  { return TypeReleased }
func (Committed) EventType() string { return TypeCommitted }

// Codecs describes every inventory event for an event.Registry.
func Codecs() []event.Codec {
	return []event.Codec{
		{Type: TypeReceived, Version: 1, New: func() event.Payload { return new(Received) }},
		{Type: TypeReserved, Version: 1, New: func() event.Payload { return new(Reserved) }},
		{Type: TypeReleased, Version: 1, New: func() event.Payload { return new(Released) }},
		{Type: TypeCommitted, Version: 1, New: func() event.Payload { return new(Committed) }},
	}
}

// Registry holds the inventory events only (the module's tests use it; a
// process decodes with one registry of every module's codecs).
var Registry = event.NewRegistry(Codecs()...)
