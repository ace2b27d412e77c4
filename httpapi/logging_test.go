package httpapi_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/mux"
	"go.opentelemetry.io/otel/trace"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/httpapi"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

func token(t testing.TB, tenant, sub string) string {
	t.Helper()
	tok, err := auth.Sign(testSecret, auth.Claims{Subject: sub, Tenant: domain.TenantID(tenant)}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// lineSink receives what a slog handler writes, one record per Write.
type lineSink struct{ lines chan []byte }

func newLineSink() *lineSink { return &lineSink{lines: make(chan []byte, 1000)} }

func (s *lineSink) Write(p []byte) (int, error) {
	s.lines <- bytes.Clone(p)
	return len(p), nil
}

// next returns the next line, failing after a generous wait.
func (s *lineSink) next(t *testing.T) map[string]any {
	t.Helper()
	select {
	case b := <-s.lines:
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v", b, err)
		}
		m["_raw"] = string(b)
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no log line")
		return nil
	}
}

// span is the trace context an OpenTelemetry middleware would have put
// into the request.
var span = trace.NewSpanContext(trace.SpanContextConfig{
	TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
	SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
	TraceFlags: trace.FlagsSampled,
})

// logSetup is a server as cmd/strata composes it: request IDs, request
// logs, panics recovered, a router with TagRoute, probes, and an
// authenticated API.
func logSetup(t *testing.T, withSpan bool) (*httptest.Server, *lineSink) {
	t.Helper()
	sink := newLineSink()
	logger := slog.New(slog.NewJSONHandler(sink, nil))
	v, err := auth.NewVerifier(testSecret, nil)
	if err != nil {
		t.Fatal(err)
	}
	router := mux.NewRouter()
	router.Use(httpapi.TagRoute)
	httpapi.SetMisses(router, nil)
	router.HandleFunc("/livez", func(w http.ResponseWriter, r *http.Request) {
		httpapi.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	}).Methods(http.MethodGet).Name("livez")
	api := router.PathPrefix("/v1").Subrouter()
	api.Use(httpapi.Authenticate(v))
	api.HandleFunc("/orders/{id}", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) //nolint:errcheck
		httpapi.WriteJSON(w, http.StatusOK, map[string]string{"order_id": mux.Vars(r)["id"]})
	}).Name("order.get")
	api.HandleFunc("/fail", func(w http.ResponseWriter, r *http.Request) {
		httpapi.WriteError(w, r, errors.New("append order-1: connection to 10.0.0.7 refused by policy"))
	}).Name("fail")
	api.HandleFunc("/panic", func(w http.ResponseWriter, r *http.Request) {
		panic("boom")
	}).Name("panic")
	api.HandleFunc("/rejected", func(w http.ResponseWriter, r *http.Request) {
		httpapi.WriteError(w, r, httpapi.Errorf(http.StatusUnprocessableEntity, httpapi.CodeRuleViolation, "order is not editable"))
	}).Name("rejected")

	var h http.Handler = httpapi.WithRequestID(httpapi.LogRequests(logger)(httpapi.Recover(router)))
	if withSpan {
		inner := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			inner.ServeHTTP(w, r.WithContext(trace.ContextWithSpanContext(r.Context(), span)))
		})
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, sink
}

type logReq struct {
	method, path, body, token, requestID string
}

func do(t *testing.T, srv *httptest.Server, lr logReq) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(lr.method, srv.URL+lr.path, strings.NewReader(lr.body))
	if err != nil {
		t.Fatal(err)
	}
	if lr.token != "" {
		req.Header.Set("Authorization", "Bearer "+lr.token)
	}
	if lr.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("X-Request-ID", lr.requestID)
	req.Header.Set("Cookie", "session=COOKIESECRET")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, body
}

// collect sends the requests, then a sentinel, and returns the log lines
// by request ID. Every line of a request is written before its response
// is sent, so once the sentinel's line is in, all lines are.
func collect(t *testing.T, srv *httptest.Server, sink *lineSink, reqs []logReq) (map[string][]map[string]any, map[string][]byte) {
	t.Helper()
	bodies := map[string][]byte{}
	for _, lr := range reqs {
		_, bodies[lr.requestID] = do(t, srv, lr)
	}
	do(t, srv, logReq{method: http.MethodGet, path: "/livez", requestID: "sentinel"})
	lines := map[string][]map[string]any{}
	for {
		l := sink.next(t)
		id, _ := l["request_id"].(string)
		if id == "sentinel" {
			return lines, bodies
		}
		lines[id] = append(lines[id], l)
	}
}

