package stockquery

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/readmodels"
)

// ErrItemNotFound: no stock was ever received for the SKU (or it belongs
// to another tenant, which looks the same).
var ErrItemNotFound = fmt.Errorf("%w: inventory item not found", domain.ErrNotFound)

// Item is the stock of one SKU.
type Item struct {
	SKU       string
	OnHand    int64
	Reserved  int64
	Available int64
	Version   int64
}

// MaxLimit is the largest page of a list.
const MaxLimit = 200

// Reader reads the inventory read model.
type Reader struct{ db *readmodels.DB }

// NewReader returns a Reader over db (the application role's pool).
func NewReader(db *readmodels.DB) *Reader { return &Reader{db: db} }

const itemColumns = `sku, on_hand, reserved, on_hand - reserved, version`

func scanItem(row pgx.Row) (Item, error) {
	var it Item
	err := row.Scan(&it.SKU, &it.OnHand, &it.Reserved, &it.Available, &it.Version)
	return it, err
}

// Item returns one SKU's stock. Errors: ErrItemNotFound.
func (r *Reader) Item(ctx context.Context, sku string) (Item, error) {
	var it Item
	var err error
	qerr := r.db.InTenant(ctx, func(b *pgx.Batch) {
		b.Queue(`SELECT `+itemColumns+` FROM inventory_items WHERE tenant_id = $1 AND sku = $2`, readmodels.TenantOf(ctx), sku).
			QueryRow(func(row pgx.Row) error {
				it, err = scanItem(row)
				if errors.Is(err, pgx.ErrNoRows) {
					return nil
				}
				return err
			})
	})
	switch {
	case qerr != nil:
		return Item{}, fmt.Errorf("read inventory item: %w", qerr)
	case errors.Is(err, pgx.ErrNoRows):
		return Item{}, ErrItemNotFound
	}
	return it, nil
}

// List returns up to limit SKUs in SKU order, after the SKU after ("" for
// the first page), and the SKU to continue after when there may be more.
func (r *Reader) List(ctx context.Context, after string, limit int) ([]Item, string, error) {
	var items []Item
	err := r.db.InTenant(ctx, func(b *pgx.Batch) {
		b.Queue(`SELECT `+itemColumns+` FROM inventory_items WHERE tenant_id = $1 AND sku > $2 ORDER BY sku LIMIT $3`,
			readmodels.TenantOf(ctx), after, limit+1).Query(func(rows pgx.Rows) error {
			var err error
			items, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Item, error) { return scanItem(row) })
			return err
		})
	})
	if err != nil {
		return nil, "", fmt.Errorf("list inventory items: %w", err)
	}
	next := ""
	if len(items) > limit {
		items = items[:limit]
		next = items[limit-1].SKU
	}
	return items, next, nil
}
