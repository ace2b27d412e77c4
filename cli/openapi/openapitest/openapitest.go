// Package openapitest holds an application's HTTP traffic to its OpenAPI
// document (package cli/openapi: the engine's merged with the modules'
// fragments), both ways, with kin-openapi's openapi3filter:
//
//   - every response: its status must be one the operation documents, the
//     headers it marks required must be there and match, and the body must
//     match the schema of that status;
//   - every request: what the document refuses, the server must refuse as
//     malformed (a request the document refuses that gets a 2xx, 3xx or a
//     business rule's 422 fails), and what
//     the document allows, the server must not refuse as malformed (a 400
//     invalid_request to a request the document allows fails, unless its
//     message is one of the few refusals a schema cannot say: Beyond).
//
// A test sends its requests through Client or Transport, so that a handler
// drifting from the document (a renamed field, a new status, another error
// shape, a looser or stricter check) fails the build, not a client. A
// module in its own repository gets the same check of its routes with
// For(itsModule) and cli/servetest.
package openapitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/strata-es/strata/cli/openapi"
	"github.com/strata-es/strata/module"
)

// Validator checks exchanges against one document.
type Validator struct {
	doc    *openapi3.T
	router routers.Router
}

// New returns a Validator of doc.
func New(doc []byte) (*Validator, error) {
	t, err := openapi.Load(context.Background(), doc)
	if err != nil {
		return nil, err
	}
	// The document's servers name the default address; the servers of
	// tests listen anywhere, so the routes match whatever the host.
	t.Servers = nil
	r, err := gorillamux.NewRouter(t)
	if err != nil {
		return nil, fmt.Errorf("route the OpenAPI document: %w", err)
	}
	return &Validator{doc: t, router: r}, nil
}

var cache sync.Map // module names -> func() (*Validator, error)

// For returns the Validator of the document an application made of mods
// serves (openapi.Document), built once per test binary and module list.
func For(mods ...module.Module) (*Validator, error) {
	names := make([]string, len(mods))
	for i, m := range mods {
		names[i] = m.Name
	}
	load, _ := cache.LoadOrStore(strings.Join(names, ","), sync.OnceValues(func() (*Validator, error) {
		doc, err := openapi.Document(module.Set(mods))
		if err != nil {
			return nil, err
		}
		return New(doc)
	}))
	return load.(func() (*Validator, error))()
}

// Exchange is one request and the answer to it.
type Exchange struct {
	Request *http.Request
	// RequestBody is the body as sent; BodySent says whether it was sent
	// whole (a body the server answered before reading to its end is not
	// checked).
	RequestBody []byte
	BodySent    bool
	Status      int
	Header      http.Header
	Body        []byte
}

// missResponses are the answers to a request no operation takes: the
// router's own (httpapi.NotFound and the 405 of a method this process does
// not serve on the path), the refusal of a path that is not in canonical
// form, and the server's answers before any handler. Each must have its
// response component's shape.
var missResponses = map[int]string{
	http.StatusBadRequest:                  "BadRequest",
	http.StatusNotFound:                    "NotFound",
	http.StatusMethodNotAllowed:            "MethodNotAllowed",
	http.StatusRequestHeaderFieldsTooLarge: "HeadersTooLarge",
	http.StatusNotImplemented:              "NotImplemented",
	http.StatusHTTPVersionNotSupported:     "VersionNotSupported",
}

// Beyond lists the server's 400 invalid_request refusals that no schema
// can say, by the start of their message: a request the document allows
// may get them.
var Beyond = []string{
	"send one Authorization header", // a header given twice
	"duplicate field",               // a JSON object with a key twice
	// A filter naming a projection the application does not have: the
	// names are the modules', not the engine document's.
	"invalid request: unknown projection",
	// OpenAPI cannot say "no other parameter"; the server refuses one.
	"unknown query parameter",
	// An opaque cursor that did not come from the route.
	"cursor must be a next_cursor",
	// A duration's bounds (above 0, at most STRATA's maximum wait): the
	// pattern says it is a duration, no schema compares durations.
	"wait must be a duration",
	"stuck must be a positive duration",
	// The consistency token is opaque, and one beyond the log's head is
	// known only to the server.
	"X-Consistency-Token must be the position returned by a command",
	"X-Consistency-Token is beyond the newest event",
	// A header or parameter given twice; a query string that is not one.
	"X-Consistency-Token is given more than once",
	`query parameter "`,
	"the query string is malformed",
	// Rules between two parameters.
	"the range from..to may span at most",
	"from must not be after to",
}

