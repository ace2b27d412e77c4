package httpapi

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
)

// net/http answers some requests itself, before any handler runs and with
// no hook to change how: a request line it cannot parse or a malformed
// Host header (400), a header over MaxHeaderBytes (431), a Transfer-Encoding
// it does not implement (501), an HTTP version it does not speak (505).
// It writes them straight to the connection as plain text, and then
// closes it:
//
//	HTTP/1.1 431 Request Header Fields Too Large\r\n
//	Content-Type: text/plain; charset=utf-8\r\n
//	Connection: close\r\n
//	\r\n
//	431 Request Header Fields Too Large
//
// ServerAnswers rewrites exactly those writes into the API's error shape
// with an X-Request-Id, so that a client parses every answer of the
// server the same way. The match is exact: net/http writes these headers
// in this order and nothing else, while a handler's answer always carries
// a Date (and from WithRequestID an X-Request-Id) and is written with its
// header names sorted (Connection before Content-Type). A write that does
// not match passes through unchanged, so a future net/http that answers
// otherwise loses only the rewrite.

var serverAnswer = regexp.MustCompile(`^HTTP/1\.1 (\d{3}) [^\r\n]*\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n([^\r\n]*)$`)

// serverCodes are the error codes of net/http's own answers.
var serverCodes = map[int]struct{ code, message string }{
	400: {CodeInvalidRequest, "the request is malformed"},
	431: {CodeHeadersTooLarge, "the request's header is too large"},
	501: {CodeNotImplemented, "the request's Transfer-Encoding is not implemented: send the body as is or chunked"},
	505: {CodeVersionNotSupported, "the HTTP version is not supported: use HTTP/1.1"},
}

// ServerAnswers wraps ln so that net/http's own plain-text answers on its
// connections are in the error shape.
func ServerAnswers(ln net.Listener) net.Listener { return answersListener{ln} }

type answersListener struct{ net.Listener }

func (l answersListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &answersConn{Conn: c}, nil
}

type answersConn struct{ net.Conn }

func (c *answersConn) Write(p []byte) (int, error) {
	if !bytes.HasPrefix(p, []byte("HTTP/1.1 ")) || !bytes.Contains(p, []byte("\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n")) {
		return c.Conn.Write(p)
	}
	m := serverAnswer.FindSubmatch(p)
	if m == nil {
		return c.Conn.Write(p)
	}
	status, _ := strconv.Atoi(string(m[1]))
	known, ok := serverCodes[status]
	if !ok {
		return c.Conn.Write(p)
	}
	msg := known.message
	// net/http's text says what was wrong ("400 Bad Request: malformed
	// Host header"); what follows its status is fit for a client.
	if _, detail, ok := strings.Cut(string(m[2]), ": "); ok && detail != "" {
		msg += ": " + detail
	}
	body := append(ErrorBody(known.code, msg), '\n')
	var id [8]byte
	rand.Read(id[:]) //nolint:errcheck
	out := fmt.Appendf(nil, "HTTP/1.1 %d %s\r\nConnection: close\r\nContent-Length: %d\r\nContent-Type: application/json\r\n"+
		"X-Content-Type-Options: nosniff\r\nX-Request-Id: %s\r\n\r\n%s", status, http.StatusText(status), len(body), hex.EncodeToString(id[:]), body)
	if _, err := c.Conn.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// CloseWrite keeps net/http's half-close after such an answer (it flushes
// the answer before the connection goes), when the connection has one.
func (c *answersConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
