package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/mux"
	"go.opentelemetry.io/otel/trace"

	"github.com/strata-es/strata/auth"
)

// maxLoggedPath bounds the path written to a request line; the rest is cut.
const maxLoggedPath = 256

type requestLogKey struct{}

// requestLog is what the layers inside LogRequests learn about a request
// and hand outwards through the context: the matched route (known only
// inside the router), the verified claims (known only after
// Authenticate), a span started further in, and the failure detail of a
// 5xx. Handlers may run on more than one goroutine, hence the mutex.
type requestLog struct {
	mu      sync.Mutex
	route   string
	claims  *auth.Claims
	span    trace.SpanContext
	failure error
	stack   string
}

func requestLogFrom(ctx context.Context) *requestLog {
	rl, _ := ctx.Value(requestLogKey{}).(*requestLog)
	return rl
}

// noteRequest records what r knows that the outer request log cannot see:
// the matched mux route and a span started inside LogRequests.
func noteRequest(r *http.Request) {
	rl := requestLogFrom(r.Context())
	if rl == nil {
		return
	}
	route := ""
	if rt := mux.CurrentRoute(r); rt != nil {
		route = rt.GetName()
	}
	sc := trace.SpanContextFromContext(r.Context())
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if route != "" {
		rl.route = route
	}
	if sc.IsValid() {
		rl.span = sc
	}
}

// noteClaims records the verified claims for the request line.
func noteClaims(ctx context.Context, c auth.Claims) {
	if rl := requestLogFrom(ctx); rl != nil {
		rl.mu.Lock()
		rl.claims = &c
		rl.mu.Unlock()
	}
}

// noteFailure hands the detail of a 5xx to the request line. It reports
// false when no LogRequests is outside to write it: the caller then logs
// the detail itself, so that it is logged exactly once either way.
func noteFailure(r *http.Request, err error, stack []byte) bool {
	noteRequest(r)
	rl := requestLogFrom(r.Context())
	if rl == nil {
		return false
	}
	rl.mu.Lock()
	defer rl.mu.Unlock()
	rl.failure = errors.Join(rl.failure, err) // a second failure (rare) joins the first
	if rl.stack == "" && len(stack) > 0 {
		rl.stack = string(stack)
	}
	return true
}

// TagRoute is a mux middleware that tells LogRequests which route matched
// (and about a span started between the two). Mount it on the root router
// with Router.Use: mux runs router middleware only for matched routes, so
// misses are logged with route "unmatched".
func TagRoute(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		noteRequest(r)
		next.ServeHTTP(w, r)
	})
}

// LogRequests writes exactly one JSON-friendly log line per request,
// "request", at info level below 500 and error level from 500 on, with
// method, route, path (never the query string), status, duration_ms,
// bytes, request_id, tenant and sub (when authenticated), trace_id and
// span_id (when a span is in the context) and, for a 5xx, the failure
// detail that WriteError or Recover handed over instead of logging it
// themselves. Headers (so tokens), query strings and bodies are never
// logged.
//
// Mount it inside WithRequestID and outside Recover, CapInFlight and the
// router, with TagRoute on the router:
//
//	WithRequestID(LogRequests(logger)(capper.Middleware(Recover(router))))
//
// A nil logger means slog.Default().
func LogRequests(logger *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			rl := &requestLog{span: trace.SpanContextFromContext(r.Context())}
			rec := &responseRecorder{ResponseWriter: w}
			ctx := context.WithValue(r.Context(), requestLogKey{}, rl)
			completed := false
			defer func() {
				// Runs also when a panic passes through (Recover mounted
				// outside, or http.ErrAbortHandler): the line then says
				// aborted, and the panic goes on.
				l := logger
				if l == nil {
					l = slog.Default()
				}
				rl.log(ctx, l, r, w, rec, time.Since(start), !completed)
			}()
			next.ServeHTTP(rec, r.WithContext(ctx))
			completed = true
		})
	}
}

func (rl *requestLog) log(ctx context.Context, l *slog.Logger, r *http.Request, w http.ResponseWriter, rec *responseRecorder, d time.Duration, aborted bool) {
	status := rec.status
	if status == 0 && !aborted {
		status = http.StatusOK // the handler wrote nothing: net/http sends 200
	}
	level := slog.LevelInfo
	if status >= 500 || aborted {
		level = slog.LevelError
	}
	reqID := RequestID(r.Context())
	if reqID == "" {
		reqID = w.Header().Get("X-Request-ID") // WithRequestID mounted inside
	}
	path := r.URL.Path
	if len(path) > maxLoggedPath {
		path = path[:maxLoggedPath] + "..."
	}

	rl.mu.Lock()
	defer rl.mu.Unlock()
	route := rl.route
	if route == "" {
		route = "unmatched"
	}
	attrs := make([]slog.Attr, 0, 14)
	attrs = append(attrs,
		slog.String("method", r.Method),
		slog.String("route", route),
		slog.String("path", path),
		slog.Int("status", status),
		slog.Float64("duration_ms", float64(d.Microseconds())/1000),
		slog.Int64("bytes", rec.bytes),
		slog.String("request_id", reqID),
	)
	if rl.claims != nil {
		attrs = append(attrs, slog.String("tenant", string(rl.claims.Tenant)), slog.String("sub", rl.claims.Subject))
	}
	if rl.span.IsValid() {
		attrs = append(attrs, slog.String("trace_id", rl.span.TraceID().String()), slog.String("span_id", rl.span.SpanID().String()))
	}
	if aborted {
		attrs = append(attrs, slog.Bool("aborted", true))
	}
	if rl.failure != nil && (status >= 500 || aborted) {
		attrs = append(attrs, slog.String("error", rl.failure.Error()))
		if rl.stack != "" {
			attrs = append(attrs, slog.String("stack", rl.stack))
		}
	}
	l.LogAttrs(ctx, level, "request", attrs...)
}

// responseRecorder notes the status and the body size. It keeps Flush
// reachable and unwraps for http.ResponseController.
type responseRecorder struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *responseRecorder) WriteHeader(code int) {
	if w.status == 0 && code >= 200 { // 1xx are interim responses
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *responseRecorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *responseRecorder) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *responseRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }
