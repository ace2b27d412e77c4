package fulfilquery_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/mux"

	"github.com/strata-es/strata/cli/openapi/openapitest"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/domain/money"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples/fulfilment"
	"github.com/strata-es/strata/examples/fulfilment/fulfilquery"
	"github.com/strata-es/strata/examples/fulfilment/fulfilview"
	"github.com/strata-es/strata/examples/inventory/stock"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/httpapi"
	"github.com/strata-es/strata/internal/pgtest"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/projections/projectiontest"
	"github.com/strata-es/strata/readmodels"
	"github.com/strata-es/strata/readmodels/queryapi"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var registry = event.NewRegistry(append(order.Codecs(), stock.Codecs()...)...)

func rec(t *testing.T, tenant, stream string, version int64, p event.Payload) projectiontest.Recorded {
	t.Helper()
	typ, v, data, err := registry.Encode(p)
	if err != nil {
		t.Fatal(err)
	}
	return projectiontest.Recorded{Tenant: tenant, Stream: stream, Version: version, Type: typ, SchemaVersion: v, Data: data}
}

// setup projects one paid, committed order of tenant t-a.
func setup(t *testing.T) *readmodels.DB {
	t.Helper()
	ctx := context.Background()
	d := testdb.New(t, fulfilview.Migrations)
	store := postgres.New(d.App, d.Projector)
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	eur := func(n int64) money.Money { return money.Money{Amount: n, Currency: "EUR"} }
	evs := []projectiontest.Recorded{
		rec(t, "t-a", "inventory-b", 1, stock.Received{SKU: "b", Quantity: 9, At: at}),
		rec(t, "t-a", "inventory-a", 1, stock.Received{SKU: "a", Quantity: 9, At: at}),
		rec(t, "t-a", "order-o-1", 1, order.Created{OrderID: "o-1", CustomerID: "c", Currency: "EUR", At: at}),
		rec(t, "t-a", "order-o-1", 2, order.LineAdded{OrderID: "o-1", ProductID: "b", Quantity: 2, UnitPrice: eur(100), At: at}),
		rec(t, "t-a", "order-o-1", 3, order.LineAdded{OrderID: "o-1", ProductID: "a", Quantity: 1, UnitPrice: eur(50), At: at}),
		rec(t, "t-a", "order-o-1", 4, order.Placed{OrderID: "o-1", Total: eur(250), At: at.Add(time.Minute)}),
		rec(t, "t-a", "inventory-b", 2, stock.Reserved{SKU: "b", ReservationID: "o-1", Quantity: 2, At: at.Add(time.Minute)}),
		rec(t, "t-a", "inventory-a", 2, stock.Reserved{SKU: "a", ReservationID: "o-1", Quantity: 1, At: at.Add(time.Minute)}),
		rec(t, "t-a", "order-o-1", 5, order.Paid{OrderID: "o-1", PaymentReference: "cap_1", Amount: eur(250), At: at.Add(2 * time.Minute)}),
		rec(t, "t-a", "inventory-b", 3, stock.Committed{SKU: "b", ReservationID: "o-1", Quantity: 2, At: at.Add(3 * time.Minute)}),
		rec(t, "t-a", "inventory-a", 3, stock.Committed{SKU: "a", ReservationID: "o-1", Quantity: 1, At: at.Add(3 * time.Minute)}),
	}
	head, err := projectiontest.Append(ctx, store, evs)
	if err != nil {
		t.Fatal(err)
	}
	r, err := projections.NewRunner(fulfilview.New(fulfilview.Tables{}), store, d.Projector, projections.RunnerConfig{Registry: registry})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.CatchUp(ctx, head); err != nil {
		t.Fatal(err)
	}
	return readmodels.NewDB(d.App)
}

func TestRoute(t *testing.T) {
	t.Parallel()
	rm := setup(t)
	routes := fulfilquery.Queries(rm)
	if len(routes) != 1 || routes[0].Path != "/v1/orders/{id}/fulfilment" || routes[0].Projections[0] != "order_fulfilment" {
		t.Fatalf("routes %+v", routes)
	}
	// Through the engine's query API, as serve mounts it (the tenant set
	// as the authentication middleware would set it).
	r := mux.NewRouter()
	queryapi.New(rm, nil, nil, queryapi.Config{}).Register(r, routes...)
	v, err := openapitest.For(fulfilment.Module())
	if err != nil {
		t.Fatal(err)
	}
	get := func(tenant domain.TenantID, id string) (int, string) {
		t.Helper()
		req := httptest.NewRequest("GET", "http://localhost/v1/orders/"+id+"/fulfilment", nil)
		w := httptest.NewRecorder()
		httpapi.WithRequestID(r).ServeHTTP(w, req.WithContext(domain.NewContext(req.Context(), tenant)))
		if err := v.Check(openapitest.Exchange{Request: req, BodySent: true, Status: w.Code, Header: w.Header(), Body: w.Body.Bytes()}); err != nil {
			t.Error(err)
		}
		return w.Code, strings.TrimSpace(w.Body.String())
	}
	code, got := get("t-a", "o-1")
	want := `{"order_id":"o-1","stage":"completed","order_status":"paid","lines":[{"product_id":"a","quantity":1},{"product_id":"b","quantity":2}],` +
		`"reserved":2,"released":0,"committed":2,"total":{"amount":250,"currency":"EUR"},"payment_reference":"cap_1","cancel_reason":null,` +
		`"version":5,"updated_at":"2026-03-01T12:03:00Z"}`
	if code != 200 || got != want {
		t.Errorf("t-a's o-1: %d\n%s\nwant\n%s", code, got, want)
	}
	// Another tenant's order answers 404, exactly as a missing one, in the
	// one error shape.
	_, missing := get("t-a", "o-2")
	for _, c := range []struct {
		tenant domain.TenantID
		id     string
	}{{"t-b", "o-1"}, {"t-a", "o-2"}} {
		code, body := get(c.tenant, c.id)
		if code != 404 || body != missing || !strings.Contains(body, `"code":"not_found"`) {
			t.Errorf("%s reading %s: %d %s, want 404 like a missing order (%s)", c.tenant, c.id, code, body, missing)
		}
	}
	if code, _ := get("t-a", "bad%20id"); code != 400 {
		t.Errorf("malformed ID: %d, want 400", code)
	}
	// No tenant: fails closed.
	if _, err := fulfilquery.NewReader(rm).Get(context.Background(), "o-1"); err == nil {
		t.Error("a read without a tenant succeeded")
	}
	if _, err := fulfilquery.NewReader(rm).Get(domain.NewContext(context.Background(), "t-b"), "o-1"); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("t-b reading t-a's order: %v, want not found", err)
	}
}
