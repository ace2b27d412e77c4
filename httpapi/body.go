package httpapi

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

// DefaultBodyTimeout is how long BufferBody lets a request body take when
// no timeout is given: 1 MiB needs 200 KiB/s, while the API's bodies are
// well under a kilobyte.
const DefaultBodyTimeout = 5 * time.Second

// BufferBody reads the whole request body (at most MaxBodyBytes) before
// next runs, within timeout of the handler's start (default
// DefaultBodyTimeout), and hands next the bytes. A body that trickles or
// never ends thus holds what is mounted before BufferBody (the tenant's own
// slot) for at most timeout, and never what is mounted after it (the shared
// in-flight cap): slow uploads cannot starve other tenants, and the
// server's ReadTimeout is no longer the only bound.
//
// Answers, in the error shape and without calling next: 413 for a body
// over MaxBodyBytes (at once when Content-Length says so, else after
// reading MaxBodyBytes+1 bytes), 408 request_timeout when the body is not
// complete in time, 400 when it cannot be read. Requests without a body
// pass through untouched. The deadline is set with
// http.ResponseController; where the ResponseWriter cannot set one, the
// server's ReadTimeout remains the bound.
func BufferBody(timeout time.Duration) func(http.Handler) http.Handler {
	if timeout <= 0 {
		timeout = DefaultBodyTimeout
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
				next.ServeHTTP(w, r)
				return
			}
			if r.ContentLength > MaxBodyBytes {
				// Nothing to read to know the answer; the server closes
				// the connection rather than drain the rest.
				w.Header().Set("Connection", "close")
				WriteError(w, r, tooLarge())
				return
			}
			rc := http.NewResponseController(w)
			deadline := rc.SetReadDeadline(time.Now().Add(timeout)) == nil
			body, err := readAllLimited(r.Body, r.ContentLength)
			if deadline && err == nil {
				// No deadline while the handler runs: an expired one would
				// end the server's background read of the connection and
				// with it the request's context. (net/http lifts it itself
				// when the body hits EOF.) On the error paths it stays: after
				// the answer net/http drains up to 256 KiB of a chunked body,
				// and the deadline bounds how long a trickle can make that.
				_ = rc.SetReadDeadline(time.Time{})
			}
			var netErr net.Error
			switch {
			case errors.Is(err, errTooLarge):
				w.Header().Set("Connection", "close")
				WriteError(w, r, tooLarge())
				return
			case errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout():
				w.Header().Set("Connection", "close")
				WriteError(w, r, Errorf(http.StatusRequestTimeout, CodeRequestTimeout,
					fmt.Sprintf("the request body did not arrive within %s", timeout)))
				return
			case err != nil:
				w.Header().Set("Connection", "close")
				WriteError(w, r, Errorf(http.StatusBadRequest, CodeInvalidRequest, "could not read the request body"))
				return
			}
			r.Body = bufferedBody{bytes.NewReader(body)}
			r.ContentLength = int64(len(body))
			next.ServeHTTP(w, r)
		})
	}
}

// bufferedBody is a body BufferBody has read.
type bufferedBody struct{ *bytes.Reader }

func (bufferedBody) Close() error { return nil }

// bodyUnread reports whether r has a body that may still be on the wire
// (BufferBody has not read it).
func bodyUnread(r *http.Request) bool {
	if r == nil || r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return false
	}
	_, buffered := r.Body.(bufferedBody)
	return !buffered
}

var errTooLarge = errors.New("body too large")

func tooLarge() *Error {
	return Errorf(http.StatusRequestEntityTooLarge, CodePayloadTooLarge, fmt.Sprintf("request body exceeds %d bytes", MaxBodyBytes))
}

// readAllLimited reads rd to its end, at most MaxBodyBytes bytes (one more
// is errTooLarge). A known length sizes the buffer once, so a megabyte
// body costs a megabyte, not the doublings of io.ReadAll.
func readAllLimited(rd io.Reader, length int64) ([]byte, error) {
	size := int64(512)
	if length > 0 {
		size = length + 1 // +1: room for the read that sees EOF
	}
	lr := io.LimitReader(rd, MaxBodyBytes+1)
	buf := make([]byte, 0, size)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := lr.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if len(buf) > MaxBodyBytes {
			return nil, errTooLarge
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}