func TestLogRequestsOneLinePerRequest(t *testing.T) {
	t.Parallel()
	srv, sink := logSetup(t, true)
	tok := token(t, "acme", "user-1")
	reqs := []logReq{
		{http.MethodGet, "/v1/orders/ord-1?access_token=QUERYSECRET", "", tok, "r-ok"},
		{http.MethodPost, "/v1/orders/ord-2", `{"card":"BODYSECRET"}`, tok, "r-body"},
		{http.MethodGet, "/v1/orders/ord-1", "", "", "r-unauth"},
		{http.MethodGet, "/v1/rejected", "", tok, "r-422"},
		{http.MethodGet, "/nowhere/ord-1", "", tok, "r-404"},
		{http.MethodGet, "/livez", "", "", "r-livez"},
		{http.MethodGet, "/v1/fail", "", tok, "r-500"},
		{http.MethodGet, "/v1/panic", "", tok, "r-panic"},
	}
	lines, bodies := collect(t, srv, sink, reqs)

	for _, lr := range reqs {
		got := lines[lr.requestID]
		if len(got) != 1 {
			t.Errorf("%s: %d log lines, want exactly 1: %v", lr.requestID, len(got), got)
			continue
		}
		l := got[0]
		raw := l["_raw"].(string)
		for _, secret := range []string{tok, "Bearer", "QUERYSECRET", "access_token", "BODYSECRET", "COOKIESECRET", "uthorization"} {
			if strings.Contains(raw, secret) {
				t.Errorf("%s: the log line contains %q: %s", lr.requestID, secret, raw)
			}
		}
		if l["msg"] != "request" || l["method"] != lr.method || l["request_id"] != lr.requestID {
			t.Errorf("%s: line %s", lr.requestID, raw)
		}
		if d, ok := l["duration_ms"].(float64); !ok || d < 0 {
			t.Errorf("%s: duration_ms %v", lr.requestID, l["duration_ms"])
		}
		if b, ok := l["bytes"].(float64); !ok || int(b) != len(bodies[lr.requestID]) {
			t.Errorf("%s: bytes %v, the response had %d", lr.requestID, l["bytes"], len(bodies[lr.requestID]))
		}
		if l["trace_id"] != span.TraceID().String() || l["span_id"] != span.SpanID().String() {
			t.Errorf("%s: trace_id %v span_id %v", lr.requestID, l["trace_id"], l["span_id"])
		}
		if !strings.HasPrefix(lr.path, l["path"].(string)) || strings.Contains(l["path"].(string), "?") {
			t.Errorf("%s: path %v", lr.requestID, l["path"])
		}
	}

	for id, want := range map[string]struct {
		route, level string
		status       float64
		tenant       string
		err          string
	}{
		"r-ok":     {"order.get", "INFO", 200, "acme", ""},
		"r-body":   {"order.get", "INFO", 200, "acme", ""},
		"r-unauth": {"order.get", "INFO", 401, "", ""},
		"r-422":    {"rejected", "INFO", 422, "acme", ""},
		"r-404":    {"unmatched", "INFO", 404, "", ""},
		"r-livez":  {"livez", "INFO", 200, "", ""},
		"r-500":    {"fail", "ERROR", 500, "acme", "append order-1: connection to 10.0.0.7 refused by policy"},
		"r-panic":  {"panic", "ERROR", 500, "acme", "panic: boom"},
	} {
		if len(lines[id]) != 1 {
			continue
		}
		l := lines[id][0]
		if l["route"] != want.route || l["level"] != want.level || l["status"] != want.status {
			t.Errorf("%s: route %v level %v status %v, want %s %s %v", id, l["route"], l["level"], l["status"], want.route, want.level, want.status)
		}
		if want.tenant == "" {
			if _, ok := l["tenant"]; ok {
				t.Errorf("%s: tenant %v on an unauthenticated request", id, l["tenant"])
			}
		} else if l["tenant"] != want.tenant || l["sub"] != "user-1" {
			t.Errorf("%s: tenant %v sub %v", id, l["tenant"], l["sub"])
		}
		if got, _ := l["error"].(string); got != want.err {
			t.Errorf("%s: error %q, want %q", id, got, want.err)
		}
	}
	if stack, _ := lines["r-panic"][0]["stack"].(string); !strings.Contains(stack, "logging_test.go") {
		t.Errorf("the panic line has no useful stack: %.200q", stack)
	}
	if strings.Contains(string(bodies["r-500"]), "10.0.0.7") || strings.Contains(string(bodies["r-panic"]), "boom") {
		t.Errorf("failure detail sent to the client: %s %s", bodies["r-500"], bodies["r-panic"])
	}
}

