package fulfilquery

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/strata-es/strata/domain/money"
	"github.com/strata-es/strata/examples/fulfilment/fulfilview"
	"github.com/strata-es/strata/httpapi"
	"github.com/strata-es/strata/readmodels"
	"github.com/strata-es/strata/readmodels/queryapi"
)

// RouteFulfilment names the route in metrics and logs.
const RouteFulfilment = "query.order_fulfilment"

// Queries are the fulfilment query routes reading through d.
func Queries(d *readmodels.DB) []queryapi.Route {
	r := NewReader(d)
	return []queryapi.Route{
		{Name: RouteFulfilment, Path: "/v1/orders/{id}/fulfilment", Projections: []string{fulfilview.Name}, Prepare: r.fulfilment},
	}
}

type lineJSON struct {
	ProductID string `json:"product_id"`
	Quantity  int64  `json:"quantity"`
}

// fulfilmentJSON is the route's body (the OpenAPI schema beside the route
// in cli/openapi/openapi.json).
type fulfilmentJSON struct {
	OrderID          string       `json:"order_id"`
	Stage            string       `json:"stage"`
	OrderStatus      string       `json:"order_status"`
	Lines            []lineJSON   `json:"lines"`
	Reserved         int          `json:"reserved"`
	Released         int          `json:"released"`
	Committed        int          `json:"committed"`
	Total            *money.Money `json:"total"`
	PaymentReference *string      `json:"payment_reference"`
	CancelReason     *string      `json:"cancel_reason"`
	Version          int64        `json:"version"`
	UpdatedAt        time.Time    `json:"updated_at"`
}

func out(f Fulfilment) fulfilmentJSON {
	o := fulfilmentJSON{OrderID: f.OrderID, Stage: f.Stage, OrderStatus: f.OrderStatus, Lines: make([]lineJSON, 0, len(f.Lines)),
		Reserved: f.Reserved, Released: f.Released, Committed: f.Committed, PaymentReference: f.PaymentReference,
		CancelReason: f.CancelReason, Version: f.Version, UpdatedAt: f.UpdatedAt}
	for _, l := range f.Lines {
		o.Lines = append(o.Lines, lineJSON{ProductID: l.ProductID, Quantity: l.Quantity})
	}
	if f.TotalAmount != nil {
		o.Total = &money.Money{Amount: *f.TotalAmount, Currency: f.Currency}
	}
	return o
}

func (m *Reader) fulfilment(r *http.Request, _ url.Values) (queryapi.Read, error) {
	id, err := httpapi.PathID(r, "id", "order id")
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) (any, error) {
		f, err := m.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		return out(f), nil
	}, nil
}
