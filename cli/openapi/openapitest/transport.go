package openapitest

import (
	"bytes"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/strata-es/strata/module"
)

// Transport is an http.RoundTripper that validates each exchange it
// carries (Validator.Check) and hands the response on unchanged (its body
// read and replaced). The request body is copied as it is sent, never
// read ahead: a test of a body that trickles still trickles.
type Transport struct {
	Base http.RoundTripper // nil: http.DefaultTransport
	// Match, when set, picks the requests to validate (e.g. those to one
	// server); the others pass through unchecked.
	Match func(*http.Request) bool
	// Report receives each mismatch with its request; the response still
	// goes back to the caller, so that the test's own assertions run too.
	Report func(*http.Request, error)
	// Validator checks the exchanges; Validate, when set instead, returns
	// it per request (e.g. the document of the server the request goes to).
	Validator *Validator
	Validate  func(*http.Request) (*Validator, error)
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if t.Match != nil && !t.Match(req) {
		return base.RoundTrip(req)
	}
	var sent *teeBody
	if req.Body != nil && req.Body != http.NoBody {
		sent = &teeBody{r: req.Body}
		clone := req.Clone(req.Context())
		clone.Body = sent
		if getBody := req.GetBody; getBody != nil {
			clone.GetBody = func() (io.ReadCloser, error) {
				b, err := getBody()
				if err != nil {
					return nil, err
				}
				sent.restart(b)
				return sent, nil
			}
		}
		req = clone
	}
	res, err := base.RoundTrip(req)
	if err != nil {
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
	if v == nil && t.Validate != nil {
		if v, err = t.Validate(req); err != nil {
			t.Report(req, err)
			return res, nil
		}
	}
	if v == nil {
		return res, nil
	}
	x := Exchange{Request: req, Status: res.StatusCode, Header: res.Header, Body: body, BodySent: true}
	if sent != nil {
		x.RequestBody, x.BodySent = sent.sent()
	}
	if err := v.Check(x); err != nil {
		t.Report(req, err)
	}
	return res, nil
}

// teeBody copies a request body as the transport sends it.
type teeBody struct {
	mu   sync.Mutex
	r    io.ReadCloser
	buf  bytes.Buffer
	done bool
}

func (b *teeBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	r := b.r
	b.mu.Unlock()
	n, err := r.Read(p)
	b.mu.Lock()
	b.buf.Write(p[:n])
	if err == io.EOF {
		b.done = true
	}
	b.mu.Unlock()
	return n, err
}

func (b *teeBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.r.Close()
}

// restart begins a copy of a resent body (a retry on a new connection).
func (b *teeBody) restart(r io.ReadCloser) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.r, b.done = r, false
	b.buf.Reset()
}

// sent returns the body as sent, and whether it was sent to its end.
func (b *teeBody) sent() ([]byte, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes()), b.done
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// Client returns an http.Client whose every exchange is validated against
// v; a mismatch fails t (Errorf: the test goes on to its own assertions,
// and calls from other goroutines are safe).
func Client(t testing.TB, v *Validator) *http.Client {
	return &http.Client{Transport: &Transport{Validator: v, Report: func(_ *http.Request, err error) {
		t.Errorf("the exchange does not match the OpenAPI document: %v", err)
	}}}
}

// ClientFor is Client with the document of an application made of mods
// (For); a document that does not build fails t at once.
func ClientFor(t testing.TB, mods ...module.Module) *http.Client {
	t.Helper()
	v, err := For(mods...)
	if err != nil {
		t.Fatal(err)
	}
	return Client(t, v)
}
