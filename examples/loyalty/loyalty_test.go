package loyalty_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/strata-es/strata/cli/servetest"

	"example.com/loyalty"
)

func TestMain(m *testing.M) { servetest.Main(m) }

// TestRoutesMatchTheDocument drives the module's routes through a real
// serve with the module alone; servetest's client holds every request and
// answer to the document the server serves (the engine's merged with
// openapi.yaml), both ways: an answer the document does not list, a
// request the document refuses that the server takes, or one it allows
// that the server refuses as malformed, fails the test.
func TestRoutesMatchTheDocument(t *testing.T) {
	srv := servetest.Start(t, servetest.Config{}, loyalty.Module())
	tok := srv.Token(t, "t-loyalty")
	want := func(status int, raw []byte, wantStatus int, wantIn string) {
		t.Helper()
		if status != wantStatus || !strings.Contains(string(raw), wantIn) {
			t.Errorf("answered %d %s, want %d with %q", status, raw, wantStatus, wantIn)
		}
	}
	status, raw, h := srv.Do(t, tok, "POST", "/v1/loyalty/c-1/earn", `{"points":50,"reason":"order o-1"}`)
	want(status, raw, 200, `"customer_id":"c-1","version":1`)
	if h.Get("ETag") != `"1"` {
		t.Errorf("earn: ETag %q", h.Get("ETag"))
	}
	status, raw, _ = srv.Do(t, tok, "POST", "/v1/loyalty/c-1/redeem", `{"points":20}`)
	want(status, raw, 200, `"version":2`)
	status, raw, _ = srv.Do(t, tok, "POST", "/v1/loyalty/c-1/redeem", `{"points":31}`)
	want(status, raw, 422, "rule_violation")
	status, raw, _ = srv.Do(t, tok, "GET", "/v1/loyalty/c-1?wait=10s", "", "X-Consistency-Token", position(t, srv, tok))
	want(status, raw, 200, `"balance":30`)
	status, raw, _ = srv.Do(t, tok, "GET", "/v1/loyalty/nobody", "")
	want(status, raw, 404, "not_found")

	// What the document refuses, the server refuses as malformed.
	for _, c := range []struct{ path, body string }{
		{"/v1/loyalty/c-1/earn", `{"points":0}`},
		{"/v1/loyalty/c-1/earn", `{"points":1000000001}`},
		{"/v1/loyalty/c-1/earn", `{"points":1,"reason":"` + strings.Repeat("é", 201) + `"}`},
		{"/v1/loyalty/c-1/earn", `{"points":1,"bonus":true}`},
		{"/v1/loyalty/a%20b/earn", `{"points":1}`},
		{"/v1/loyalty/c-1/redeem", `{"points":-1}`},
	} {
		status, raw, _ := srv.Do(t, tok, "POST", c.path, c.body)
		want(status, raw, 400, "invalid_request")
	}
	// 200 characters of two bytes each: allowed by both.
	status, raw, _ = srv.Do(t, tok, "POST", "/v1/loyalty/c-2/earn", `{"points":1,"reason":"`+strings.Repeat("é", 200)+`"}`)
	want(status, raw, 200, `"customer_id":"c-2"`)
	status, raw, h = srv.Do(t, tok, "PUT", "/v1/loyalty/c-1/earn", `{"points":1}`)
	want(status, raw, 405, "method_not_allowed")
	if h.Get("Allow") != "POST" {
		t.Errorf("405: Allow %q", h.Get("Allow"))
	}
}

// position earns one point for c-3 and returns the answer's position,
// the consistency token the balance waits for (c-1's redemption is older).
func position(t *testing.T, srv *servetest.Server, tok string) string {
	t.Helper()
	status, raw, _ := srv.Do(t, tok, "POST", "/v1/loyalty/c-3/earn", `{"points":1}`)
	var res struct{ Position string }
	if status != 200 || json.Unmarshal(raw, &res) != nil {
		t.Fatalf("earn: %d %s", status, raw)
	}
	return res.Position
}
