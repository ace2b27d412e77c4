package queryapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/gorilla/mux"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/httpapi"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/readmodels"
)

// Waiter waits until projections have applied a position
// (*projections.Consistency). The gate is asked once, before the wait
// first blocks.
type Waiter interface {
	WaitGated(ctx context.Context, wait time.Duration, pos event.Position, gate projections.Gate, names ...string) error
}

// StatusReader reports projections (*projections.Monitor).
type StatusReader interface {
	Tenant(ctx context.Context, tenant string) ([]projections.ProjectionStatus, error)
	All(ctx context.Context) ([]projections.ProjectionStatus, error)
}

// Config tunes the API. Zero values take the defaults.
type Config struct {
	// DefaultWait bounds the wait for a consistency token (default 2s).
	DefaultWait time.Duration
	// MaxWait is the most ?wait= may ask for (default 10s; the HTTP
	// server's write timeout must be longer).
	MaxWait time.Duration
	// Head, when set, returns the newest position a command may have
	// returned. A consistency token beyond it was never handed out (it is
	// forged, or from another deployment) and is refused with 400 instead
	// of being waited for to the end of ?wait=. It must cover every
	// committed append, including those a log reader cannot see yet
	// behind an older open transaction: postgres.Store.LastCommitted, not
	// Head. strata serve always sets it.
	Head func(ctx context.Context) (event.Position, error)
	// WaitSlot, when set, is asked before a query blocks waiting for its
	// consistency token; its error (a 429) refuses the wait. strata serve
	// bounds the waits of each tenant with it.
	WaitSlot func(r *http.Request) (release func(), err error)
	// Refuse, when set, is asked before a route's read whether its
	// projections may be read at all; its error (a 503) is the answer.
	// strata serve refuses projections whose checkpoint is beyond the end
	// of the event log (projections.StateAheadOfLog).
	Refuse func(projections []string) error
	// Replicas, when set, serves the routes' reads from streaming replicas
	// (replicas.go): a read without a consistency token from any usable
	// replica, one with a token from a replica once it has replayed the
	// token's checkpoint, else from the primary. The answer's ReadSourceHeader
	// says which.
	Replicas *ReplicaSet
	// ReplicaBudget is how long a read with a consistency token waits for
	// a replica to replay it before it falls back to the primary (default
	// 500ms; the request's whole wait still bounds both).
	ReplicaBudget time.Duration
	// OnRead, if set, is told where each read was answered from: source
	// "replica" or "primary", and why a read fell back to the primary ("":
	// it did not; FallbackNoReplica, FallbackReplicaBehind,
	// FallbackReplicaError).
	OnRead func(source, fallback string)
	// Placement and Epoch are the placement whose read models this API
	// serves ("": the shared database) and its epoch. A consistency token
	// of another placement, or of an earlier epoch of this one, was handed
	// out before the tenant moved here (or before the database was
	// replaced): everything the tenant had there was copied and its read
	// models verified before it was served here, so such a token is
	// answered at once, without waiting (docs/scaling.md, "Moving a
	// tenant").
	Placement string
	Epoch     int64
}

// ReadSourceHeader says, when the query role has replicas, where a read was
// answered from: "replica; name=<host:port>" or "primary", with
// "; fallback=<reason>" when a replica was wanted and could not be used.
const ReadSourceHeader = "X-Read-Source"

// Why a read fell back from the replicas to the primary.
const (
	FallbackNoReplica     = "no_replica"     // none usable: unreachable, lagging beyond the maximum, or paused (for a token)
	FallbackReplicaBehind = "replica_behind" // the replica had not replayed the token within the budget
	FallbackReplicaError  = "replica_error"  // the replica failed during the wait or the read
)

// ConsistencyHeader carries the consistency token of a command response.
const ConsistencyHeader = "X-Consistency-Token"

// RouteAdminProjection names the admin route of the projections' status.
const RouteAdminProjection = "admin.projections"

// Route is one query route of a module.
type Route struct {
	// Name is the route's stable name in metrics and logs ("query.order").
	Name string
	// Path is a gorilla/mux template; the method is GET.
	Path string
	// Projections are the projections behind the route: a consistency
	// token is waited for on exactly these.
	Projections []string
	// Params lists the query parameters the route takes besides wait.
	// Any other parameter, or one given twice, is a 400.
	Params []string
	// Prepare validates the request (path variables, the parsed query
	// string) and returns the read to run once the projections have
	// applied the request's consistency token. Its errors answer as
	// httpapi classifies them (BadRequest for a bad parameter).
	Prepare func(r *http.Request, q url.Values) (Read, error)
}

