package httpapi_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/strata-es/strata/httpapi"
)

// TestServerAnswers sends what net/http refuses before any handler runs —
// an unparsable request line, a header over the limit, a Transfer-Encoding
// it does not implement, an HTTP version it does not speak, a malformed
// Host — and gets each in the error shape with an X-Request-Id, where
// net/http alone writes plain text. A handler's own plain-text answer with
// the same headers passes through untouched.
func TestServerAnswers(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{MaxHeaderBytes: 1 << 10, ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, "the handler's own")
		})}
	go srv.Serve(httpapi.ServerAnswers(ln)) //nolint:errcheck
	defer srv.Close()
	send := func(raw string) (*http.Response, string) {
		t.Helper()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck
		if _, err := io.WriteString(c, raw); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%q: %v", raw[:min(len(raw), 40)], err)
		}
		body, _ := io.ReadAll(res.Body)
		return res, string(body)
	}
	for _, c := range []struct {
		name, raw string
		status    int
		code      string
	}{
		{"bad request line", "GARBAGE\r\n\r\n", 400, "invalid_request"},
		{"malformed Host", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400, "invalid_request"},
		{"header too large", "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 8<<10) + "\r\n\r\n", 431, "headers_too_large"},
		{"gzip transfer encoding", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501, "not_implemented"},
		{"HTTP/2.0 request line", "GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505, "http_version_not_supported"},
	} {
		res, body := send(c.raw)
		var shape struct {
			Error struct{ Code, Message string }
		}
		if err := json.Unmarshal([]byte(body), &shape); err != nil || res.StatusCode != c.status || shape.Error.Code != c.code ||
			res.Header.Get("Content-Type") != "application/json" || res.Header.Get("X-Request-Id") == "" || shape.Error.Message == "" {
			t.Errorf("%s: %d %v %q, want %d %s in the error shape with X-Request-Id", c.name, res.StatusCode, res.Header, body, c.status, c.code)
		}
	}
	res, body := send("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if res.StatusCode != 400 || body != "the handler's own" {
		t.Errorf("the handler's answer: %d %q, want it untouched", res.StatusCode, body)
	}
}
