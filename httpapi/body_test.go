package httpapi_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/httpapi"
)

// bodyServer mounts BufferBody(timeout) before a shared cap of one slot, as
// strata serve does, over a handler that decodes the body and answers its
// length. A request with X-Test-Stall signals stalled when it reaches
// BufferBody.
type bodyServer struct {
	srv     *httptest.Server
	calls   atomic.Int64
	stalled chan struct{}
}

func newBodyServer(t *testing.T, timeout time.Duration, handler http.HandlerFunc) *bodyServer {
	t.Helper()
	b := &bodyServer{stalled: make(chan struct{}, 16)}
	capper, err := httpapi.NewInFlightCap(httpapi.InFlightConfig{Max: 1})
	if err != nil {
		t.Fatal(err)
	}
	if handler == nil {
		handler = func(w http.ResponseWriter, r *http.Request) {
			body, err := httpapi.ReadBody(w, r)
			if err != nil {
				httpapi.WriteError(w, r, err)
				return
			}
			httpapi.WriteJSON(w, http.StatusOK, map[string]int{"len": len(body)})
		}
	}
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.calls.Add(1)
		handler(w, r)
	})
	inner := httpapi.BufferBody(timeout)(capper.Middleware(counted))
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Test-Stall") != "" {
			b.stalled <- struct{}{}
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(b.srv.Close)
	return b
}

func (b *bodyServer) dial(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", b.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// readResponse reads one response from c within limit.
func readResponse(t *testing.T, c net.Conn, limit time.Duration) (*http.Response, []byte) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(limit)) //nolint:errcheck
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no response within %s: %v", limit, err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res, body
}

func errorCode(t *testing.T, body []byte) string {
	t.Helper()
	var shape struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := json.Unmarshal(body, &shape); err != nil || shape.Error.Code == "" || shape.Error.Message == "" {
		t.Fatalf("not the error shape: %s", body)
	}
	return shape.Error.Code
}