// Read runs a route's query, with the tenant in ctx, and returns the JSON
// body of a 200 answer.
type Read func(ctx context.Context) (any, error)

// API serves the query routes.
type API struct {
	models *readmodels.DB
	wait   Waiter
	status StatusReader
	cfg    Config
	head   headBound
}

// New returns the query API.
func New(models *readmodels.DB, wait Waiter, status StatusReader, cfg Config) *API {
	if cfg.DefaultWait <= 0 {
		cfg.DefaultWait = 2 * time.Second
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = 10 * time.Second
	}
	if cfg.ReplicaBudget <= 0 {
		cfg.ReplicaBudget = 500 * time.Millisecond
	}
	return &API{models: models, wait: wait, status: status, cfg: cfg, head: headBound{read: cfg.Head}}
}

// headBound answers whether a position is at most the head of the log,
// reading the head as rarely as it can: the highest head read so far
// answers every position at or below it, and a head read that began after
// a request arrived answers for that request whatever its position (every
// token the client holds came from a command that committed before it
// sent the request). Concurrent requests share one read, so a flood of
// forged tokens costs one read per round, not one per request.
type headBound struct {
	read func(ctx context.Context) (event.Position, error)

	mu      sync.Mutex
	head    event.Position // the highest head read
	readAt  time.Time      // when the read that returned head began
	pending *headRead      // the read under way, if any
}

type headRead struct {
	began time.Time
	done  chan struct{}
	head  event.Position
	err   error
}

// within reports whether pos <= the head of the log, for a request that
// arrived at arrived.
func (b *headBound) within(ctx context.Context, pos event.Position, arrived time.Time) (bool, error) {
	for {
		b.mu.Lock()
		if !b.head.Less(pos) {
			b.mu.Unlock()
			return true, nil
		}
		if !b.readAt.IsZero() && b.readAt.After(arrived) {
			b.mu.Unlock()
			return false, nil
		}
		rd := b.pending
		if rd == nil || !rd.began.After(arrived) {
			if rd == nil {
				rd = &headRead{began: time.Now(), done: make(chan struct{})}
				b.pending = rd
				go b.readHead(context.WithoutCancel(ctx), rd)
			} else {
				// A read that began before this request arrived cannot
				// answer for it: wait for it to end, then start another.
				b.mu.Unlock()
				select {
				case <-rd.done:
				case <-ctx.Done():
					return false, ctx.Err()
				}
				continue
			}
		}
		b.mu.Unlock()
		select {
		case <-rd.done:
		case <-ctx.Done():
			return false, ctx.Err()
		}
		if rd.err != nil {
			return false, rd.err
		}
		return !rd.head.Less(pos), nil
	}
}

// headReadTimeout bounds one read of the head (it runs detached from the
// request that started it, which may go away).
const headReadTimeout = 5 * time.Second

func (b *headBound) readHead(ctx context.Context, rd *headRead) {
	ctx, cancel := context.WithTimeout(ctx, headReadTimeout)
	defer cancel()
	rd.head, rd.err = b.read(ctx)
	b.mu.Lock()
	if rd.err == nil && b.head.Less(rd.head) {
		b.head = rd.head
	}
	if rd.err == nil && rd.began.After(b.readAt) {
		b.readAt = rd.began
	}
	b.pending = nil
	b.mu.Unlock()
	close(rd.done)
}

// RegisterAdmin adds the engine's own query routes (the projections'
// status) to r, which must already authenticate.
func (a *API) RegisterAdmin(r *mux.Router) {
	r.Handle("/v1/admin/projections", httpapi.RequireScope(auth.ScopeAdmin)(http.HandlerFunc(a.adminProjections))).
		Methods(http.MethodGet).Name(RouteAdminProjection)
	r.Handle("/v1/admin/audit", httpapi.RequireScope(auth.ScopeAdmin)(http.HandlerFunc(a.adminAudit))).Methods(http.MethodGet).Name(RouteAdminAudit)
}

