package ordercmd

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/commands"
	"github.com/strata-es/strata/commands/commandapi"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/httpapi"
	"github.com/strata-es/strata/httpapi/decodetest"
)

// One fuzz target per request body, each through httpapi.DecodeStrict;
// decodetest.Check asserts the properties (rejections are 400
// *httpapi.Error, accepted bodies have exact keys only, agree with
// encoding/json and survive a round trip, every decode is quick).

func addSeeds(f *testing.F, extra []string, fields ...string) {
	for _, s := range decodetest.Seeds(fields...) {
		f.Add(s)
	}
	for _, s := range extra {
		f.Add([]byte(s))
	}
}

func FuzzCreateOrderRequest(f *testing.F) {
	addSeeds(f, []string{
		`{"order_id":"o-1","customer_id":"c-1","currency":"EUR"}`,
		`{"customer_id":"c-1","currency":"EUR","Customer_ID":"c-2"}`,
		`{"customer_id":"c-1","currency":"EUR","tenant":"other"}`,
	}, "order_id", "customer_id", "currency")
	f.Fuzz(func(t *testing.T, body []byte) {
		decodetest.Check(t, body, func() any { return new(createOrderRequest) })
	})
}

func FuzzAddLineRequest(f *testing.F) {
	addSeeds(f, []string{
		`{"product_id":"p-1","quantity":2,"unit_price":{"amount":150,"currency":"EUR"}}`,
		`{"product_id":"p-1","quantity":2,"unit_price":{"amount":150,"currency":"EUR","Amount":1}}`,
		`{"product_id":"p-1","quantity":9223372036854775808,"unit_price":{"amount":1e400,"currency":"EUR"}}`,
		`{"product_id":"p-1","quantity":2,"unit_price":null}`,
		`{"product_id":"p-1","quantity":2,"unit_price":[{"amount":1}]}`,
	}, "product_id", "quantity", "unit_price", "amount", "currency")
	f.Fuzz(func(t *testing.T, body []byte) {
		decodetest.Check(t, body, func() any { return new(addLineRequest) })
	})
}

func FuzzPayRequest(f *testing.F) {
	addSeeds(f, []string{`{"payment_reference":"pay-1"}`, `{"payment_reference":"pay-1","amount":1}`}, "payment_reference")
	f.Fuzz(func(t *testing.T, body []byte) {
		decodetest.Check(t, body, func() any { return new(payRequest) })
	})
}

func FuzzCancelRequest(f *testing.F) {
	addSeeds(f, []string{`{"reason":"changed my mind"}`, `{"reason":"x","Reason":"y"}`}, "reason")
	f.Fuzz(func(t *testing.T, body []byte) {
		decodetest.Check(t, body, func() any { return new(cancelRequest) })
	})
}

func FuzzEmptyRequest(f *testing.F) {
	addSeeds(f, []string{`{}`, ` { } `, `{"order_id":"x"}`}, "order_id")
	f.Fuzz(func(t *testing.T, body []byte) {
		if v := decodetest.Check(t, body, func() any { return new(struct{}) }); v != nil {
			if b := bytes.TrimSpace(body); !bytes.Equal(b, []byte("{}")) && !emptyObject(b) {
				t.Fatalf("an empty body accepted %q", body)
			}
		}
	})
}

// emptyObject reports whether b is "{", whitespace, "}".
func emptyObject(b []byte) bool {
	return len(b) >= 2 && b[0] == '{' && b[len(b)-1] == '}' && len(bytes.TrimSpace(b[1:len(b)-1])) == 0
}

// fakeExec records the command and succeeds.
type fakeExec struct {
	calls int
	cmd   Command
	opts  commands.Options
}

func (f *fakeExec) Handle(_ context.Context, cmd Command, opts commands.Options) (commands.Result, error) {
	f.calls++
	f.cmd, f.opts = cmd, opts
	return commands.Result{ID: cmd.Target(), Version: 3, Position: event.Position{Major: 7, Minor: 1}}, nil
}

// The idempotency-key and If-Match seeds of the engine's own fuzz targets
// (commands/commandapi), a few of each.
var (
	ifMatchSeeds        = []string{`"3"`, `3`, `"-1"`, `W/"3"`, `*`, `""`, `"9223372036854775808"`, "3\r\nX-Injected: 1"}
	idempotencyKeySeeds = []string{"k", "", "a b", "key\r\nX-Injected: 1", strings.Repeat("k", 256), "ключ", "pm:fulfilment:o-1:cancel"}
)