// A body that never ends is answered 408 in the error shape after the body
// timeout, without reaching the handler, and while it trickles it holds no
// shared slot: other requests are served (the cap has one slot).
func TestBufferBodyStalledBodyHoldsNoSharedSlot(t *testing.T) {
	t.Parallel()
	const timeout = 3 * time.Second
	b := newBodyServer(t, timeout, nil)
	stall := b.dial(t)
	fmt.Fprintf(stall, "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nX-Test-Stall: 1\r\n\r\n5\r\n{\"a\":\r\n")
	<-b.stalled
	client := b.srv.Client()
	for i := range 3 {
		res, err := client.Post(b.srv.URL, "application/json", strings.NewReader(`{"n":1}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("request %d beside the stalled body: %d %s", i, res.StatusCode, body)
		}
	}
	res, body := readResponse(t, stall, timeout+10*time.Second)
	if res.StatusCode != http.StatusRequestTimeout || errorCode(t, body) != httpapi.CodeRequestTimeout {
		t.Fatalf("stalled body: %d %s, want 408 request_timeout", res.StatusCode, body)
	}
	if !res.Close {
		t.Error("the connection of a timed-out body is kept open")
	}
	if n := b.calls.Load(); n != 3 {
		t.Errorf("the handler ran %d times, want 3 (never for the stalled body)", n)
	}
}

// The deadline is on the whole body, not between bytes: a body that keeps
// trickling is cut off too.
func TestBufferBodyTrickleIsCutOff(t *testing.T) {
	t.Parallel()
	b := newBodyServer(t, 500*time.Millisecond, nil)
	c := b.dial(t)
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for range 200 { // 1 byte every 50 ms: 10 s for the whole body
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if _, err := c.Write([]byte(" ")); err != nil {
				return
			}
		}
	}()
	res, body := readResponse(t, c, 8*time.Second) // well before the body could be complete
	if res.StatusCode != http.StatusRequestTimeout || errorCode(t, body) != httpapi.CodeRequestTimeout {
		t.Fatalf("trickling body: %d %s, want 408", res.StatusCode, body)
	}
	if b.calls.Load() != 0 {
		t.Error("the handler ran for a body that never arrived")
	}
}

// Oversized bodies are 413: at once, reading nothing, when Content-Length
// says so (the test sends no body at all, so a server that tried to read it
// would answer 408 after the timeout instead), and after MaxBodyBytes+1
// bytes when chunked. A body of exactly MaxBodyBytes reaches the handler.
func TestBufferBodyTooLarge(t *testing.T) {
	t.Parallel()
	b := newBodyServer(t, time.Minute, nil)
	c := b.dial(t)
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", 2<<20)
	res, body := readResponse(t, c, 20*time.Second)
	if res.StatusCode != http.StatusRequestEntityTooLarge || errorCode(t, body) != httpapi.CodePayloadTooLarge {
		t.Fatalf("Content-Length 2 MiB: %d %s, want 413", res.StatusCode, body)
	}

	client := b.srv.Client()
	chunked := func(n int) (int, []byte) {
		// An io.Reader of unknown length makes the client send chunks.
		req, _ := http.NewRequest(http.MethodPost, b.srv.URL, io.MultiReader(bytes.NewReader(bytes.Repeat([]byte(" "), n-2)), strings.NewReader("{}")))
		req.Header.Set("Content-Type", "application/json")
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		out, _ := io.ReadAll(res.Body)
		return res.StatusCode, out
	}
	if status, out := chunked(2 << 20); status != http.StatusRequestEntityTooLarge || errorCode(t, out) != httpapi.CodePayloadTooLarge {
		t.Errorf("chunked 2 MiB: %d %s, want 413", status, out)
	}
	if status, out := chunked(httpapi.MaxBodyBytes); status != http.StatusOK || !strings.Contains(string(out), strconv.Itoa(httpapi.MaxBodyBytes)) {
		t.Errorf("chunked body of exactly the limit: %d %s, want 200", status, out)
	}
	if status, out := chunked(httpapi.MaxBodyBytes + 1); status != http.StatusRequestEntityTooLarge {
		t.Errorf("chunked body one byte over the limit: %d %s, want 413", status, out)
	}
}

// Once the body is in, the deadline is lifted: a handler that runs longer
// than the body timeout keeps its request context (an expired read
// deadline would end the server's background read and cancel it; net/http
// lifts it at the body's EOF and BufferBody after reading, either suffices).
func TestBufferBodyLiftsTheDeadline(t *testing.T) {
	t.Parallel()
	const timeout = 200 * time.Millisecond
	b := newBodyServer(t, timeout, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
			httpapi.WriteError(w, r, fmt.Errorf("request context ended: %w", r.Context().Err()))
		case <-time.After(5 * timeout):
			httpapi.WriteJSON(w, http.StatusOK, map[string]bool{"ok": true})
		}
	})
	res, err := b.srv.Client().Post(b.srv.URL, "application/json", strings.NewReader(`{"n":1}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("handler running past the body timeout: %d %s", res.StatusCode, body)
	}
}

// Slow headers never reach a handler: NewServer's ReadHeaderTimeout
// closes the connection however slowly the bytes keep coming.
func TestServerClosesSlowHeaders(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	srv := httpapi.NewServer("127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln) //nolint:errcheck
	defer srv.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	began := time.Now()
	closed := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, c) // returns when the server closes
		closed <- err
	}()
	header := "GET /livez HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("a", 400)
	func() {
		for i := range len(header) {
			select {
			case <-closed:
				closed <- nil
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := c.Write([]byte{header[i]}); err != nil {
				return
			}
		}
	}()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("the server kept a slow-header connection open for 30 s")
	}
	took := time.Since(began)
	t.Logf("slow-header connection closed after %s", took.Round(10*time.Millisecond))
	if took > srv.ReadHeaderTimeout+10*time.Second {
		t.Errorf("closed after %s, want about ReadHeaderTimeout (%s)", took, srv.ReadHeaderTimeout)
	}
	if calls.Load() != 0 {
		t.Error("a handler ran for a request whose headers never completed")
	}
}

// A request refused before its body is read (no token: 401; no route: 404)
// is answered at once and its connection closed, whatever its body does:
// net/http would otherwise read up to 256 KiB of the body before it sent
// the answer, which a trickling body stretches to the server's
// ReadTimeout (forever here: httptest sets none).
func TestRefusedBeforeTheBodyAnswersAtOnce(t *testing.T) {
	t.Parallel()
	v, err := auth.NewVerifier(testSecret, nil)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/api", httpapi.Authenticate(v)(httpapi.BufferBody(time.Minute)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))))
	mux.Handle("/", httpapi.NotFound())
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, c := range []struct {
		path string
		want int
	}{{"/api", http.StatusUnauthorized}, {"/nowhere", http.StatusNotFound}} {
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n", c.path)
		res, body := readResponse(t, conn, 10*time.Second)
		if res.StatusCode != c.want {
			t.Errorf("POST %s without end: %d %s, want %d", c.path, res.StatusCode, body, c.want)
		}
		if !res.Close {
			t.Errorf("POST %s: the connection of an unread body is kept open", c.path)
		}
	}
}

// After a 413 for a chunked body, net/http drains up to 256 KiB more of it
// before it closes the connection; the body deadline still bounds that, so
// a body that turns to a trickle after the limit cannot hold the connection
// (and its goroutine) for hours.
func TestBufferBodyTooLargeThenTrickleIsClosed(t *testing.T) {
	t.Parallel()
	b := newBodyServer(t, time.Second, nil)
	c := b.dial(t)
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
	chunk := fmt.Sprintf("%x\r\n%s\r\n", 64<<10, strings.Repeat(" ", 64<<10))
	for sent := 0; sent <= httpapi.MaxBodyBytes; sent += 64 << 10 {
		if _, err := io.WriteString(c, chunk); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() { // then one byte of a chunk every 100 ms
		io.WriteString(c, fmt.Sprintf("%x\r\n", 1<<20)) //nolint:errcheck
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := c.Write([]byte(" ")); err != nil {
				return
			}
		}
	}()
	rd := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(20 * time.Second)) //nolint:errcheck
	res, err := http.ReadResponse(rd, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body) //nolint:errcheck
	res.Body.Close()
	if res.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("over the limit: %d, want 413", res.StatusCode)
	}
	began := time.Now()
	if _, err := io.Copy(io.Discard, rd); err != nil && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("the server did not close the connection: %v", err)
	}
	t.Logf("closed %s after the 413", time.Since(began).Round(10*time.Millisecond))
}
