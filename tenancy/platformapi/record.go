package platformapi

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/mux"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/httpapi"
	"github.com/strata-es/strata/tenancy"
)

// Every platform call is in tenant_audit (docs/tenants.md, "What is
// audited"). The Store records a call before it runs; recordCalls, the
// first middleware of the platform routes, records the calls that were
// refused before any Store call (a verified token without the platform
// scope, a malformed path, body or query) as tenancy.ActionRefused, with
// the route, method, status and error code, never the message (it may
// echo the caller's input).
//
// A request without a verified identity (401) never reaches here:
// Authenticate answers it outside the platform routes and nothing is
// written, so that whoever can reach the port cannot fill the table. It is
// in the request log and the HTTP metrics. A verified caller's refusals
// are throttled per subject (RefusalBurst, then one per RefusalRefill); a
// recorded refusal carries in "suppressed" how many of that subject's
// were not recorded since its previous one.
const (
	RefusalBurst  = 10
	RefusalRefill = 6 * time.Second
	// maxRefusalSubjects bounds the throttle's memory; beyond it, full
	// buckets are dropped, and if none is, a new subject's refusal is not
	// recorded (logged instead).
	maxRefusalSubjects = 10000
)

// refusals is the per-subject throttle of refusal rows: a token bucket.
type refusals struct {
	mu      sync.Mutex
	now     func() time.Time
	buckets map[string]*bucket
}

type bucket struct {
	tokens     float64
	at         time.Time
	suppressed int64
}

func newRefusals(now func() time.Time) *refusals {
	return &refusals{now: now, buckets: map[string]*bucket{}}
}

// take reports whether subject's refusal is recorded, and how many of its
// refusals were suppressed since the last recorded one.
func (l *refusals) take(subject string) (bool, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.buckets[subject]
	if b == nil {
		if len(l.buckets) >= maxRefusalSubjects {
			l.prune(now)
		}
		if len(l.buckets) >= maxRefusalSubjects {
			return false, 0
		}
		b = &bucket{tokens: RefusalBurst, at: now}
		l.buckets[subject] = b
	}
	b.refill(now)
	if b.tokens < 1 {
		b.suppressed++
		return false, 0
	}
	b.tokens--
	n := b.suppressed
	b.suppressed = 0
	return true, n
}

func (b *bucket) refill(now time.Time) {
	if d := now.Sub(b.at); d > 0 {
		b.tokens = min(RefusalBurst, b.tokens+float64(d)/float64(RefusalRefill))
		b.at = now
	}
}

// prune drops the buckets that are full again and owe no count.
func (l *refusals) prune(now time.Time) {
	for s, b := range l.buckets {
		if b.refill(now); b.tokens >= RefusalBurst && b.suppressed == 0 {
			delete(l.buckets, s)
		}
	}
}

// recordCalls records the platform calls no Store call recorded. A
// refusal's answer is held until its row is written, so that, as with
// every other call, a client that saw the answer finds the row.
func (a *API) recordCalls(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, mark := tenancy.TrackAudit(r.Context())
		rec := &callRecorder{w: w, mark: mark}
		next.ServeHTTP(rec, r.WithContext(ctx))
		if rec.held {
			a.recordRefusal(r, rec.status, errorCode(rec.body.Bytes()))
			rec.release()
			return
		}
		if !mark.Audited() && a.store != nil && rec.status < 400 {
			// A route that answered without recording: a bug, recorded
			// here rather than lost.
			c, _ := httpapi.ClaimsFrom(r.Context())
			slog.ErrorContext(r.Context(), "platform call answered without an audit record", "route", httpapi.RouteName(r))
			_ = a.store.RecordFor(r.Context(), actorOf(r, c), "call", pathTenantOf(r), map[string]any{"route": httpapi.RouteName(r), "method": r.Method, "status": rec.status})
		}
	})
}

// recordRefusal writes the refused call's row, if the subject's throttle
// lets it; a failure to write it is logged (the database that refused the
// row would have refused the call too).
func (a *API) recordRefusal(r *http.Request, status int, code string) {
	if a.store == nil {
		return // 503: no owner connection to record anything on
	}
	c, ok := httpapi.ClaimsFrom(r.Context())
	if !ok {
		return
	}
	actor := actorOf(r, c)
	record, suppressed := a.refusals.take(actor.Subject)
	if !record {
		return
	}
	detail := map[string]any{"route": httpapi.RouteName(r), "method": r.Method, "status": status, "code": code}
	if suppressed > 0 {
		detail["suppressed"] = suppressed
	}
	if err := a.store.RecordFor(r.Context(), actor, tenancy.ActionRefused, pathTenantOf(r), detail); err != nil {
		slog.WarnContext(r.Context(), "record a refused platform call", "route", httpapi.RouteName(r), "status", status, "error", err.Error())
	}
}

// pathTenantOf is the path's tenant when it is a valid tenant ID, else ""
// (the row's tenant column takes valid IDs only; the route says which
// call it was).
func pathTenantOf(r *http.Request) domain.TenantID {
	id, err := domain.ParseTenantID(mux.Vars(r)["id"])
	if err != nil {
		return ""
	}
	return id
}

// errorCode reads the code of the one error shape.
func errorCode(body []byte) string {
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(body, &e)
	return e.Error.Code
}

// callRecorder passes an answer through, except a refusal (status >= 400)
// of a call not recorded yet, which it holds until recordCalls has
// written its row. Refusals are small JSON errors; answers that stream
// (an archive) are 200s and pass through.
type callRecorder struct {
	w      http.ResponseWriter
	mark   *tenancy.AuditMark
	status int
	held   bool
	body   bytes.Buffer
}

func (c *callRecorder) Header() http.Header { return c.w.Header() }

func (c *callRecorder) WriteHeader(status int) {
	if c.status != 0 {
		return
	}
	c.status = status
	if status >= 400 && !c.mark.Audited() {
		c.held = true
		return
	}
	c.w.WriteHeader(status)
}

func (c *callRecorder) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.WriteHeader(http.StatusOK)
	}
	if c.held {
		return c.body.Write(p)
	}
	return c.w.Write(p)
}

// Flush keeps a streamed answer streaming; a held one waits.
func (c *callRecorder) Flush() {
	if !c.held {
		_ = http.NewResponseController(c.w).Flush()
	}
}

func (c *callRecorder) Unwrap() http.ResponseWriter { return c.w }

func (c *callRecorder) release() {
	c.w.WriteHeader(c.status)
	_, _ = c.w.Write(c.body.Bytes())
}