// Check validates one exchange: the answer always, the request as the
// package says.
func (v *Validator) Check(x Exchange) error {
	req := x.Request
	route, vars, err := v.router.FindRoute(req)
	if err != nil {
		if !errors.Is(err, routers.ErrPathNotFound) && !errors.Is(err, routers.ErrMethodNotAllowed) {
			return fmt.Errorf("%s %s: find the route: %w", req.Method, req.URL.Path, err)
		}
		// Not in the document: only the answers to a miss may answer it.
		// A success here is a route the document does not describe.
		name, ok := missResponses[x.Status]
		if !ok {
			return fmt.Errorf("%s %s answered %d, but the document has no such operation (%v)", req.Method, req.URL.Path, x.Status, err)
		}
		return v.checkAs(req, name, x.Status, x.Header, x.Body)
	}
	// The server matches the escaped path and decodes each variable once
	// (httpapi.PathVar); the router here hands them over escaped.
	for k, val := range vars {
		if d, err := url.PathUnescape(val); err == nil {
			vars[k] = d
		}
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: vars, Route: route},
		Status:                 x.Status,
		Header:                 x.Header,
		Options:                options(),
	}
	in.SetBodyBytes(x.Body)
	var errs []error
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		errs = append(errs, fmt.Errorf("%s %s (operation %s) answered %d %s: %w", req.Method, req.URL.Path, route.Operation.OperationID, x.Status, clip(x.Body), err))
	}
	if err := v.checkRequest(route, vars, x); err != nil {
		errs = append(errs, fmt.Errorf("%s %s (operation %s) answered %d %s: %w", req.Method, req.URL.Path, route.Operation.OperationID, x.Status, clip(x.Body), err))
	}
	return errors.Join(errs...)
}

// checkRequest holds the request and the server's verdict on it to the
// document's.
func (v *Validator) checkRequest(route *routers.Route, vars map[string]string, x Exchange) error {
	if !x.BodySent {
		return nil
	}
	refused := RequestError(route, vars, x.Request, x.RequestBody)
	switch {
	case refused != nil && x.Status < 400:
		return fmt.Errorf("the server accepted a request the document refuses: %w", refused)
	case refused != nil && x.Status == http.StatusUnprocessableEntity:
		// The same mistake must get the same answer: input the document
		// refuses is malformed (400), not a business rule's 422.
		return fmt.Errorf("the server answered 422 to a request the document refuses as malformed (answer 400): %w", refused)
	case refused == nil && x.Status == http.StatusBadRequest:
		var e struct {
			Error struct{ Code, Message string }
		}
		if json.Unmarshal(x.Body, &e) != nil || e.Error.Code != "invalid_request" {
			return nil // the response check reports a malformed refusal
		}
		for _, b := range Beyond {
			if strings.HasPrefix(e.Error.Message, b) {
				return nil
			}
		}
		return fmt.Errorf("the server refused a request the document allows (%q): say it in the document, or accept it", e.Error.Message)
	}
	return nil
}

// RequestError returns why the document refuses the request (body: its
// body) on route, or nil. A body on an operation that takes none is
// refused, as an independent validator does.
func RequestError(route *routers.Route, vars map[string]string, req *http.Request, body []byte) error {
	if len(bytes.TrimSpace(body)) > 0 && strings.HasPrefix(req.Header.Get("Content-Type"), "application/json") && !json.Valid(body) {
		// kin-openapi decodes the first JSON value and ignores the rest.
		return errors.New("the body is not one JSON value")
	}
	r := req.Clone(context.Background())
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	o := options()
	o.AuthenticationFunc = openapi3filter.NoopAuthenticationFunc
	o.RejectWhenRequestBodyNotSpecified = true
	return openapi3filter.ValidateRequest(context.Background(), &openapi3filter.RequestValidationInput{
		Request: r, PathParams: vars, Route: route, Options: o,
	})
}

// checkAs validates a response against the document's response component
// name, for a request that matches no operation.
func (v *Validator) checkAs(req *http.Request, name string, status int, header http.Header, body []byte) error {
	ref := v.doc.Components.Responses[name]
	if ref == nil || ref.Value == nil {
		return fmt.Errorf("the document has no response component %q", name)
	}
	op := openapi3.NewOperation()
	op.AddResponse(status, ref.Value)
	route := &routers.Route{Spec: v.doc, Path: req.URL.Path, Method: req.Method, Operation: op}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, Route: route},
		Status:                 status,
		Header:                 header,
		Options:                options(),
	}
	in.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		return fmt.Errorf("%s %s (no operation: %s) answered %d %s: %w", req.Method, req.URL.Path, name, status, clip(body), err)
	}
	return nil
}

// options fail on an undocumented status and report every mismatch of a
// body, each as where and what (not the schema and value dumps, which
// would bury the point in a test log; the body is in the message).
func options() *openapi3filter.Options {
	o := &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true}
	o.WithCustomSchemaErrorFunc(func(err *openapi3.SchemaError) string {
		return "at /" + strings.Join(err.JSONPointer(), "/") + ": " + err.Reason
	})
	return o
}

func clip(b []byte) string {
	const max = 300
	if len(b) > max {
		return string(b[:max]) + "..."
	}
	return string(b)
}
