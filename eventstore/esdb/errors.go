package esdb

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"

	"github.com/strata-es/strata/eventstore"
)

// Errors of this adapter beyond the port's.
var (
	// ErrInvalidAppend is returned for a request the store cannot accept as
	// is (no events, a bad event ID, data that is not JSON, ...).
	ErrInvalidAppend = errors.New("invalid append request")
	// ErrAccessDenied: the server refused the credentials or the ACLs deny
	// the operation (reading $all needs the $ops or $admins group).
	ErrAccessDenied = errors.New("eventstoredb denied access")
	// ErrStreamDeleted: the stream was tombstoned and can never be written
	// again. strata never deletes streams; an operator did.
	ErrStreamDeleted = errors.New("stream deleted in eventstoredb")
	// ErrClosed is returned by every method after Close.
	ErrClosed = errors.New("eventstoredb store closed")
	// ErrUnsupported: the server is older than the operation needs
	// (multi-stream appends, tags and conditions need KurrentDB 25.1).
	ErrUnsupported = errors.New("not supported by this eventstoredb server")
)

// errNotFound is the client's "stream not found" (a read of a stream that
// has no events); callers turn it into an empty result.
var errNotFound = errors.New("stream not found")

// codeOf returns the client error code inside err. It uses errors.As and
// not esdb.FromError: the client wraps its own *esdb.Error with fmt.Errorf
// ("could not construct append operation. Reason: %w"), which FromError's
// type assertion misses, and FromError reports ok=true only for a nil error.
func codeOf(err error) (esdb.ErrorCode, bool) {
	var e *esdb.Error
	if errors.As(err, &e) {
		return e.Code(), true
	}
	return esdb.ErrorCodeUnknown, false
}

// kind maps a client error code onto the port's errors (or this package's).
// It returns nil for codes that have no meaning beyond "it failed".
func kind(code esdb.ErrorCode) error {
	switch code {
	case esdb.ErrorCodeWrongExpectedVersion:
		return eventstore.ErrVersionConflict
	case esdb.ErrorUnavailable, esdb.ErrorCodeDeadlineExceeded, esdb.ErrorCodeNotLeader,
		esdb.ErrorCodeConnectionClosed, esdb.ErrorAborted:
		return eventstore.ErrUnavailable
	case esdb.ErrorCodeUnauthenticated, esdb.ErrorCodeAccessDenied:
		return ErrAccessDenied
	case esdb.ErrorCodeResourceNotFound:
		return errNotFound
	case esdb.ErrorCodeStreamDeleted:
		return ErrStreamDeleted
	}
	return nil
}

// connectionTrouble reports codes after which the client's connection may
// be gone, so the next call must first re-establish it (see conn.go).
func connectionTrouble(code esdb.ErrorCode) bool {
	switch code {
	case esdb.ErrorUnavailable, esdb.ErrorCodeDeadlineExceeded, esdb.ErrorCodeNotLeader,
		esdb.ErrorCodeConnectionClosed, esdb.ErrorAborted:
		return true
	}
	return false
}

// translate turns a client error into an error of the port. The result
// never wraps the client's types (callers match only the port's sentinels)
// and its text is passed through the redactor, so no credential from the
// connection string can reach a log line through it.
func (r redactor) translate(op string, err error) error {
	if err == nil {
		return nil
	}
	code, isClient := codeOf(err)
	if !isClient {
		switch {
		case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
			return fmt.Errorf("%s: %w", op, contextErr(err))
		case errors.Is(err, ErrClosed):
			return fmt.Errorf("%s: %w", op, ErrClosed)
		}
		return fmt.Errorf("%s: %s", op, r.redact(err.Error()))
	}
	return translateCode(op, code, r.redact(err.Error()))
}

// translateCode is translate for a client error with the given code and
// (already redacted) text.
func translateCode(op string, code esdb.ErrorCode, detail string) error {
	if k := kind(code); k != nil {
		return fmt.Errorf("%s: %w: %s", op, k, detail)
	}
	return fmt.Errorf("%s: %s", op, detail)
}

func contextErr(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return context.DeadlineExceeded
	}
	return context.Canceled
}

// redactor removes the connection string's credentials from error text.
type redactor struct {
	secrets []string
}

// userinfo matches the credentials part of any URL in a text.
var userinfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^/@\s"']*@`)

func (r redactor) redact(s string) string {
	s = userinfo.ReplaceAllString(s, "${1}xxxxx@")
	for _, secret := range r.secrets {
		if secret != "" {
			s = strings.ReplaceAll(s, secret, "xxxxx")
		}
	}
	return s
}

// Redact returns the connection string with its credentials replaced, for
// log lines such as "event store: esdb://xxxxx@db:2113?tls=false". Input
// that does not parse as a URL is replaced entirely.
func Redact(connectionString string) string {
	u, err := url.Parse(connectionString)
	if err != nil {
		return "(unparsable connection string)"
	}
	if u.User != nil {
		u.User = url.User("xxxxx")
	}
	return u.String()
}
