package ordercmd

import (
	"fmt"
	"net/http"

	"github.com/google/uuid"
	"github.com/gorilla/mux"

	"github.com/strata-es/strata/commands/commandapi"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/money"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/httpapi"
)

// Resource is how orders appear in the command API.
var Resource = commandapi.Resource{
	IDField:  "order_id",
	Location: func(id string) string { return "/v1/orders/" + id },
}

// Request bodies. Field names are the API contract.
type (
	createOrderRequest struct {
		OrderID    string `json:"order_id"`
		CustomerID string `json:"customer_id"`
		Currency   string `json:"currency"`
	}
	moneyJSON struct {
		Amount   int64  `json:"amount"`
		Currency string `json:"currency"`
	}
	addLineRequest struct {
		ProductID string     `json:"product_id"`
		Quantity  int64      `json:"quantity"`
		UnitPrice *moneyJSON `json:"unit_price"`
	}
	payRequest struct {
		PaymentReference string `json:"payment_reference"`
	}
	cancelRequest struct {
		Reason string `json:"reason"`
	}
)

// Routes are the order command routes.
func Routes() []commandapi.Route[*order.Order] {
	return []commandapi.Route[*order.Order]{
		{Name: "order.create", Method: http.MethodPost, Path: "/v1/orders", Status: http.StatusCreated, Command: createOrder},
		{Name: "order.add_line", Method: http.MethodPost, Path: "/v1/orders/{id}/lines", Command: addLine},
		{Name: "order.remove_line", Method: http.MethodDelete, Path: "/v1/orders/{id}/lines/{product_id}", Command: removeLine},
		{Name: "order.place", Method: http.MethodPost, Path: "/v1/orders/{id}/place", Command: place},
		{Name: "order.pay", Method: http.MethodPost, Path: "/v1/orders/{id}/pay", Command: pay},
		{Name: "order.cancel", Method: http.MethodPost, Path: "/v1/orders/{id}/cancel", Command: cancel},
	}
}

// Commands mounts the order command routes on r (which must
// authenticate): the module's write side.
func Commands(r *mux.Router, d commandapi.Deps) error {
	return commandapi.Mount(r, d, Aggregate, Resource, Routes()...)
}

func orderID(r *http.Request) (string, error) { return httpapi.PathID(r, "id", "order id") }

func createOrder(w http.ResponseWriter, r *http.Request) (Command, error) {
	var req createOrderRequest
	if err := commandapi.DecodeBody(w, r, &req); err != nil {
		return nil, err
	}
	if req.OrderID == "" {
		// A generated ID; with an Idempotency-Key a retry replays the
		// stored response, so the client still learns one stable ID.
		req.OrderID = uuid.NewString()
	}
	if err := domain.ValidateEntityID("order_id", req.OrderID); err != nil {
		return nil, err
	}
	if err := commandapi.Required("customer_id", req.CustomerID, "currency", req.Currency); err != nil {
		return nil, err
	}
	return CreateOrder{OrderID: req.OrderID, CustomerID: req.CustomerID, Currency: req.Currency}, nil
}

func addLine(w http.ResponseWriter, r *http.Request) (Command, error) {
	id, err := orderID(r)
	if err != nil {
		return nil, err
	}
	var req addLineRequest
	if err := commandapi.DecodeBody(w, r, &req); err != nil {
		return nil, err
	}
	if err := commandapi.Required("product_id", req.ProductID); err != nil {
		return nil, err
	}
	if req.UnitPrice == nil {
		return nil, commandapi.Required("unit_price", "")
	}
	if req.Quantity < order.MinQuantity || req.Quantity > order.MaxQuantity {
		// Malformed input, as the document's AddLine says (minimum and
		// maximum) and as inventory's receive answers: 400. The
		// aggregate's ErrQuantityOutOfRange (422) stays the rule for a
		// line whose repeated adds sum beyond the maximum.
		return nil, httpapi.Errorf(http.StatusBadRequest, httpapi.CodeInvalidRequest,
			fmt.Sprintf("quantity must be between %d and %d", order.MinQuantity, order.MaxQuantity))
	}
	return AddLine{OrderID: id, ProductID: req.ProductID, Quantity: req.Quantity,
		UnitPrice: money.Money{Amount: req.UnitPrice.Amount, Currency: req.UnitPrice.Currency}}, nil
}

func removeLine(w http.ResponseWriter, r *http.Request) (Command, error) {
	id, err := orderID(r)
	if err != nil {
		return nil, err
	}
	product, err := httpapi.PathID(r, "product_id", "product_id")
	if err != nil {
		return nil, err
	}
	if err := commandapi.EmptyBody(w, r); err != nil {
		return nil, err
	}
	return RemoveLine{OrderID: id, ProductID: product}, nil
}

func place(w http.ResponseWriter, r *http.Request) (Command, error) {
	id, err := orderID(r)
	if err != nil {
		return nil, err
	}
	if err := commandapi.EmptyBody(w, r); err != nil {
		return nil, err
	}
	return PlaceOrder{OrderID: id}, nil
}

func pay(w http.ResponseWriter, r *http.Request) (Command, error) {
	id, err := orderID(r)
	if err != nil {
		return nil, err
	}
	var req payRequest
	if err := commandapi.DecodeBody(w, r, &req); err != nil {
		return nil, err
	}
	return PayOrder{OrderID: id, PaymentReference: req.PaymentReference}, nil
}

func cancel(w http.ResponseWriter, r *http.Request) (Command, error) {
	id, err := orderID(r)
	if err != nil {
		return nil, err
	}
	var req cancelRequest
	if err := commandapi.DecodeOptional(w, r, &req); err != nil {
		return nil, err
	}
	return CancelOrder{OrderID: id, Reason: req.Reason}, nil
}
