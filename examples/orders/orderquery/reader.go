package orderquery

import (
	"context"
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/money"
	"github.com/strata-es/strata/readmodels"
)

// Errors. Another tenant's order or customer is reported exactly like a
// missing one.
var (
	ErrOrderNotFound    = fmt.Errorf("%w: order not found", domain.ErrNotFound)
	ErrCustomerNotFound = fmt.Errorf("%w: customer not found", domain.ErrNotFound)
)

// Sum is an amount in minor units of a currency added up over orders (a
// customer's paid total, a day's revenue). One order's amount fits an
// int64; a sum over orders need not, so the read model keeps it as
// numeric and it is read exactly, at any size. Amount is never nil.
type Sum struct {
	Amount   *big.Int
	Currency string
}

// Line is one product on an order.
type Line struct {
	ProductID string
	Quantity  int64
	UnitPrice money.Money
	LineTotal money.Money
}

// Order is an order's details.
type Order struct {
	OrderID    string
	CustomerID string
	Status     string
	Currency   string
	Lines      []Line // in the order products were first added
	Total      money.Money
	Version    int64 // stream version of the last event applied
	CreatedAt  time.Time
	PlacedAt   *time.Time
	PaidAt     *time.Time
	// CancelledAt is set for a cancelled order.
	CancelledAt *time.Time
}

// OrderListItem is one order in a list.
type OrderListItem struct {
	OrderID    string
	CustomerID string
	Status     string
	Currency   string
	Total      *money.Money // set once the order is placed
	CreatedAt  time.Time
	UpdatedAt  time.Time // time of the last status change
}

// OrderFilter selects and pages a list of orders. Orders are listed newest
// first (created_at, then order_id, both descending).
type OrderFilter struct {
	Status     string // "" for any
	CustomerID string // "" for any
	Limit      int    // 1 to MaxLimit
	After      *readmodels.Cursor
}

// MaxLimit is the largest page of orders.
const MaxLimit = 200

// CustomerSummary counts a customer's orders.
type CustomerSummary struct {
	CustomerID string
	Orders     int64
	OpenOrders int64 // draft or placed
	PaidTotal  []Sum // per currency, sorted by currency
}

// RevenueDay is what paid orders brought in on one UTC day in one currency.
type RevenueDay struct {
	Day      time.Time // midnight UTC
	Currency string
	Amount   *big.Int // exact: a numeric sum over the day's orders, never nil
	Orders   int64
}

// Reader reads the order read models.
type Reader struct {
	db *readmodels.DB
}

// NewReader returns a Reader over db (the application role's pool).
func NewReader(db *readmodels.DB) *Reader { return &Reader{db: db} }

// OrderSQL reads one order ($1 tenant, $2 order ID) with its lines, one
// row per line (one row with null line columns for an order without).
// The benchmark's minimal handler sends it too, so that strata's query path
// and its baseline run the same statement.
const OrderSQL = `SELECT d.order_id, d.customer_id, d.status, d.currency, d.total_amount, d.version,
       d.created_at, d.placed_at, d.paid_at, d.cancelled_at,
       l.product_id, l.quantity, l.unit_price, l.currency, l.line_total
FROM order_details d
LEFT JOIN order_detail_lines l ON l.tenant_id = d.tenant_id AND l.order_id = d.order_id
WHERE d.tenant_id = $1 AND d.order_id = $2
ORDER BY l.seq`

// Order returns one order with its lines. Errors: ErrOrderNotFound.
func (r *Reader) Order(ctx context.Context, orderID string) (Order, error) {
	var o Order
	found := false
	err := r.db.InTenant(ctx, func(b *pgx.Batch) {
		b.Queue(OrderSQL, readmodels.TenantOf(ctx), orderID).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var product, lineCurrency *string
				var qty, unit, lineTotal *int64
				if err := rows.Scan(&o.OrderID, &o.CustomerID, &o.Status, &o.Currency, &o.Total.Amount, &o.Version,
					&o.CreatedAt, &o.PlacedAt, &o.PaidAt, &o.CancelledAt,
					&product, &qty, &unit, &lineCurrency, &lineTotal); err != nil {
					return err
				}
				found = true
				if product != nil {
					o.Lines = append(o.Lines, Line{ProductID: *product, Quantity: *qty,
						UnitPrice: money.Money{Amount: *unit, Currency: *lineCurrency}, LineTotal: money.Money{Amount: *lineTotal, Currency: *lineCurrency}})
				}
			}
			return rows.Err()
		})
	})
	if err != nil {
		return Order{}, fmt.Errorf("read order: %w", err)
	}
	if !found {
		return Order{}, ErrOrderNotFound
	}
	o.Total.Currency = o.Currency
	o.CreatedAt = o.CreatedAt.UTC()
	for _, t := range []**time.Time{&o.PlacedAt, &o.PaidAt, &o.CancelledAt} {
		if *t != nil {
			u := (*t).UTC()
			*t = &u
		}
	}
	return o, nil
}

