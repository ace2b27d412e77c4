package orderquery

import (
	"context"
	"fmt"
	"math/big"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/money"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/orderview"
	"github.com/strata-es/strata/httpapi"
	"github.com/strata-es/strata/readmodels"
	"github.com/strata-es/strata/readmodels/queryapi"
)

// Route names (metrics and logs use them).
const (
	RouteOrder           = "query.order"
	RouteOrders          = "query.orders"
	RouteCustomerSummary = "query.customer_summary"
	RouteRevenueDaily    = "query.revenue_daily"
)

// Queries are the order query routes reading through d: the module's
// query side.
func Queries(d *readmodels.DB) []queryapi.Route { return Routes(NewReader(d)) }

// Routes are the order query routes over r.
func Routes(r *Reader) []queryapi.Route {
	return []queryapi.Route{
		{Name: RouteOrder, Path: "/v1/orders/{id}", Projections: []string{orderview.OrderDetailsName}, Prepare: r.order},
		{Name: RouteOrders, Path: "/v1/orders", Projections: []string{orderview.OrderListName},
			Params: []string{"status", "customer_id", "limit", "cursor"}, Prepare: r.orders},
		{Name: RouteCustomerSummary, Path: "/v1/customers/{id}/summary", Projections: []string{orderview.CustomerSummaryName}, Prepare: r.customerSummary},
		{Name: RouteRevenueDaily, Path: "/v1/revenue/daily", Projections: []string{orderview.DailyRevenueName},
			Params: []string{"from", "to"}, Prepare: r.dailyRevenue},
	}
}

// sumJSON renders a sum over orders. *big.Int marshals as a JSON integer
// with every digit, so the shape is the same as money.Money's and a sum that
// fits an int64 reads exactly as before; a larger one (possible: each order
// may reach the int64 maximum) stays exact in the JSON text instead of
// wrapping or turning into a string. Clients that read numbers into int64
// or float64 must decode it as an arbitrary-precision integer.
type sumJSON struct {
	Amount   *big.Int `json:"amount"`
	Currency string   `json:"currency"`
}

type lineJSON struct {
	ProductID string      `json:"product_id"`
	Quantity  int64       `json:"quantity"`
	UnitPrice money.Money `json:"unit_price"`
	LineTotal money.Money `json:"line_total"`
}

type orderJSON struct {
	OrderID     string      `json:"order_id"`
	CustomerID  string      `json:"customer_id"`
	Status      string      `json:"status"`
	Currency    string      `json:"currency"`
	Lines       []lineJSON  `json:"lines"`
	Total       money.Money `json:"total"`
	Version     int64       `json:"version"`
	CreatedAt   time.Time   `json:"created_at"`
	PlacedAt    *time.Time  `json:"placed_at"`
	PaidAt      *time.Time  `json:"paid_at"`
	CancelledAt *time.Time  `json:"cancelled_at"`
}

func (m *Reader) order(r *http.Request, _ url.Values) (queryapi.Read, error) {
	id, err := httpapi.PathID(r, "id", "order id")
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) (any, error) {
		o, err := m.Order(ctx, id)
		if err != nil {
			return nil, err
		}
		out := orderJSON{OrderID: o.OrderID, CustomerID: o.CustomerID, Status: o.Status, Currency: o.Currency,
			Lines: make([]lineJSON, 0, len(o.Lines)), Total: o.Total, Version: o.Version,
			CreatedAt: o.CreatedAt, PlacedAt: o.PlacedAt, PaidAt: o.PaidAt, CancelledAt: o.CancelledAt}
		for _, l := range o.Lines {
			out.Lines = append(out.Lines, lineJSON{ProductID: l.ProductID, Quantity: l.Quantity, UnitPrice: l.UnitPrice, LineTotal: l.LineTotal})
		}
		return out, nil
	}, nil
}

type orderItemJSON struct {
	OrderID    string       `json:"order_id"`
	CustomerID string       `json:"customer_id"`
	Status     string       `json:"status"`
	Currency   string       `json:"currency"`
	Total      *money.Money `json:"total"`
	CreatedAt  time.Time    `json:"created_at"`
	UpdatedAt  time.Time    `json:"updated_at"`
}

type orderListJSON struct {
	Items      []orderItemJSON `json:"items"`
	NextCursor *string         `json:"next_cursor"`
}

// DefaultLimit is the page size of GET /v1/orders without ?limit=.
const DefaultLimit = 50

var statuses = []string{string(order.StatusDraft), string(order.StatusPlaced), string(order.StatusPaid), string(order.StatusCancelled)}

