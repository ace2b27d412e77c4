package commandapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/gorilla/mux"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"

	"github.com/strata-es/strata/commands"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/domain/order"
	"github.com/strata-es/strata/internal/httpapi"
)

// Executor runs commands; *commands.Handler implements it (decorators for
// tracing and metrics wrap it).
type Executor interface {
	Handle(ctx context.Context, cmd commands.Command, opts commands.Options) (commands.Result, error)
}

// API serves the command routes.
type API struct {
	exec Executor
}

// New returns the command API over exec.
func New(exec Executor) *API { return &API{exec: exec} }

// Register adds the routes to r, which must already authenticate.
func (a *API) Register(r *mux.Router) {
	r.HandleFunc("/v1/orders", a.createOrder).Methods(http.MethodPost).Name("order.create")
	r.HandleFunc("/v1/orders/{id}/lines", a.addLine).Methods(http.MethodPost).Name("order.add_line")
	r.HandleFunc("/v1/orders/{id}/lines/{product_id}", a.removeLine).Methods(http.MethodDelete).Name("order.remove_line")
	r.HandleFunc("/v1/orders/{id}/place", a.place).Methods(http.MethodPost).Name("order.place")
	r.HandleFunc("/v1/orders/{id}/pay", a.pay).Methods(http.MethodPost).Name("order.pay")
	r.HandleFunc("/v1/orders/{id}/cancel", a.cancel).Methods(http.MethodPost).Name("order.cancel")
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
	emptyRequest struct{}
)

// Response is the success body of every command.
type Response struct {
	OrderID string `json:"order_id"`
	Version int64  `json:"version"`
	// Position is an opaque consistency token: send it back as
	// X-Consistency-Token to read your own write.
	Position string `json:"position"`
}

func (a *API) createOrder(w http.ResponseWriter, r *http.Request) {
	var req createOrderRequest
	if err := httpapi.DecodeJSON(w, r, &req); err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	if req.OrderID == "" {
		// A generated ID; with an Idempotency-Key a retry replays the
		// stored response, so the client still learns one stable ID.
		req.OrderID = uuid.NewString()
	}
	if err := domain.ValidateEntityID("order_id", req.OrderID); err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	for _, missing := range []struct{ name, v string }{{"customer_id", req.CustomerID}, {"currency", req.Currency}} {
		if missing.v == "" {
			httpapi.WriteError(w, r, httpapi.Errorf(http.StatusBadRequest, httpapi.CodeInvalidRequest, missing.name+" is required"))
			return
		}
	}
	a.execute(w, r, commands.CreateOrder{OrderID: req.OrderID, CustomerID: req.CustomerID, Currency: req.Currency}, http.StatusCreated)
}

func (a *API) addLine(w http.ResponseWriter, r *http.Request) {
	id, ok := orderID(w, r)
	if !ok {
		return
	}
	var req addLineRequest
	if err := httpapi.DecodeJSON(w, r, &req); err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	switch {
	case req.ProductID == "":
		httpapi.WriteError(w, r, httpapi.Errorf(http.StatusBadRequest, httpapi.CodeInvalidRequest, "product_id is required"))
		return
	case req.UnitPrice == nil:
		httpapi.WriteError(w, r, httpapi.Errorf(http.StatusBadRequest, httpapi.CodeInvalidRequest, "unit_price is required"))
		return
	}
	a.execute(w, r, commands.AddLine{OrderID: id, ProductID: req.ProductID, Quantity: req.Quantity,
		UnitPrice: order.Money{Amount: req.UnitPrice.Amount, Currency: req.UnitPrice.Currency}}, http.StatusOK)
}

func (a *API) removeLine(w http.ResponseWriter, r *http.Request) {
	id, ok := orderID(w, r)
	if !ok {
		return
	}
	product, err := httpapi.PathVar(r, "product_id")
	if err == nil {
		err = domain.ValidateEntityID("product_id", product)
	}
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	if !optionalEmptyBody(w, r) {
		return
	}
	a.execute(w, r, commands.RemoveLine{OrderID: id, ProductID: product}, http.StatusOK)
}

func (a *API) place(w http.ResponseWriter, r *http.Request) {
	id, ok := orderID(w, r)
	if !ok || !optionalEmptyBody(w, r) {
		return
	}
	a.execute(w, r, commands.PlaceOrder{OrderID: id}, http.StatusOK)
}

func (a *API) pay(w http.ResponseWriter, r *http.Request) {
	id, ok := orderID(w, r)
	if !ok {
		return
	}
	var req payRequest
	if err := httpapi.DecodeJSON(w, r, &req); err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	a.execute(w, r, commands.PayOrder{OrderID: id, PaymentReference: req.PaymentReference}, http.StatusOK)
}

func (a *API) cancel(w http.ResponseWriter, r *http.Request) {
	id, ok := orderID(w, r)
	if !ok {
		return
	}
	var req cancelRequest
	if !decodeOptional(w, r, &req) {
		return
	}
	a.execute(w, r, commands.CancelOrder{OrderID: id, Reason: req.Reason}, http.StatusOK)
}

func orderID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id, err := httpapi.PathVar(r, "id")
	if err == nil {
		err = domain.ValidateEntityID("order id", id)
	}
	if err != nil {
		httpapi.WriteError(w, r, err)
		return "", false
	}
	return id, true
}