// Register adds a module's query routes to r, which must already
// authenticate. Each request's query string is parsed strictly, the route
// validates it, the consistency token is waited for on the route's
// projections, and the read's result is the answer.
func (a *API) Register(r *mux.Router, routes ...Route) {
	for _, rt := range routes {
		allowed := append(slices.Clone(rt.Params), "wait")
		r.HandleFunc(rt.Path, func(w http.ResponseWriter, r *http.Request) {
			q, err := params(r, allowed...)
			if err != nil {
				httpapi.WriteError(w, r, err)
				return
			}
			read, err := rt.Prepare(r, q)
			if err != nil {
				httpapi.WriteError(w, r, err)
				return
			}
			if a.cfg.Refuse != nil {
				if err := a.cfg.Refuse(rt.Projections); err != nil {
					httpapi.WriteError(w, r, err)
					return
				}
			}
			src, ok := a.consistent(w, r, q, rt.Projections)
			if !ok {
				return
			}
			out, err := read(src.bind(r.Context()))
			if err != nil && src.replica != nil && db.IsUnavailable(err) && r.Context().Err() == nil {
				// The primary is at least as far as any of its replicas:
				// what the replica was to answer, the primary can.
				src = readSource{fallback: FallbackReplicaError}
				out, err = read(r.Context())
			}
			a.answeredFrom(w, src)
			if err != nil {
				httpapi.WriteError(w, r, err)
				return
			}
			httpapi.WriteJSON(w, http.StatusOK, out)
		}).Methods(http.MethodGet).Name(rt.Name)
	}
}

// BadRequest is the 400 invalid_request answer to a bad parameter.
func BadRequest(msg string) error {
	return httpapi.Errorf(http.StatusBadRequest, httpapi.CodeInvalidRequest, msg)
}

func badRequest(msg string) error { return BadRequest(msg) }

// params parses the query string strictly: only the allowed names, each at
// most once, valid escapes. An empty value counts as absent.
func params(r *http.Request, allowed ...string) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, badRequest("the query string is malformed")
	}
	for k, vs := range q {
		if !slices.Contains(allowed, k) {
			if len(k) > 64 {
				k = k[:64]
			}
			return nil, badRequest(fmt.Sprintf("unknown query parameter %q", k))
		}
		if len(vs) > 1 {
			return nil, badRequest(fmt.Sprintf("query parameter %q is given more than once", k))
		}
	}
	return q, nil
}

// readSource is where a request's read runs: a replica, or (nil) the
// primary, and why not a replica when one was wanted.
type readSource struct {
	replica  *Replica
	fallback string
}

func (s readSource) bind(ctx context.Context) context.Context {
	if s.replica == nil {
		return ctx
	}
	return readmodels.ReadFrom(ctx, s.replica.Pool())
}

// answeredFrom sets ReadSourceHeader and reports the read, when the API
// has replicas.
func (a *API) answeredFrom(w http.ResponseWriter, src readSource) {
	if a.cfg.Replicas == nil {
		return
	}
	v, source := "primary", "primary"
	if src.replica != nil {
		v, source = "replica; name="+src.replica.Name(), "replica"
	}
	if src.fallback != "" {
		v += "; fallback=" + src.fallback
	}
	w.Header().Set(ReadSourceHeader, v)
	if a.cfg.OnRead != nil {
		a.cfg.OnRead(source, src.fallback)
	}
}

// consistent waits, when the request carries a consistency token, until
// every projection behind the route has applied it, on the replica the
// read will run on or on the primary, and returns where the read runs. It
// writes the error and returns false when the request must not go on.
func (a *API) consistent(w http.ResponseWriter, r *http.Request, q url.Values, behind []string) (readSource, bool) {
	wait := a.cfg.DefaultWait
	if v := q.Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > a.cfg.MaxWait {
			httpapi.WriteError(w, r, badRequest(fmt.Sprintf("wait must be a duration such as 2s, above 0 and at most %s", a.cfg.MaxWait)))
			return readSource{}, false
		}
		wait = d
	}
	tokens := r.Header.Values(ConsistencyHeader)
	if len(tokens) == 0 {
		return a.pick(false), true
	}
	if len(tokens) > 1 {
		httpapi.WriteError(w, r, badRequest(ConsistencyHeader+" is given more than once"))
		return readSource{}, false
	}
	placement, epoch, pos, err := event.ParsePlacedToken(tokens[0])
	if err != nil {
		httpapi.WriteError(w, r, badRequest(ConsistencyHeader+" must be the position returned by a command"))
		return readSource{}, false
	}
	if placement != a.cfg.Placement || (placement != "" && epoch != a.cfg.Epoch) {
		return a.pick(false), true // from before a move (or a restore): answered as of now
	}
	arrived := time.Now()
	// Only a wait that must block is checked: a token the projections have
	// applied already is answered at once, without reading the head.
	gate := func(ctx context.Context) (func(), error) {
		if a.cfg.Head != nil {
			ok, err := a.head.within(ctx, pos, arrived)
			if err != nil {
				return nil, err
			}
			if !ok {
				return nil, badRequest(ConsistencyHeader + " is beyond the newest event of the log: send the position a command returned")
			}
		}
		if a.cfg.WaitSlot != nil {
			return a.cfg.WaitSlot(r)
		}
		return nil, nil
	}
	src := a.pick(true)
	if src.replica != nil {
		err := src.replica.WaitGated(r.Context(), min(a.cfg.ReplicaBudget, wait), pos, gate, behind...)
		var herr *httpapi.Error
		switch {
		case err == nil:
			return src, true
		case r.Context().Err() != nil:
			httpapi.WriteError(w, r, err)
			return readSource{}, false
		case errors.As(err, &herr):
			// The gate's answer (a forged token, no wait slot) holds
			// whatever the source.
			httpapi.WriteError(w, r, err)
			return readSource{}, false
		case errors.Is(err, context.DeadlineExceeded):
			src = readSource{fallback: FallbackReplicaBehind}
		default:
			src = readSource{fallback: FallbackReplicaError}
		}
		// The primary gets what is left of the request's wait; at least
		// one look, so a token the primary has applied is answered.
		wait = max(wait-time.Since(arrived), time.Millisecond)
	}
	err = a.wait.WaitGated(r.Context(), wait, pos, gate, behind...)
	switch {
	case err == nil:
		return src, true
	case errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil:
		httpapi.WriteError(w, r, &httpapi.Error{Status: http.StatusServiceUnavailable, Code: httpapi.CodeNotYetConsistent,
			Message: "the read model has not caught up with the consistency token yet: retry", RetryAfter: time.Second})
	default:
		httpapi.WriteError(w, r, err)
	}
	return readSource{}, false
}