// ListOrders returns one page of orders and the cursor of the next page
// (nil on the last page).
func (r *Reader) ListOrders(ctx context.Context, f OrderFilter) ([]OrderListItem, *readmodels.Cursor, error) {
	if f.Limit < 1 || f.Limit > MaxLimit {
		return nil, nil, fmt.Errorf("%w: limit must be between 1 and %d", domain.ErrInvalid, MaxLimit)
	}
	// One statement per combination of filters, rather than optional
	// "$n IS NULL OR ..." conditions, so that each gets a plan on its index.
	args := []any{readmodels.TenantOf(ctx)}
	where := []string{"tenant_id = $1"}
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if f.Status != "" {
		where = append(where, "status = "+arg(f.Status))
	}
	if f.CustomerID != "" {
		where = append(where, "customer_id = "+arg(f.CustomerID))
	}
	if f.After != nil {
		where = append(where, fmt.Sprintf("(created_at, order_id) < (%s, %s)", arg(f.After.At), arg(f.After.Key)))
	}
	sql := `SELECT order_id, customer_id, status, currency, total_amount, created_at, updated_at
FROM order_list WHERE ` + strings.Join(where, " AND ") + `
ORDER BY created_at DESC, order_id DESC LIMIT ` + arg(f.Limit+1)
	var items []OrderListItem
	err := r.db.InTenant(ctx, func(b *pgx.Batch) {
		b.Queue(sql, args...).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var it OrderListItem
				var total *int64
				if err := rows.Scan(&it.OrderID, &it.CustomerID, &it.Status, &it.Currency, &total, &it.CreatedAt, &it.UpdatedAt); err != nil {
					return err
				}
				if total != nil {
					it.Total = &money.Money{Amount: *total, Currency: it.Currency}
				}
				it.CreatedAt, it.UpdatedAt = it.CreatedAt.UTC(), it.UpdatedAt.UTC()
				items = append(items, it)
			}
			return rows.Err()
		})
	})
	if err != nil {
		return nil, nil, fmt.Errorf("list orders: %w", err)
	}
	var next *readmodels.Cursor
	if len(items) > f.Limit {
		items = items[:f.Limit]
		last := items[len(items)-1]
		next = &readmodels.Cursor{At: last.CreatedAt, Key: last.OrderID}
	}
	return items, next, nil
}

// CustomerSummary returns a customer's counters. A customer without orders
// is not found. Errors: ErrCustomerNotFound.
func (r *Reader) CustomerSummary(ctx context.Context, customerID string) (CustomerSummary, error) {
	s := CustomerSummary{CustomerID: customerID, PaidTotal: []Sum{}}
	found := false
	err := r.db.InTenant(ctx, func(b *pgx.Batch) {
		b.Queue(`SELECT s.orders, s.open_orders, p.currency, p.amount::text
FROM customer_summaries s
LEFT JOIN customer_paid_totals p ON p.tenant_id = s.tenant_id AND p.customer_id = s.customer_id
WHERE s.tenant_id = $1 AND s.customer_id = $2
ORDER BY p.currency`, readmodels.TenantOf(ctx), customerID).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var currency, amount *string
				if err := rows.Scan(&s.Orders, &s.OpenOrders, &currency, &amount); err != nil {
					return err
				}
				found = true
				if currency != nil {
					n, err := parseSum(*amount)
					if err != nil {
						return err
					}
					s.PaidTotal = append(s.PaidTotal, Sum{n, *currency})
				}
			}
			return rows.Err()
		})
	})
	if err != nil {
		return CustomerSummary{}, fmt.Errorf("read customer summary: %w", err)
	}
	if !found {
		return CustomerSummary{}, ErrCustomerNotFound
	}
	return s, nil
}

// DailyRevenue returns the revenue of the UTC days from..to (inclusive),
// by day then currency; days without paid orders are left out.
func (r *Reader) DailyRevenue(ctx context.Context, from, to time.Time) ([]RevenueDay, error) {
	days := []RevenueDay{}
	err := r.db.InTenant(ctx, func(b *pgx.Batch) {
		b.Queue(`SELECT day, currency, amount::text, orders FROM daily_revenue
WHERE tenant_id = $1 AND day BETWEEN $2 AND $3
ORDER BY day, currency`, readmodels.TenantOf(ctx), dateOnly(from), dateOnly(to)).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var d RevenueDay
				var amount string
				if err := rows.Scan(&d.Day, &d.Currency, &amount, &d.Orders); err != nil {
					return err
				}
				n, err := parseSum(amount)
				if err != nil {
					return err
				}
				d.Amount = n
				d.Day = dateOnly(d.Day)
				days = append(days, d)
			}
			return rows.Err()
		})
	})
	if err != nil {
		return nil, fmt.Errorf("read daily revenue: %w", err)
	}
	return days, nil
}

// parseSum reads a numeric sum in its text form. The projections add only
// whole minor units, so anything but an integer is a corrupt row.
func parseSum(text string) (*big.Int, error) {
	n, ok := new(big.Int).SetString(text, 10)
	if !ok {
		return nil, fmt.Errorf("sum %q is not an integer amount", text)
	}
	return n, nil
}

func dateOnly(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
}
