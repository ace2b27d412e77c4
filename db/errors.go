package db

import (
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// IsUnavailable reports whether err means the database cannot serve right
// now (connection refused or lost, server shutting down or starting up, too
// many connections) as opposed to a bug or a rejected statement. Callers
// answer 503 with Retry-After for these, never 500.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P01", "57P02", "57P03", // admin shutdown, crash shutdown, cannot connect now
			"53300": // too many connections
			return true
		}
		return strings.HasPrefix(pgErr.Code, "08") // connection exception
	}
	var connErr *pgconn.ConnectError
	var netErr net.Error
	switch {
	case errors.As(err, &connErr), errors.As(err, &netErr),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		pgconn.SafeToRetry(err):
		return true
	}
	// pgx reports a connection that died underneath it as a plain error.
	msg := err.Error()
	for _, s := range []string{"conn closed", "connection reset", "broken pipe", "unexpected EOF", "failed to connect", "connection refused", "closed pool"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// SQLState returns err's SQLSTATE, or "".
func SQLState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// ConstraintName returns the violated constraint's name, or "".
func ConstraintName(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.ConstraintName
	}
	return ""
}

// IsTransient reports concurrency failures (serialization failure,
// deadlock) that a retry of the whole transaction resolves.
func IsTransient(err error) bool {
	switch SQLState(err) {
	case "40001", "40P01":
		return true
	}
	return false
}

// ServerMessage returns the server's message of err (without the
// connection details pgx adds around a connect error, which may include a
// password), or "".
func ServerMessage(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Message
	}
	return ""
}