// pick chooses the replica a read runs on (none without replicas).
func (a *API) pick(token bool) readSource {
	if a.cfg.Replicas == nil {
		return readSource{}
	}
	if rep := a.cfg.Replicas.Pick(token); rep != nil {
		return readSource{replica: rep}
	}
	return readSource{fallback: FallbackNoReplica}
}

type positionJSON = projections.PositionView

func position(p event.Position) positionJSON { return projections.ViewPosition(p) }

type lagJSON struct {
	Events  int64   `json:"events"`
	Seconds float64 `json:"seconds"`
}

type projectionJSON struct {
	Name       string       `json:"name"`
	Checkpoint positionJSON `json:"checkpoint"`
	Head       positionJSON `json:"head"`
	Lag        lagJSON      `json:"lag"`
	Status     string       `json:"status"`
	LastError  *string      `json:"last_error"`
	ErrorAt    *time.Time   `json:"error_at,omitempty"`
	UpdatedAt  *time.Time   `json:"updated_at"`
}

type projectionsJSON struct {
	Scope       string           `json:"scope"`
	Projections []projectionJSON `json:"projections"`
}

// auditTarget names what a cross-tenant read of this route looks at.
const auditTarget = "GET /v1/admin/projections?scope=all"

func (a *API) adminProjections(w http.ResponseWriter, r *http.Request) {
	q, err := params(r, "scope")
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	claims, ok := httpapi.ClaimsFrom(r.Context())
	if !ok {
		httpapi.WriteError(w, r, httpapi.Errorf(http.StatusUnauthorized, httpapi.CodeUnauthenticated, "a bearer token is required"))
		return
	}
	var list []projections.ProjectionStatus
	scope := q.Get("scope")
	switch scope {
	case "", "tenant":
		scope = "tenant"
		list, err = a.status.Tenant(r.Context(), string(claims.Tenant))
	case "all":
		if !claims.CrossTenant {
			httpapi.WriteError(w, r, httpapi.Errorf(http.StatusForbidden, httpapi.CodeForbidden, "scope=all needs a token with the cross_tenant claim"))
			return
		}
		// Audited before anything is read: no cross-tenant read without
		// its record.
		err = a.models.RecordAudit(r.Context(), readmodels.AuditEntry{Subject: claims.Subject, Action: "read",
			Target: auditTarget, RequestID: httpapi.RequestID(r.Context())})
		if err == nil {
			list, err = a.status.All(r.Context())
		}
	default:
		httpapi.WriteError(w, r, badRequest("scope must be tenant or all"))
		return
	}
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	out := projectionsJSON{Scope: scope, Projections: make([]projectionJSON, 0, len(list))}
	for _, p := range list {
		j := projectionJSON{Name: p.Name, Checkpoint: position(p.Checkpoint), Head: position(p.Head),
			Lag: lagJSON{Events: p.LagEvents, Seconds: p.LagSeconds}, Status: string(p.State)}
		if p.State == projections.StateError {
			msg := p.VisibleError(scope == "all")
			j.LastError = &msg
			if !p.ErrorAt.IsZero() {
				t := p.ErrorAt.UTC()
				j.ErrorAt = &t
			}
		}
		if !p.UpdatedAt.IsZero() {
			t := p.UpdatedAt.UTC()
			j.UpdatedAt = &t
		}
		out.Projections = append(out.Projections, j)
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
}