// optionalEmptyBody accepts no body or an empty JSON object.
func optionalEmptyBody(w http.ResponseWriter, r *http.Request) bool {
	return decodeOptional(w, r, &emptyRequest{})
}

// decodeOptional decodes a body that may be absent altogether.
func decodeOptional(w http.ResponseWriter, r *http.Request, dst any) bool {
	body, err := httpapi.ReadBody(w, r)
	if err == nil && len(bytes.TrimSpace(body)) > 0 {
		err = httpapi.DecodeStrict(body, dst)
	}
	if err != nil {
		httpapi.WriteError(w, r, err)
		return false
	}
	return true
}

var idempotencyKeyPattern = regexp.MustCompile(`^[\x21-\x7e]{1,255}$`)

// storedResponse is what an idempotency record holds: the exact status and
// body the first execution answered.
type storedResponse struct {
	Status int             `json:"status"`
	Body   json.RawMessage `json:"body"`
}

func (a *API) execute(w http.ResponseWriter, r *http.Request, cmd commands.Command, okStatus int) {
	opts := commands.Options{Metadata: metadata(r)}
	if v := r.Header.Get("If-Match"); v != "" {
		expected, err := parseIfMatch(v)
		if err != nil {
			httpapi.WriteError(w, r, err)
			return
		}
		opts.ExpectedVersion = &expected
	}
	if key := r.Header.Get("Idempotency-Key"); key != "" {
		if !idempotencyKeyPattern.MatchString(key) {
			httpapi.WriteError(w, r, httpapi.Errorf(http.StatusBadRequest, httpapi.CodeInvalidRequest,
				"Idempotency-Key must be 1 to 255 printable ASCII characters"))
			return
		}
		opts.Idempotency = &commands.Idempotency{
			Key:         key,
			RequestHash: requestHash(cmd, opts.ExpectedVersion),
			Respond: func(res commands.Result, err error) ([]byte, error) {
				status, body := render(res, err, okStatus)
				return json.Marshal(storedResponse{Status: status, Body: body})
			},
		}
	}
	res, err := a.exec.Handle(r.Context(), cmd, opts)
	switch {
	case errors.Is(err, commands.ErrIdempotencyKeyReused):
		httpapi.WriteError(w, r, httpapi.Errorf(http.StatusUnprocessableEntity, httpapi.CodeIdempotencyKeyReused,
			"this Idempotency-Key was already used with a different request"))
		return
	case err != nil:
		httpapi.WriteError(w, r, err)
		return
	case res.Replayed != nil:
		var stored storedResponse
		if err := json.Unmarshal(res.Replayed, &stored); err != nil {
			httpapi.WriteError(w, r, err)
			return
		}
		w.Header().Set("Idempotent-Replayed", "true")
		httpapi.WriteRaw(w, stored.Status, stored.Body)
		return
	}
	w.Header().Set("ETag", strconv.Quote(strconv.FormatInt(res.Version, 10)))
	if okStatus == http.StatusCreated {
		w.Header().Set("Location", "/v1/orders/"+res.OrderID)
	}
	status, body := render(res, nil, okStatus)
	httpapi.WriteRaw(w, status, body)
}

// render produces the status and body for an outcome, the same whether it
// is sent now or stored for replay.
func render(res commands.Result, err error, okStatus int) (int, []byte) {
	if err != nil {
		e := httpapi.Classify(err)
		return e.Status, httpapi.ErrorBody(e.Code, e.Message)
	}
	body, _ := json.Marshal(Response{OrderID: res.OrderID, Version: res.Version, Position: res.Position.Token()})
	return okStatus, body
}

// requestHash fingerprints a command: its name and canonical JSON (path
// parameters included, since they are fields of the command) and the
// If-Match precondition.
func requestHash(cmd commands.Command, expected *int64) string {
	body, _ := json.Marshal(cmd)
	h := sha256.New()
	h.Write([]byte(cmd.Name()))
	h.Write([]byte{0})
	h.Write(body)
	if expected != nil {
		h.Write([]byte{0})
		h.Write([]byte(strconv.FormatInt(*expected, 10)))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// parseIfMatch accepts "3" (quoted, as an ETag) or 3.
func parseIfMatch(v string) (int64, error) {
	v = strings.TrimSpace(v)
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || len(v) > 19 {
		return 0, httpapi.Errorf(http.StatusBadRequest, httpapi.CodeInvalidRequest, `If-Match must be an order version, e.g. "3"`)
	}
	return n, nil
}

var correlationPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// metadata collects what every event of this request carries: the actor,
// the correlation ID and the W3C trace context of the request's span.
func metadata(r *http.Request) event.Metadata {
	var m event.Metadata
	if c, ok := httpapi.ClaimsFrom(r.Context()); ok {
		m.Actor = c.Subject
	}
	if id := r.Header.Get("X-Correlation-ID"); correlationPattern.MatchString(id) {
		m.CorrelationID = id
	} else {
		m.CorrelationID = httpapi.RequestID(r.Context())
	}
	carrier := propagation.MapCarrier{}
	otel.GetTextMapPropagator().Inject(r.Context(), carrier)
	m.TraceParent = carrier["traceparent"]
	m.TraceState = carrier["tracestate"]
	return m
}
