package commandapi

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/gorilla/mux"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"

	"github.com/strata-es/strata/commands"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/httpapi"
)

// Resource is how one aggregate type appears in the command API.
type Resource struct {
	// IDField names the aggregate's ID in the success body ("order_id",
	// "sku"): {"<IDField>": id, "version": n, "position": token}.
	IDField string
	// Location returns the URL path of a created aggregate, sent with a 201
	// answer; nil sends none.
	Location func(id string) string

	token func(event.Position) string // the consistency token of a position (Mount: Deps' placement)
}

// Route is one command route: where it is, what it answers on success, and
// how a request becomes the command it asks for.
type Route[A any] struct {
	// Name is the route's stable name in metrics and logs ("order.place").
	Name   string
	Method string
	// Path is a gorilla/mux template ("/v1/orders/{id}/place").
	Path string
	// Status is the success status: 200, or 201 for a route creating its
	// aggregate (default 200).
	Status int
	// Command parses the request (path variables with httpapi.PathID, the body with
	// DecodeBody, DecodeOptional or EmptyBody) into the command. Its error
	// is answered as httpapi classifies it (an *httpapi.Error, or a domain
	// kind: ErrInvalid is 400).
	Command func(w http.ResponseWriter, r *http.Request) (commands.Command[A], error)
}

// Deps is what the engine gives a module to mount its command routes.
type Deps struct {
	Store       eventstore.Store
	Idempotency eventstore.IdempotencyStore // nil: Idempotency-Key requests fail
	// Config is every handler's configuration: the process's registry,
	// the telemetry middleware, the clock.
	Config commands.Config
	// Placement and Epoch qualify the consistency tokens of the answers
	// (event.PlacedToken) when the store is a placement's other than the
	// shared database's ("": plain tokens).
	Placement string
	Epoch     int64
}

// Mount builds the handler for the aggregate agg and registers its routes
// on r (which must already authenticate): the one call a module's write
// side makes per aggregate type.
func Mount[A any](r *mux.Router, d Deps, agg commands.Aggregate[A], res Resource, routes ...Route[A]) error {
	if d.Placement != "" {
		res.token = func(p event.Position) string { return event.PlacedToken(d.Placement, d.Epoch, p) }
	}
	h, err := commands.NewHandler(agg, d.Store, d.Idempotency, d.Config)
	if err != nil {
		return fmt.Errorf("mount %s commands: %w", agg.Kind, err)
	}
	Register(r, h, res, routes...)
	return nil
}

// Register adds routes to r, which must already authenticate, each
// executing its command through exec with the API's If-Match,
// Idempotency-Key and answer semantics.
func Register[A any](r *mux.Router, exec commands.Executor[A], res Resource, routes ...Route[A]) {
	for _, rt := range routes {
		handle(r, rt.Name, rt.Method, rt.Path, rt.Status, rt.Command, exec.Handle, res)
	}
}

// handle registers one command route: parse the request into its command,
// then execute it with the API's semantics, answering status (default
// 200) on success.
func handle[C commands.Named](r *mux.Router, name, method, path string, status int, parse func(http.ResponseWriter, *http.Request) (C, error), exec func(context.Context, C, commands.Options) (commands.Result, error), res Resource) {
	status = cmp.Or(status, http.StatusOK)
	r.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
		cmd, err := parse(w, r)
		if err != nil {
			httpapi.WriteError(w, r, err)
			return
		}
		execute(w, r, exec, res, cmd, status)
	}).Methods(method).Name(name)
}

// SpanRoute is a route whose command spans several aggregates
// (commands.SpanningCommand): Route's fields, for a Spanner.
type SpanRoute struct {
	Name, Method, Path string
	Status             int
	Command            func(w http.ResponseWriter, r *http.Request) (commands.SpanningCommand, error)
}

// MountSpanning builds a Spanner over d's store and registers its routes
// on r (which must already authenticate), with the API's Idempotency-Key
// and answer semantics; the answer names the command's Target with
// res.IDField; If-Match names the Target's version.
func MountSpanning(r *mux.Router, d Deps, res Resource, routes ...SpanRoute) error {
	if d.Placement != "" {
		res.token = func(p event.Position) string { return event.PlacedToken(d.Placement, d.Epoch, p) }
	}
	sp, err := commands.NewSpanner(d.Store, d.Idempotency, d.Config)
	if err != nil {
		return fmt.Errorf("mount spanning commands: %w", err)
	}
	for _, rt := range routes {
		handle(r, rt.Name, rt.Method, rt.Path, rt.Status, rt.Command, sp.Handle, res)
	}
	return nil
}

// DecodeBody decodes the request's JSON body strictly into dst.
func DecodeBody(w http.ResponseWriter, r *http.Request, dst any) error {
	return httpapi.DecodeJSON(w, r, dst)
}

