package stockquery

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/strata-es/strata/examples/inventory/stockview"
	"github.com/strata-es/strata/httpapi"
	"github.com/strata-es/strata/readmodels"
	"github.com/strata-es/strata/readmodels/queryapi"
)

// Route names (metrics and logs use them).
const (
	RouteItem  = "query.inventory_item"
	RouteItems = "query.inventory_items"
)

// DefaultLimit is the page size of GET /v1/inventory without ?limit=.
const DefaultLimit = 50

// Queries are the inventory query routes reading through d: the module's
// query side.
func Queries(d *readmodels.DB) []queryapi.Route {
	r := NewReader(d)
	behind := []string{stockview.ItemsName}
	return []queryapi.Route{
		{Name: RouteItem, Path: "/v1/inventory/{sku}", Projections: behind, Prepare: r.item},
		{Name: RouteItems, Path: "/v1/inventory", Projections: behind, Params: []string{"limit", "cursor"}, Prepare: r.items},
	}
}

type itemJSON struct {
	SKU       string `json:"sku"`
	OnHand    int64  `json:"on_hand"`
	Reserved  int64  `json:"reserved"`
	Available int64  `json:"available"`
	Version   int64  `json:"version"`
}

func itemOut(it Item) itemJSON {
	return itemJSON{SKU: it.SKU, OnHand: it.OnHand, Reserved: it.Reserved, Available: it.Available, Version: it.Version}
}

type itemsJSON struct {
	Items      []itemJSON `json:"items"`
	NextCursor *string    `json:"next_cursor"`
}

func (m *Reader) item(r *http.Request, _ url.Values) (queryapi.Read, error) {
	sku, err := httpapi.PathID(r, "sku", "sku")
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) (any, error) {
		it, err := m.Item(ctx, sku)
		if err != nil {
			return nil, err
		}
		return itemOut(it), nil
	}, nil
}

func (m *Reader) items(_ *http.Request, q url.Values) (queryapi.Read, error) {
	limit := DefaultLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxLimit {
			return nil, queryapi.BadRequest(fmt.Sprintf("limit must be an integer from 1 to %d", MaxLimit))
		}
		limit = n
	}
	after := ""
	if v := q.Get("cursor"); v != "" {
		c, err := readmodels.ParseCursor(v)
		if err != nil || !c.At.IsZero() {
			return nil, queryapi.BadRequest("cursor must be a next_cursor returned by this route")
		}
		after = c.Key
	}
	return func(ctx context.Context) (any, error) {
		items, next, err := m.List(ctx, after, limit)
		if err != nil {
			return nil, err
		}
		out := itemsJSON{Items: make([]itemJSON, 0, len(items))}
		for _, it := range items {
			out.Items = append(out.Items, itemOut(it))
		}
		if next != "" {
			s := readmodels.Cursor{Key: next}.Encode()
			out.NextCursor = &s
		}
		return out, nil
	}, nil
}
