package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/strata-es/strata/httpapi"
)

// TestMisses: what no route takes answers in the error shape: a path not
// in canonical form is a 400, never a redirect (gorilla/mux's default
// cleaning answered 301 with an empty body, and a client following it sent
// a POST to /v1/receive as a GET); a method the path is not served with is
// a 405 with Allow; a path of the API this process does not serve (a role
// it does not run) is a 405 with an empty Allow, like a command route whose
// path has a query route; anything else is a 404.
func TestMisses(t *testing.T) {
	t.Parallel()
	r := httpapi.NewRouter()
	ok := func(w http.ResponseWriter, _ *http.Request) {
		httpapi.WriteJSON(w, http.StatusOK, map[string]string{"ok": "yes"})
	}
	r.HandleFunc("/v1/things/{id}", ok).Methods(http.MethodGet)
	r.HandleFunc("/v1/things/{id}/receive", ok).Methods(http.MethodPost)
	r.HandleFunc("/v1/things", ok).Methods(http.MethodPost, http.MethodGet)
	api := func(req *http.Request) bool { return strings.HasPrefix(req.URL.Path, "/v1/orders/") }
	httpapi.SetMisses(r, api)
	srv := httptest.NewServer(httpapi.WithRequestID(r))
	defer srv.Close()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, c := range []struct {
		method, path string
		status       int
		code, allow  string
	}{
		{"GET", "/v1/things/t-1", 200, "", ""},
		{"PUT", "/v1/things/t-1", 405, "method_not_allowed", "GET"},
		{"DELETE", "/v1/things", 405, "method_not_allowed", "GET, POST"},
		{"GET", "/v1/things/t-1/receive", 405, "method_not_allowed", "POST"},
		{"POST", "/v1/orders/o-1/place", 405, "method_not_allowed", ""},
		{"GET", "/v1/nope", 404, "not_found", ""},
		{"GET", "/v1//things", 400, "invalid_request", ""},
		{"POST", "/v1/things/../receive", 400, "invalid_request", ""},
		{"POST", "/v1/things/%2E%2E/receive", 400, "invalid_request", ""},
		{"GET", "/v1/things/.", 400, "invalid_request", ""},
		{"PUT", "/v1/things/./x/..", 400, "invalid_request", ""},
		{"GET", "/v1/things/...", 200, "", ""},
	} {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, nil)
		req.URL.Opaque = c.path // sent as written, not cleaned by the client
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var shape struct {
			Error struct{ Code, Message string }
		}
		_ = json.Unmarshal(body, &shape)
		allow, hasAllow := res.Header["Allow"]
		switch {
		case res.StatusCode != c.status || shape.Error.Code != c.code:
			t.Errorf("%s %s: %d %s, want %d %s", c.method, c.path, res.StatusCode, body, c.status, c.code)
		case res.Header.Get("X-Request-Id") == "":
			t.Errorf("%s %s: no X-Request-Id", c.method, c.path)
		case c.status == 405 && (!hasAllow || strings.Join(allow, ",") != c.allow):
			t.Errorf("%s %s: Allow %q (present: %v), want %q", c.method, c.path, allow, hasAllow, c.allow)
		case c.status != 405 && hasAllow:
			t.Errorf("%s %s: Allow %q on a %d", c.method, c.path, allow, res.StatusCode)
		}
	}
}