// defaultLogger captures slog.Default, which WriteError and Recover use
// when no LogRequests is mounted. Tests using it must not be parallel.
func defaultLogger(t *testing.T) *syncBuffer {
	buf := &syncBuffer{}
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewJSONHandler(buf, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	return buf
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// With LogRequests mounted, a failure is logged on the request line only:
// WriteError and Recover add no line of their own.
func TestLogRequestsFailuresNotLoggedTwice(t *testing.T) { //nolint:paralleltest // replaces slog.Default
	def := defaultLogger(t)
	srv, sink := logSetup(t, false)
	tok := token(t, "acme", "user-1")
	lines, _ := collect(t, srv, sink, []logReq{
		{http.MethodGet, "/v1/fail", "", tok, "f-1"},
		{http.MethodGet, "/v1/panic", "", tok, "f-2"},
	})
	if len(lines["f-1"]) != 1 || len(lines["f-2"]) != 1 {
		t.Errorf("lines: %v", lines)
	}
	if _, ok := lines["f-1"][0]["trace_id"]; ok {
		t.Errorf("trace_id without a span: %v", lines["f-1"][0])
	}
	if s := def.String(); s != "" {
		t.Errorf("a failure was logged a second time, outside the request line: %s", s)
	}
}

// Without LogRequests, WriteError and Recover still log the detail, once.
func TestFailuresLoggedWithoutLogRequests(t *testing.T) { //nolint:paralleltest // replaces slog.Default
	def := defaultLogger(t)
	router := mux.NewRouter()
	router.HandleFunc("/fail", func(w http.ResponseWriter, r *http.Request) {
		httpapi.WriteError(w, r, errors.New("disk on fire"))
	}).Name("fail")
	router.HandleFunc("/panic", func(w http.ResponseWriter, r *http.Request) { panic("boom") }).Name("panic")
	srv := httptest.NewServer(httpapi.WithRequestID(httpapi.Recover(router)))
	defer srv.Close()
	for _, p := range []string{"/fail", "/panic"} {
		resp, err := srv.Client().Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusInternalServerError {
			t.Errorf("%s: %d", p, resp.StatusCode)
		}
	}
	out := def.String()
	if strings.Count(out, "\n") != 2 || strings.Count(out, `"msg":"request failed"`) != 1 || strings.Count(out, `"msg":"handler panic"`) != 1 ||
		!strings.Contains(out, "disk on fire") {
		t.Errorf("default log:\n%s", out)
	}
}

func TestLogRequestsStatusAndBytes(t *testing.T) {
	t.Parallel()
	sink := newLineSink()
	logger := slog.New(slog.NewJSONHandler(sink, nil))
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		status  float64
		bytes   float64
	}{
		{"writes nothing", func(w http.ResponseWriter, r *http.Request) {}, 200, 0},
		{"writes a body", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("hello")) }, 200, 5}, //nolint:errcheck
		{"interim then final", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusAccepted)
		}, 202, 0},
		{"flushes", func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte("a")) //nolint:errcheck
			if err := http.NewResponseController(w).Flush(); err != nil {
				t.Errorf("Flush through the recorder: %v", err)
			}
		}, 200, 1},
	} {
		rec := httptest.NewRecorder()
		httpapi.LogRequests(logger)(tc.handler).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/x", nil))
		l := sink.next(t)
		if l["status"] != tc.status || l["bytes"] != tc.bytes || l["route"] != "unmatched" {
			t.Errorf("%s: status %v bytes %v route %v", tc.name, l["status"], l["bytes"], l["route"])
		}
	}

	// A panic that passes through (Recover mounted outside, or
	// http.ErrAbortHandler) still gets its line, marked aborted.
	func() {
		defer func() {
			if v := recover(); v != http.ErrAbortHandler {
				t.Errorf("recovered %v", v)
			}
		}()
		httpapi.LogRequests(logger)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			panic(http.ErrAbortHandler)
		})).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/x", nil))
	}()
	if l := sink.next(t); l["aborted"] != true || l["level"] != "ERROR" {
		t.Errorf("aborted request line: %v", l)
	}

	// A long path is cut.
	httpapi.LogRequests(logger)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).
		ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/"+strings.Repeat("a", 10_000), nil))
	if l := sink.next(t); len(l["path"].(string)) > 300 {
		t.Errorf("path of %d bytes logged", len(l["path"].(string)))
	}
}
