package stockview

import (
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/examples/inventory/stock"
	"github.com/strata-es/strata/projections"
)

// ItemsName is the projection's name: its checkpoint key. Renaming it
// makes a new projection that rebuilds every row from the first event.
const ItemsName = "inventory_items"

// ItemsTables names the projection's tables (zero: the live ones).
type ItemsTables struct {
	Items string // default inventory_items
}

// Items keeps one row per SKU: units on hand, units reserved, the stream
// version applied and the time of the last change.
type Items struct {
	tables   ItemsTables
	received string
	moved    string
}

var (
	_ projections.Retargetable = (*Items)(nil)
	_ projections.StreamScoped = (*Items)(nil)
)

// NewItems returns the projection writing into t.
func NewItems(t ItemsTables) *Items {
	if t.Items == "" {
		t.Items = "inventory_items"
	}
	table := projections.Ident(t.Items)
	return &Items{tables: t,
		// Stock received creates the SKU's row or adds to it.
		received: `INSERT INTO ` + table + ` AS t (tenant_id, sku, on_hand, reserved, version, updated_at)
VALUES ($1, $2, $3, 0, $4, $5)
ON CONFLICT (tenant_id, sku) DO UPDATE
SET on_hand = t.on_hand + EXCLUDED.on_hand, version = EXCLUDED.version, updated_at = EXCLUDED.updated_at`,
		// Reservations move the counters of an existing row by deltas (not
		// an upsert: the row to insert would have to pass the table's
		// CHECKs with the deltas as its values). The stock was received
		// first, or the reservation would have been refused.
		moved: `UPDATE ` + table + `
SET on_hand = on_hand + $3, reserved = reserved + $4, version = $5, updated_at = $6
WHERE tenant_id = $1 AND sku = $2`,
	}
}

// All returns the inventory module's projections writing into their live
// tables.
func All() []projections.Projection { return []projections.Projection{NewItems(ItemsTables{})} }

// Name implements projections.Projection.
func (p *Items) Name() string { return ItemsName }

// EventTypes implements projections.Projection.
func (p *Items) EventTypes() []string {
	return []string{stock.TypeReceived, stock.TypeReserved, stock.TypeReleased, stock.TypeCommitted}
}

// Tables implements projections.Projection.
func (p *Items) Tables() []string { return []string{p.tables.Items} }

// Apply implements projections.Projection.
func (p *Items) Apply(b *pgx.Batch, ev projections.Event) error {
	sku, ok := stock.SKUFromStream(ev.Stream)
	if !ok {
		return fmt.Errorf("%w: stream %q is not an inventory stream", projections.ErrUnexpectedEvent, ev.Stream)
	}
	var onHand, reserved int64
	var inPayload string
	var at time.Time
	switch e := ev.Payload.(type) {
	case stock.Received:
		onHand, inPayload, at = e.Quantity, e.SKU, e.At
	case stock.Reserved:
		reserved, inPayload, at = e.Quantity, e.SKU, e.At
	case stock.Released:
		reserved, inPayload, at = -e.Quantity, e.SKU, e.At
	case stock.Committed:
		onHand, reserved, inPayload, at = -e.Quantity, -e.Quantity, e.SKU, e.At
	default:
		return projections.Unexpected(ev)
	}
	if inPayload != sku {
		return fmt.Errorf("%w: stream %q holds an event of SKU %q", projections.ErrUnexpectedEvent, ev.Stream, inPayload)
	}
	if _, ok := ev.Payload.(stock.Received); ok {
		projections.ExpectOne(b.Queue(p.received, ev.Tenant, sku, onHand, ev.Version, at), "inventory item", sku)
		return nil
	}
	projections.ExpectOne(b.Queue(p.moved, ev.Tenant, sku, onHand, reserved, ev.Version, at), "inventory item", sku)
	return nil
}

// WithTables implements projections.Retargetable.
func (p *Items) WithTables(rename map[string]string) projections.Projection {
	return NewItems(ItemsTables{Items: projections.Renamed(rename, p.tables.Items)})
}

// DeleteStreams implements projections.StreamScoped: a SKU is a stream.
func (p *Items) DeleteStreams(b *pgx.Batch, tenant string, streams []string) error {
	skus := make([]string, 0, len(streams))
	for _, s := range streams {
		if sku, ok := stock.SKUFromStream(s); ok {
			skus = append(skus, sku)
		}
	}
	b.Queue(`DELETE FROM `+projections.Ident(p.tables.Items)+` WHERE tenant_id = $1 AND sku = ANY($2::text[])`, tenant, skus)
	return nil
}
