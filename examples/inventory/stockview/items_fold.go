package stockview

import (
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/examples/inventory/stock"
	"github.com/strata-es/strata/projections"
)

var _ projections.Folder = (*Items)(nil)

// NewFold implements projections.Folder: a rebuild keeps one row per SKU
// in memory and writes each once.
func (p *Items) NewFold() projections.Fold {
	return &itemsFold{table: p.tables.Items, rows: map[itemKey]*itemRow{}}
}

type itemKey struct{ tenant, sku string }

type itemRow struct {
	tenant, sku      string
	onHand, reserved int64
	version          int64
	updatedAt        time.Time
}

// itemsFold mirrors Apply's two statements, including what makes them
// fail: a movement of a SKU never received (no row), a counter passing
// bigint, and the table's CHECKs, which the statements meet after every
// event (COPY would only see the final row).
type itemsFold struct {
	table string
	rows  map[itemKey]*itemRow
	order []*itemRow
}

func (f *itemsFold) Add(ev projections.Event) error {
	sku, ok := stock.SKUFromStream(ev.Stream)
	if !ok {
		return fmt.Errorf("%w: stream %q is not an inventory stream", projections.ErrUnexpectedEvent, ev.Stream)
	}
	var onHand, reserved int64
	var inPayload string
	var at time.Time
	received := false
	switch e := ev.Payload.(type) {
	case stock.Received:
		onHand, inPayload, at, received = e.Quantity, e.SKU, e.At, true
	case stock.Reserved:
		reserved, inPayload, at = e.Quantity, e.SKU, e.At
	case stock.Released:
		if e.Quantity == math.MinInt64 {
			return fmt.Errorf("quantity %d: bigint out of range", e.Quantity)
		}
		reserved, inPayload, at = -e.Quantity, e.SKU, e.At
	case stock.Committed:
		if e.Quantity == math.MinInt64 {
			return fmt.Errorf("quantity %d: bigint out of range", e.Quantity)
		}
		onHand, reserved, inPayload, at = -e.Quantity, -e.Quantity, e.SKU, e.At
	default:
		return projections.Unexpected(ev)
	}
	if inPayload != sku {
		return fmt.Errorf("%w: stream %q holds an event of SKU %q", projections.ErrUnexpectedEvent, ev.Stream, inPayload)
	}
	k := itemKey{ev.Tenant, sku}
	row := f.rows[k]
	next := itemRow{tenant: ev.Tenant, sku: sku, version: ev.Version, updatedAt: at}
	switch {
	case row == nil && !received:
		return fmt.Errorf("%w: inventory item %q (0 rows changed, want 1)", projections.ErrMissingRow, sku)
	case row == nil:
		next.onHand = onHand
	default:
		var ok1, ok2 bool
		next.onHand, ok1 = addInt64(row.onHand, onHand)
		next.reserved, ok2 = addInt64(row.reserved, reserved)
		if !ok1 || !ok2 {
			return fmt.Errorf("inventory item %q: bigint out of range", sku)
		}
	}
	if next.onHand < 0 || next.reserved < 0 || next.reserved > next.onHand || next.version <= 0 {
		return fmt.Errorf("inventory item %q: on hand %d, reserved %d, version %d violate the table's checks", sku, next.onHand, next.reserved, next.version)
	}
	if row == nil {
		row = &itemRow{}
		f.rows[k] = row
		f.order = append(f.order, row)
	}
	*row = next
	return nil
}

// addInt64 adds with bigint's range check.
func addInt64(a, b int64) (int64, bool) {
	s := a + b
	return s, (s > a) == (b > 0)
}

func (f *itemsFold) Rows() int { return len(f.order) }

func (f *itemsFold) Tables() []projections.FoldedTable {
	return []projections.FoldedTable{{
		Table:   f.table,
		Columns: []string{"tenant_id", "sku", "on_hand", "reserved", "version", "updated_at"},
		Rows: pgx.CopyFromSlice(len(f.order), func(i int) ([]any, error) {
			r := f.order[i]
			return []any{r.tenant, r.sku, r.onHand, r.reserved, r.version, r.updatedAt}, nil
		}),
	}}
}
