package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/eventstore"
)

// Error codes of the API contract.
const (
	CodeInvalidRequest       = "invalid_request"
	CodeUnauthenticated      = "unauthenticated"
	CodeForbidden            = "forbidden"
	CodeNotFound             = "not_found"
	CodeMethodNotAllowed     = "method_not_allowed"
	CodeRequestTimeout       = "request_timeout"
	CodeVersionConflict      = "version_conflict"
	CodePayloadTooLarge      = "payload_too_large"
	CodeUnsupportedMediaType = "unsupported_media_type"
	CodeIdempotencyKeyReused = "idempotency_key_reused"
	CodeRuleViolation        = "rule_violation"
	CodeRateLimited          = "rate_limited"
	CodeInternal             = "internal"
	CodeUnavailable          = "unavailable"
	CodeNotYetConsistent     = "not_yet_consistent"
	// The tenant directory's refusals (tenancy): the token's
	// tenant is not an active tenant of the directory, or is suspended.
	CodeTenantUnknown   = "tenant_unknown"
	CodeTenantSuspended = "tenant_suspended"
	// net/http's own refusals, before any handler (ServerAnswers): a
	// header over the server's limit, a Transfer-Encoding it does not
	// implement, an HTTP version it does not speak.
	CodeHeadersTooLarge     = "headers_too_large"
	CodeNotImplemented      = "not_implemented"
	CodeVersionNotSupported = "http_version_not_supported"
)

// Error is an API error with its status, code and client-safe message.
type Error struct {
	Status     int
	Code       string
	Message    string
	RetryAfter time.Duration // sets Retry-After when > 0
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Errorf builds an *Error.
func Errorf(status int, code, message string) *Error {
	return &Error{Status: status, Code: code, Message: message}
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// ErrorBody renders the one error shape, {"error":{"code","message"}}.
func ErrorBody(code, message string) []byte {
	var b errorBody
	b.Error.Code, b.Error.Message = code, message
	out, _ := json.Marshal(b)
	return out
}

// unavailableRetry is the Retry-After sent while the database is down.
const unavailableRetry = 2 * time.Second

// Classify maps err onto the API's error table. It is the only place where
// errors become statuses; anything it does not recognise is a 500 whose
// detail is logged, never sent.
func Classify(err error) *Error {
	var apiErr *Error
	switch {
	case errors.As(err, &apiErr):
		return apiErr
	case errors.Is(err, context.Canceled):
		// The client went away (checked first: a database call it
		// interrupted also looks "unavailable"); nobody reads this answer.
		// 499 (nginx's "client closed request") keeps it out of the 5xx
		// counts.
		return Errorf(499, "canceled", "the request was canceled")
	case errors.Is(err, eventstore.ErrVersionConflict):
		return Errorf(http.StatusConflict, CodeVersionConflict, "the order was changed by another request: reload it and retry")
	case errors.Is(err, domain.ErrInvalid):
		return Errorf(http.StatusBadRequest, CodeInvalidRequest, clientMessage(err, domain.ErrInvalid))
	case errors.Is(err, domain.ErrNotFound):
		return Errorf(http.StatusNotFound, CodeNotFound, clientMessage(err, domain.ErrNotFound))
	case errors.Is(err, domain.ErrRejected):
		return Errorf(http.StatusUnprocessableEntity, CodeRuleViolation, clientMessage(err, domain.ErrRejected))
	case errors.Is(err, eventstore.ErrWritesFrozen):
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
			Message: "the tenant is moving to another placement: its writes resume in a moment, retry", RetryAfter: time.Second}
	case errors.Is(err, eventstore.ErrUnavailable), db.IsUnavailable(err):
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
			Message: "the service is temporarily unavailable: retry later", RetryAfter: unavailableRetry}
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
			Message: "the request took too long: retry later", RetryAfter: unavailableRetry}
	}
	return Errorf(http.StatusInternalServerError, CodeInternal, "internal error")
}

// clientMessage returns the message of a domain error without its kind
// prefix ("rejected: order is not editable" -> "order is not editable").
// Domain messages are written for clients; nothing else reaches here.
func clientMessage(err, kind error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, kind.Error()+": "); i >= 0 {
		return msg[i+len(kind.Error())+2:]
	}
	return msg
}

// WriteError writes err in the one error shape. 5xx details go to the log
// once: on the request line when LogRequests is mounted, else on a
// "request failed" line of their own.
func WriteError(w http.ResponseWriter, r *http.Request, err error) {
	e := Classify(err)
	if e.Status >= 500 && !noteFailure(r, err, nil) {
		slog.ErrorContext(r.Context(), "request failed",
			"method", r.Method, "route", RouteName(r), "status", e.Status, "error", err.Error(),
			"request_id", RequestID(r.Context()))
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((e.RetryAfter+time.Second-1)/time.Second)))
	}
	if bodyUnread(r) {
		// Refused before its body was read (401, 429, 404, ...): close the
		// connection after the answer. Otherwise net/http reads up to
		// 256 KiB of the body before it sends the answer, and a body that
		// trickles holds the connection and hides the answer until the
		// server's ReadTimeout.
		w.Header().Set("Connection", "close")
	}
	WriteRaw(w, e.Status, ErrorBody(e.Code, e.Message))
}

// WriteJSON writes v as JSON with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		WriteRaw(w, http.StatusInternalServerError, ErrorBody(CodeInternal, "internal error"))
		return
	}
	WriteRaw(w, status, body)
}

// WriteRaw writes a JSON body that is already encoded.
func WriteRaw(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(body)         //nolint:errcheck
	w.Write([]byte{'\n'}) //nolint:errcheck
}
