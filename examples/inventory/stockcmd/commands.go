package stockcmd

import (
	"encoding/json"
	"time"

	"github.com/strata-es/strata/commands"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/examples/inventory/stock"
)

// Aggregate describes the inventory item (one SKU) to the engine's handler.
var Aggregate = commands.Aggregate[*stock.Item]{
	Kind:     "inventory item",
	Stream:   stock.StreamID,
	Load:     stock.Load,
	Version:  func(it *stock.Item) int64 { return it.Version },
	NotFound: stock.ErrItemNotFound,
	// A SKU's stream grows with every movement, for ever: its state is
	// snapshotted every 100 events, so a command reads at most that many.
	Snapshots: &commands.Snapshots[*stock.Item]{
		Version: 1,
		Every:   100,
		Encode:  func(it *stock.Item) ([]byte, error) { return json.Marshal(it) },
		Decode: func(b []byte) (*stock.Item, error) {
			it := &stock.Item{}
			return it, json.Unmarshal(b, it)
		},
		Resume: stock.Resume,
	},
}

// Command is a command on an inventory item.
type Command = commands.Command[*stock.Item]

var (
	_ Command = Receive{}
	_ Command = Reserve{}
	_ Command = Release{}
	_ Command = Commit{}
)

// Receive adds units to a SKU's stock.
type Receive struct {
	SKU      string `json:"sku"`
	Quantity int64  `json:"quantity"`
}

func (Receive) Name() string     { return "inventory.receive" }
func (c Receive) Target() string { return c.SKU }
func (c Receive) Decide(it *stock.Item, now time.Time) ([]event.Payload, error) {
	return it.Receive(c.SKU, c.Quantity, now)
}

// Reserve sets units of a SKU aside under a reservation ID.
type Reserve struct {
	SKU           string `json:"sku"`
	ReservationID string `json:"reservation_id"`
	Quantity      int64  `json:"quantity"`
}

func (Reserve) Name() string     { return "inventory.reserve" }
func (c Reserve) Target() string { return c.SKU }
func (c Reserve) Decide(it *stock.Item, now time.Time) ([]event.Payload, error) {
	return it.Reserve(c.SKU, c.ReservationID, c.Quantity, now)
}

// Release ends a reservation; its units are available again.
type Release struct {
	SKU           string `json:"sku"`
	ReservationID string `json:"reservation_id"`
}

func (Release) Name() string     { return "inventory.release" }
func (c Release) Target() string { return c.SKU }
func (c Release) Decide(it *stock.Item, now time.Time) ([]event.Payload, error) {
	return it.Release(c.SKU, c.ReservationID, now)
}

// Commit makes a reservation's units leave the stock.
type Commit struct {
	SKU           string `json:"sku"`
	ReservationID string `json:"reservation_id"`
}

func (Commit) Name() string     { return "inventory.commit" }
func (c Commit) Target() string { return c.SKU }
func (c Commit) Decide(it *stock.Item, now time.Time) ([]event.Payload, error) {
	return it.Commit(c.SKU, c.ReservationID, now)
}