// Required returns a 400 naming the first field whose value is empty, or
// nil. Pairs are field name, value.
func Required(pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] == "" {
			return httpapi.Errorf(http.StatusBadRequest, httpapi.CodeInvalidRequest, pairs[i]+" is required")
		}
	}
	return nil
}

// EmptyBody accepts no body or an empty JSON object.
func EmptyBody(w http.ResponseWriter, r *http.Request) error {
	return DecodeOptional(w, r, &struct{}{})
}

// DecodeOptional decodes a body that may be absent altogether.
func DecodeOptional(w http.ResponseWriter, r *http.Request, dst any) error {
	body, err := httpapi.ReadBody(w, r)
	if err == nil && len(bytes.TrimSpace(body)) > 0 {
		err = httpapi.DecodeStrict(body, dst)
	}
	return err
}

var idempotencyKeyPattern = regexp.MustCompile(`^[\x21-\x7e]{1,255}$`)

// storedResponse is what an idempotency record holds: the exact status and
// body the first execution answered.
type storedResponse struct {
	Status int             `json:"status"`
	Body   json.RawMessage `json:"body"`
}

func execute[C commands.Named](w http.ResponseWriter, r *http.Request, handle func(context.Context, C, commands.Options) (commands.Result, error), rs Resource, cmd C, okStatus int) {
	if id := r.Header.Get("X-Correlation-ID"); id != "" && !correlationPattern.MatchString(id) {
		// Refused, not replaced by the request ID: the client would believe
		// its correlation ID is in the events' metadata.
		httpapi.WriteError(w, r, httpapi.Errorf(http.StatusBadRequest, httpapi.CodeInvalidRequest,
			"X-Correlation-ID must be 1 to 128 of A-Z a-z 0-9 . _ : -"))
		return
	}
	opts := commands.Options{Metadata: metadata(r)}
	if v := r.Header.Get("If-Match"); v != "" {
		expected, err := ParseIfMatch(v)
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
		if commands.IsEngineKey(key) {
			httpapi.WriteError(w, r, httpapi.Errorf(http.StatusBadRequest, httpapi.CodeInvalidRequest,
				"Idempotency-Key must not start with \""+commands.EngineKeyPrefix+"\": that namespace is reserved for the engine's process steps"))
			return
		}
		opts.Idempotency = &commands.Idempotency{
			Key:         key,
			RequestHash: requestHash(cmd, opts.ExpectedVersion),
			Respond: func(res commands.Result, err error) ([]byte, error) {
				status, body := render(rs, res, err, okStatus)
				return json.Marshal(storedResponse{Status: status, Body: body})
			},
		}
	}
	res, err := handle(r.Context(), cmd, opts)
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
	if okStatus == http.StatusCreated && rs.Location != nil {
		w.Header().Set("Location", rs.Location(res.ID))
	}
	status, body := render(rs, res, nil, okStatus)
	httpapi.WriteRaw(w, status, body)
}

// render produces the status and body for an outcome, the same whether it
// is sent now or stored for replay.
func render(rs Resource, res commands.Result, err error, okStatus int) (int, []byte) {
	if err != nil {
		e := httpapi.Classify(err)
		return e.Status, httpapi.ErrorBody(e.Code, e.Message)
	}
	return okStatus, successBody(rs, res)
}

// successBody is {"<idField>": id, "version": n, "position": token}, in that
// order (the documented shape; a map would sort the keys).
func successBody(rs Resource, res commands.Result) []byte {
	b := []byte{'{'}
	b, _ = appendJSON(b, rs.IDField)
	b = append(b, ':')
	b, _ = appendJSON(b, res.ID)
	b = append(b, `,"version":`...)
	b = strconv.AppendInt(b, res.Version, 10)
	b = append(b, `,"position":`...)
	token := res.Position.Token()
	if rs.token != nil {
		token = rs.token(res.Position)
	}
	b, _ = appendJSON(b, token)
	return append(b, '}')
}

func appendJSON(b []byte, s string) ([]byte, error) {
	q, err := json.Marshal(s)
	return append(b, q...), err
}

// requestHash fingerprints a command: its name and canonical JSON (path
// parameters included, since they are fields of the command) and the
// If-Match precondition.
func requestHash(cmd commands.Named, expected *int64) string {
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

// ParseIfMatch accepts "3" (quoted, as an ETag) or 3.
func ParseIfMatch(v string) (int64, error) {
	v = strings.TrimSpace(v)
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || len(v) > 19 {
		return 0, httpapi.Errorf(http.StatusBadRequest, httpapi.CodeInvalidRequest, `If-Match must be a version, e.g. "3"`)
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
	if id := r.Header.Get("X-Correlation-ID"); id != "" {
		m.CorrelationID = id // well-formed: execute refused it otherwise
	} else {
		m.CorrelationID = httpapi.RequestID(r.Context())
	}
	carrier := propagation.MapCarrier{}
	otel.GetTextMapPropagator().Inject(r.Context(), carrier)
	m.TraceParent = carrier["traceparent"]
	m.TraceState = carrier["tracestate"]
	return m
}
