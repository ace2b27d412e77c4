package fulfilquery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/readmodels"
)

// ErrNotFound: no order with that ID (or it belongs to another tenant,
// which looks the same).
var ErrNotFound = fmt.Errorf("%w: order not found", domain.ErrNotFound)

// Fulfilment is where one order's fulfilment stands.
type Fulfilment struct {
	OrderID          string
	Stage            string
	OrderStatus      string
	Currency         string
	Lines            []Line // by product ID
	Reserved         int
	Released         int
	Committed        int
	TotalAmount      *int64
	PaymentReference *string
	CancelReason     *string
	Version          int64
	UpdatedAt        time.Time
}

// Line is one product of the order and its quantity.
type Line struct {
	ProductID string
	Quantity  int64
}

// Reader reads the fulfilment read model.
type Reader struct{ db *readmodels.DB }

// NewReader returns a Reader over db (the application role's pool).
func NewReader(db *readmodels.DB) *Reader { return &Reader{db: db} }

// Get returns the fulfilment of one order of the tenant in ctx. Errors:
// ErrNotFound.
func (r *Reader) Get(ctx context.Context, orderID string) (Fulfilment, error) {
	var f Fulfilment
	var lines []byte
	var err error
	qerr := r.db.InTenant(ctx, func(b *pgx.Batch) {
		b.Queue(`SELECT order_id, stage, order_status, currency, lines, reserved, released, committed, total_amount,
	payment_reference, cancel_reason, version, updated_at
FROM order_fulfilment WHERE tenant_id = $1 AND order_id = $2`, readmodels.TenantOf(ctx), orderID).
			QueryRow(func(row pgx.Row) error {
				err = row.Scan(&f.OrderID, &f.Stage, &f.OrderStatus, &f.Currency, &lines, &f.Reserved, &f.Released, &f.Committed,
					&f.TotalAmount, &f.PaymentReference, &f.CancelReason, &f.Version, &f.UpdatedAt)
				if errors.Is(err, pgx.ErrNoRows) {
					return nil
				}
				return err
			})
	})
	switch {
	case qerr != nil:
		return Fulfilment{}, fmt.Errorf("read order fulfilment: %w", qerr)
	case errors.Is(err, pgx.ErrNoRows):
		return Fulfilment{}, ErrNotFound
	}
	var m map[string]int64
	if err := json.Unmarshal(lines, &m); err != nil {
		return Fulfilment{}, fmt.Errorf("read order fulfilment: lines: %w", err)
	}
	for id, q := range m {
		f.Lines = append(f.Lines, Line{ProductID: id, Quantity: q})
	}
	sort.Slice(f.Lines, func(i, j int) bool { return f.Lines[i].ProductID < f.Lines[j].ProductID })
	f.UpdatedAt = f.UpdatedAt.UTC()
	return f, nil
}