// validKey is an independent statement of the Idempotency-Key rule: 1 to
// 255 bytes, each printable ASCII (0x21-0x7e), not in the engine's "pm:"
// namespace.
func validKey(k string) bool {
	if len(k) < 1 || len(k) > 255 || strings.HasPrefix(k, "pm:") {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

var routes = []struct {
	method, path string // {id} and {product_id} are filled in
	okStatus     int
}{
	{http.MethodPost, "/v1/orders", http.StatusCreated},
	{http.MethodPost, "/v1/orders/{id}/lines", http.StatusOK},
	{http.MethodDelete, "/v1/orders/{id}/lines/{product_id}", http.StatusOK},
	{http.MethodPost, "/v1/orders/{id}/place", http.StatusOK},
	{http.MethodPost, "/v1/orders/{id}/pay", http.StatusOK},
	{http.MethodPost, "/v1/orders/{id}/cancel", http.StatusOK},
}

// FuzzCommandRoutes sends hostile requests through the real routes and
// handlers: path IDs, bodies, content types, If-Match and
// Idempotency-Key together. Either the command executes with exactly what
// the request said, or the client gets a 4xx in the error shape; never a
// 5xx, never an executed command from an invalid request.
func FuzzCommandRoutes(f *testing.F) {
	bodies := []string{"", `{}`, `{"customer_id":"c-1","currency":"EUR"}`, `{"product_id":"p-1","quantity":1,"unit_price":{"amount":1,"currency":"EUR"}}`,
		`{"payment_reference":"r"}`, `{"reason":"x"}`, `{"reason":"x","Reason":"y"}`, `null`, `[]`}
	for i := range routes {
		for j, b := range bodies {
			f.Add(uint8(i), "ord-1", "p-1", b, "application/json", ifMatchSeeds[j%len(ifMatchSeeds)], idempotencyKeySeeds[j%len(idempotencyKeySeeds)])
		}
		f.Add(uint8(i), "../x", "p 1", `{}`, "text/plain", "", "")
		f.Add(uint8(i), "ord-1/place", "p-1/x", `{}`, "application/json", "", "") // an escaped "/" stays in its segment
		f.Add(uint8(i), "%61", "%2E%2E", `{}`, "application/json", "", "")        // decoded once, never twice
		f.Add(uint8(i), strings.Repeat("o", 65), "\xff", `{}`, "", `"1"`, "k")
	}
	f.Fuzz(func(t *testing.T, route uint8, id, product, body, contentType, ifMatch, idemKey string) {
		rt := routes[int(route)%len(routes)]
		exec := &fakeExec{}
		router := httpapi.NewRouter() // routes match the escaped path
		commandapi.Register(router, commands.Executor[*order.Order](exec), Resource, Routes()...)

		path := strings.NewReplacer("{id}", url.PathEscape(id), "{product_id}", url.PathEscape(product)).Replace(rt.path)
		r := httptest.NewRequest(rt.method, "/", strings.NewReader(body))
		r.URL = &url.URL{Path: mustUnescape(path), RawPath: path}
		if contentType != "" {
			r.Header.Set("Content-Type", contentType)
		}
		if ifMatch != "" {
			r.Header.Set("If-Match", ifMatch)
		}
		if idemKey != "" {
			r.Header.Set("Idempotency-Key", idemKey)
		}
		r = r.WithContext(httpapi.WithClaims(r.Context(), auth.Claims{Subject: "user-1", Tenant: "acme"}))
		w := httptest.NewRecorder()
		decodetest.Timed(t, func() {
			*exec = fakeExec{}
			w = httptest.NewRecorder()
			r.Body = readCloser{strings.NewReader(body)}
			router.ServeHTTP(w, r)
		})

		if exec.calls == 0 {
			if w.Code == http.StatusMovedPermanently && w.Header().Get("Location") != "" {
				return // mux redirects a path with . or .. segments to its clean form
			}
			var shape struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			if w.Code < 400 || w.Code >= 500 || json.Unmarshal(w.Body.Bytes(), &shape) != nil || shape.Error.Code == "" {
				t.Fatalf("%s %s: not executed, answered %d %s", rt.method, path, w.Code, w.Body)
			}
			return
		}
		if w.Code != rt.okStatus {
			t.Fatalf("%s %s: executed, answered %d %s", rt.method, path, w.Code, w.Body)
		}
		if err := domain.ValidateEntityID("order id", exec.cmd.Target()); err != nil {
			t.Fatalf("executed %#v with an invalid order ID", exec.cmd)
		}
		if rt.path != "/v1/orders" && exec.cmd.Target() != id {
			t.Fatalf("executed %#v for path ID %q", exec.cmd, id)
		}
		if rm, ok := exec.cmd.(RemoveLine); ok && (rm.ProductID != product || domain.ValidateEntityID("product", product) != nil) {
			t.Fatalf("executed %#v for product %q", rm, product)
		}
		switch {
		case ifMatch == "" && exec.opts.ExpectedVersion != nil:
			t.Fatalf("an expected version without If-Match")
		case ifMatch != "":
			n, err := commandapi.ParseIfMatch(ifMatch)
			if err != nil || exec.opts.ExpectedVersion == nil || *exec.opts.ExpectedVersion != n {
				t.Fatalf("If-Match %q executed with %v", ifMatch, exec.opts.ExpectedVersion)
			}
		}
		switch {
		case idemKey == "" && exec.opts.Idempotency != nil:
			t.Fatalf("idempotency without a key")
		case idemKey != "" && (!validKey(idemKey) || exec.opts.Idempotency == nil || exec.opts.Idempotency.Key != idemKey):
			t.Fatalf("Idempotency-Key %q executed with %+v", idemKey, exec.opts.Idempotency)
		}
		var res struct {
			OrderID  string `json:"order_id"`
			Version  int64  `json:"version"`
			Position string `json:"position"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &res); err != nil || res.OrderID != exec.cmd.Target() || res.Version != 3 {
			t.Fatalf("response %s: %v", w.Body, err)
		}
		if p, err := event.ParseToken(res.Position); err != nil || p != (event.Position{Major: 7, Minor: 1}) {
			t.Fatalf("response position %q: %v", res.Position, err)
		}
	})
}

func mustUnescape(p string) string {
	s, err := url.PathUnescape(p)
	if err != nil {
		return p
	}
	return s
}

type readCloser struct{ *strings.Reader }

func (readCloser) Close() error { return nil }
