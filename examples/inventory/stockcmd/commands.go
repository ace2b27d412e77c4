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

// Transfer moves units from one SKU's stock to another's in one command
// over both items (commands.SpanningCommand): a reservation committed on
// the source, a receipt on the destination, both or neither. Idempotent on
// the transfer ID, which is the source's reservation ID.
type Transfer struct {
	SKU        string `json:"sku"`
	To         string `json:"to_sku"`
	TransferID string `json:"transfer_id"`
	Quantity   int64  `json:"quantity"`
}

var _ commands.SpanningCommand = Transfer{}

func (Transfer) Name() string     { return "inventory.transfer" }
func (c Transfer) Target() string { return c.SKU }
func (c Transfer) Decide(s *commands.Span, now time.Time) error {
	if c.To == c.SKU {
		return stock.ErrTransferToItself
	}
	src, err := commands.Load(s, Aggregate, c.SKU)
	if err != nil {
		return err
	}
	dst, err := commands.Load(s, Aggregate, c.To)
	if err != nil {
		return err
	}
	if r, ok := src.Reservations[c.TransferID]; ok && r.State == stock.StateCommitted && r.Quantity == c.Quantity {
		return nil // this transfer happened already
	}
	out, err := src.Reserve(c.SKU, c.TransferID, c.Quantity, now)
	if err != nil {
		return err
	}
	for _, p := range out {
		if err := src.Apply(p); err != nil {
			return err
		}
	}
	commit, err := src.Commit(c.SKU, c.TransferID, now)
	if err != nil {
		return err
	}
	in, err := dst.Receive(c.To, c.Quantity, now)
	if err != nil {
		return err
	}
	if err := commands.Emit(s, Aggregate, c.SKU, append(out, commit...)...); err != nil {
		return err
	}
	return commands.Emit(s, Aggregate, c.To, in...)
}