func (m *Reader) orders(_ *http.Request, q url.Values) (queryapi.Read, error) {
	f := OrderFilter{Status: q.Get("status"), CustomerID: q.Get("customer_id"), Limit: DefaultLimit}
	if f.Status != "" && !slices.Contains(statuses, f.Status) {
		return nil, queryapi.BadRequest("status must be one of draft, placed, paid, cancelled")
	}
	if f.CustomerID != "" {
		if err := domain.ValidateEntityID("customer_id", f.CustomerID); err != nil {
			return nil, err
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxLimit {
			return nil, queryapi.BadRequest(fmt.Sprintf("limit must be an integer from 1 to %d", MaxLimit))
		}
		f.Limit = n
	}
	if v := q.Get("cursor"); v != "" {
		c, err := readmodels.ParseCursor(v)
		if err != nil {
			return nil, queryapi.BadRequest("cursor must be a next_cursor returned by this route")
		}
		f.After = &c
	}
	return func(ctx context.Context) (any, error) {
		items, next, err := m.ListOrders(ctx, f)
		if err != nil {
			return nil, err
		}
		out := orderListJSON{Items: make([]orderItemJSON, 0, len(items))}
		for _, it := range items {
			j := orderItemJSON{OrderID: it.OrderID, CustomerID: it.CustomerID, Status: it.Status, Currency: it.Currency,
				CreatedAt: it.CreatedAt, UpdatedAt: it.UpdatedAt}
			if it.Total != nil {
				j.Total = it.Total
			}
			out.Items = append(out.Items, j)
		}
		if next != nil {
			s := next.Encode()
			out.NextCursor = &s
		}
		return out, nil
	}, nil
}

type customerSummaryJSON struct {
	CustomerID string    `json:"customer_id"`
	Orders     int64     `json:"orders"`
	OpenOrders int64     `json:"open_orders"`
	PaidTotal  []sumJSON `json:"paid_total"`
}

func (m *Reader) customerSummary(r *http.Request, _ url.Values) (queryapi.Read, error) {
	id, err := httpapi.PathID(r, "id", "customer id")
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) (any, error) {
		s, err := m.CustomerSummary(ctx, id)
		if err != nil {
			return nil, err
		}
		out := customerSummaryJSON{CustomerID: s.CustomerID, Orders: s.Orders, OpenOrders: s.OpenOrders, PaidTotal: make([]sumJSON, 0, len(s.PaidTotal))}
		for _, m := range s.PaidTotal {
			out.PaidTotal = append(out.PaidTotal, sumJSON{m.Amount, m.Currency})
		}
		return out, nil
	}, nil
}

type revenueDayJSON struct {
	Date     string   `json:"date"`
	Currency string   `json:"currency"`
	Amount   *big.Int `json:"amount"` // a sum over orders: see sumJSON
	Orders   int64    `json:"orders"`
}

type revenueJSON struct {
	Days []revenueDayJSON `json:"days"`
}

// MaxRevenueDays is the longest range of GET /v1/revenue/daily, inclusive.
const MaxRevenueDays = 366

var datePattern = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}$`)

func parseDate(name, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, queryapi.BadRequest(name + " is required (YYYY-MM-DD)")
	}
	t, err := time.Parse(time.DateOnly, v)
	if !datePattern.MatchString(v) || err != nil {
		return time.Time{}, queryapi.BadRequest(name + " must be a date YYYY-MM-DD")
	}
	return t, nil
}

func (m *Reader) dailyRevenue(_ *http.Request, q url.Values) (queryapi.Read, error) {
	from, err := parseDate("from", q.Get("from"))
	if err != nil {
		return nil, err
	}
	to, err := parseDate("to", q.Get("to"))
	if err != nil {
		return nil, err
	}
	switch {
	case to.Before(from):
		return nil, queryapi.BadRequest("from must not be after to")
	case to.Sub(from) >= MaxRevenueDays*24*time.Hour:
		return nil, queryapi.BadRequest(fmt.Sprintf("the range from..to may span at most %d days", MaxRevenueDays))
	}
	return func(ctx context.Context) (any, error) {
		days, err := m.DailyRevenue(ctx, from, to)
		if err != nil {
			return nil, err
		}
		out := revenueJSON{Days: make([]revenueDayJSON, 0, len(days))}
		for _, d := range days {
			out.Days = append(out.Days, revenueDayJSON{Date: d.Day.Format(time.DateOnly), Currency: d.Currency, Amount: d.Amount, Orders: d.Orders})
		}
		return out, nil
	}, nil
}
