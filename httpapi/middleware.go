package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"runtime/debug"
	"strings"

	"github.com/gorilla/mux"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/domain"
)

type ctxKey int

const (
	claimsKey ctxKey = iota
	requestIDKey
)

// ClaimsFrom returns the verified token claims of the request.
func ClaimsFrom(ctx context.Context) (auth.Claims, bool) {
	c, ok := ctx.Value(claimsKey).(auth.Claims)
	return c, ok
}

// WithClaims returns ctx carrying c and its tenant. Only Authenticate (and
// tests) call it.
func WithClaims(ctx context.Context, c auth.Claims) context.Context {
	noteClaims(ctx, c)
	return domain.NewContext(context.WithValue(ctx, claimsKey, c), c.Tenant)
}

// RequestID returns the request's ID.
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey).(string)
	return id
}

// RouteName returns the name of the matched mux route, or "unmatched".
// Metrics and logs use it instead of the raw path to keep cardinality
// bounded and IDs out of labels.
func RouteName(r *http.Request) string {
	if rt := mux.CurrentRoute(r); rt != nil {
		if n := rt.GetName(); n != "" {
			return n
		}
	}
	return "unmatched"
}

var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// WithRequestID takes X-Request-ID when it is well-formed (never echoing
// CR/LF or other header-injection material) or makes one up, and returns
// it in the response.
func WithRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-ID")
		if !requestIDPattern.MatchString(id) {
			var b [8]byte
			rand.Read(b[:]) //nolint:errcheck
			id = hex.EncodeToString(b[:])
		}
		w.Header().Set("X-Request-ID", id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestIDKey, id)))
	})
}

// Recover turns a panic in a handler into a logged 500 in the error shape.
// Under LogRequests the panic and its stack go on the request line.
func Recover(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				stack := debug.Stack()
				if !noteFailure(r, fmt.Errorf("panic: %v", v), stack) {
					slog.ErrorContext(r.Context(), "handler panic", "route", RouteName(r), "panic", v, "stack", string(stack),
						"request_id", RequestID(r.Context()))
				}
				WriteRaw(w, http.StatusInternalServerError, ErrorBody(CodeInternal, "internal error"))
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// Authenticate requires a valid bearer token and puts its claims and
// tenant into the request context. The tenant comes from the token only:
// tenant-looking headers, paths or body fields are never consulted.
func Authenticate(v auth.TokenVerifier) mux.MiddlewareFunc {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if len(r.Header.Values("Authorization")) > 1 {
				// Which one counts would be this server's guess, and a proxy
				// or another service in front may guess differently.
				WriteError(w, r, Errorf(http.StatusBadRequest, CodeInvalidRequest, "send one Authorization header"))
				return
			}
			scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
			if !ok || !strings.EqualFold(scheme, "Bearer") {
				unauthenticated(w, r, "a bearer token is required")
				return
			}
			claims, err := v.Parse(strings.TrimSpace(token))
			if err != nil {
				unauthenticated(w, r, "the bearer token is invalid or expired")
				return
			}
			next.ServeHTTP(w, r.WithContext(WithClaims(r.Context(), claims)))
		})
	}
}

func unauthenticated(w http.ResponseWriter, r *http.Request, msg string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="strata"`)
	WriteError(w, r, Errorf(http.StatusUnauthorized, CodeUnauthenticated, msg))
}

// RequireScope answers 403 unless the token carries scope.
func RequireScope(scope string) mux.MiddlewareFunc {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c, ok := ClaimsFrom(r.Context())
			if !ok || !c.HasScope(scope) {
				WriteError(w, r, Errorf(http.StatusForbidden, CodeForbidden, "this route needs the "+scope+" scope"))
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// NotFound answers 404 in the error shape. A router's misses get it, or
// a 405, from SetMisses.
func NotFound() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, r, Errorf(http.StatusNotFound, CodeNotFound, "no such route"))
	})
}
