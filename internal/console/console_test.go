package console

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The handler serves the page and its assets with a strict
// Content-Security-Policy, redirects /console, and answers anything else
// with the API's one error shape.
func TestHandler(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct {
		path, wantType, wantBody string
		status                   int
	}{
		{"/console/", "text/html; charset=utf-8", `<script src="/console/assets/console.js" defer></script>`, http.StatusOK},
		{"/console/assets/console.js", "text/javascript; charset=utf-8", "sessionStorage", http.StatusOK},
		{"/console/assets/console.css", "text/css; charset=utf-8", ":focus-visible", http.StatusOK},
		{"/console", "", "", http.StatusMovedPermanently},
		{"/console/assets/nope.js", "application/json", `"code":"not_found"`, http.StatusNotFound},
		{"/console/assets/../console.go", "application/json", `"code":"not_found"`, http.StatusNotFound},
		{"/console/assets/", "application/json", `"code":"not_found"`, http.StatusNotFound},
		{"/console/other", "application/json", `"code":"not_found"`, http.StatusNotFound},
	} {
		res, err := client.Get(srv.URL + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != tc.status || tc.wantType != "" && res.Header.Get("Content-Type") != tc.wantType || !strings.Contains(string(body), tc.wantBody) {
			t.Errorf("GET %s: %d %q %.200s", tc.path, res.StatusCode, res.Header.Get("Content-Type"), body)
		}
		if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("GET %s: Content-Security-Policy %q", tc.path, csp)
		}
		if res.StatusCode == http.StatusNotFound {
			var e struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" {
				t.Errorf("GET %s: 404 without the error shape: %s", tc.path, body)
			}
		}
	}
	if res, _ := client.Get(srv.URL + "/console"); res != nil && res.Header.Get("Location") != "/console/" {
		t.Errorf("GET /console redirects to %q", res.Header.Get("Location"))
	}
}
