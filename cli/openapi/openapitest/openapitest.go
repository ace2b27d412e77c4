// Package openapitest validates HTTP responses against strata's OpenAPI
// document (package api) with kin-openapi's openapi3filter: the status
// must be one the route documents, the headers it marks required must be
// there and match, and the body must match the schema of that status. The
// HTTP tests send their requests through Client or Transport, so that a
// handler whose output drifts from the document (a renamed field, a new
// status, an error in another shape) fails the build, not a client.
//
// Requests are not validated: tests send invalid requests on purpose, and
// the server's own strict decoding is what checks them.
package openapitest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/strata-es/strata/cli/openapi"
)

// Load parses doc with kin-openapi's loader and validates it as a
// document (its own rules: references resolve, schemas are well formed,
// the version's keywords only).
func Load(ctx context.Context, doc []byte) (*openapi3.T, error) {
	t, err := openapi3.NewLoader().LoadFromData(doc)
	if err != nil {
		return nil, fmt.Errorf("load the OpenAPI document: %w", err)
	}
	if err := t.Validate(ctx); err != nil {
		return nil, fmt.Errorf("the OpenAPI document is invalid: %w", err)
	}
	return t, nil
}

// Validator checks responses against one document.
type Validator struct {
	doc    *openapi3.T
	router routers.Router
}

// New returns a Validator of doc.
func New(doc []byte) (*Validator, error) {
	t, err := Load(context.Background(), doc)
	if err != nil {
		return nil, err
	}
	r, err := gorillamux.NewRouter(t)
	if err != nil {
		return nil, fmt.Errorf("route the OpenAPI document: %w", err)
	}
	return &Validator{doc: t, router: r}, nil
}

var strata = sync.OnceValues(func() (*Validator, error) { return New(openapi.OpenAPI) })

// Strata returns the Validator of strata's document (package api), loaded
// once per test binary.
func Strata() (*Validator, error) { return strata() }

// missResponses are the answers of the router itself to a path or method
// it does not serve (httpapi.NotFound, httpapi.MethodNotAllowed): the only
// statuses an undocumented request may get, in the error shape.
var missResponses = map[int]string{http.StatusNotFound: "NotFound", http.StatusMethodNotAllowed: "MethodNotAllowed"}

// Check validates one response (status, header, body) to req.
func (v *Validator) Check(req *http.Request, status int, header http.Header, body []byte) error {
	ctx := context.Background()
	route, vars, err := v.router.FindRoute(req)
	if err != nil {
		if !errors.Is(err, routers.ErrPathNotFound) && !errors.Is(err, routers.ErrMethodNotAllowed) {
			return fmt.Errorf("%s %s: find the route: %w", req.Method, req.URL.Path, err)
		}
		// Not in the document: only the router's own miss may answer it.
		// A success here is a route the document does not describe.
		name, ok := missResponses[status]
		if !ok {
			return fmt.Errorf("%s %s answered %d, but the document has no such operation (%v)", req.Method, req.URL.Path, status, err)
		}
		return v.checkAs(req, name, status, header, body)
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: vars, Route: route},
		Status:                 status,
		Header:                 header,
		Options:                options(),
	}
	in.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(ctx, in); err != nil {
		return fmt.Errorf("%s %s (operation %s) answered %d %s: %w", req.Method, req.URL.Path, route.Operation.OperationID, status, clip(body), err)
	}
	return nil
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

// Transport is an http.RoundTripper that validates each response it
// carries and hands it on unchanged (its body read and replaced).
type Transport struct {
	Base http.RoundTripper // nil: http.DefaultTransport
	// Match, when set, picks the requests to validate (e.g. those to one
	// server); the others pass through unchecked.
	Match func(*http.Request) bool
	// Report receives each mismatch with its request; the response still
	// goes back to the caller, so that the test's own assertions run too.
	Report func(*http.Request, error)
	// Validator checks the responses (nil: Strata()).
	Validator *Validator
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	res, err := base.RoundTrip(req)
	if err != nil || t.Match != nil && !t.Match(req) {
		return res, err
	}
	body, rerr := io.ReadAll(res.Body)
	res.Body.Close()
	res.Body = io.NopCloser(bytes.NewReader(body))
	if rerr != nil {
		// A body cut short (the server went away): the caller sees the
		// same error when it reads; there is nothing whole to validate.
		res.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), errReader{rerr}))
		return res, nil
	}
	v := t.Validator
	if v == nil {
		if v, err = Strata(); err != nil {
			t.Report(req, err)
			return res, nil
		}
	}
	if err := v.Check(req, res.StatusCode, res.Header, body); err != nil {
		t.Report(req, err)
	}
	return res, nil
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// Client returns an http.Client whose every response is validated
// against strata's document; a mismatch fails t (Errorf: the test goes on
// to its own assertions, and calls from other goroutines are safe).
func Client(t testing.TB) *http.Client {
	return &http.Client{Transport: &Transport{Report: func(_ *http.Request, err error) {
		t.Errorf("response does not match the OpenAPI document: %v", err)
	}}}
}
