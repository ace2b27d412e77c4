// Package adminapi serves the replay operations over HTTP for the admin
// scope, so that a dashboard can drive what `strata replay` does: a
// projection's status, rebuilds (started in the background, progress
// polled), and the dead-letter store's list, show, retry and discard.
//
// Every route needs a token with the admin scope and works on the token's
// tenant only; ?scope=all widens it to every tenant and needs the
// cross_tenant claim. Cross-tenant requests, and every request that
// changes something, are recorded first through the audit function (the
// admin_audit table, in the caller's tenant), like GET
// /v1/admin/projections?scope=all. Another tenant's dead letter answers 404,
// exactly like a missing one.
//
// It imports replay, projections, domain and internal/httpapi and
// internal/auth; the database is replay's business.
package adminapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/mux"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/internal/auth"
	"github.com/strata-es/strata/internal/httpapi"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/replay"
)

// Audit is one record of an admin action.
type Audit struct {
	Subject, Action, Target, RequestID string
}

// AuditFunc records an admin action in the caller's tenant (from ctx);
// an error fails the request before anything is read or changed.
type AuditFunc func(ctx context.Context, a Audit) error

// Route names (metrics and logs use them).
const (
	RouteProjection       = "admin.projection"
	RouteRebuild          = "admin.projection_rebuild"
	RouteRebuildStatus    = "admin.projection_rebuild_status"
	RouteDeadLetters      = "admin.dead_letters"
	RouteDeadLetter       = "admin.dead_letter"
	RouteDeadLetterRetry  = "admin.dead_letter_retry"
	RouteDeadLetterDrop   = "admin.dead_letter_discard"
	RouteDeadLettersRetry = "admin.dead_letters_retry"
)

// Error codes beyond httpapi's.
const (
	CodeNothingToDo = "nothing_to_do"
	CodeBusy        = "busy"
)

// API serves the routes.
type API struct {
	svc   *replay.Service
	audit AuditFunc
	bg    context.Context // ends with the server: background rebuilds stop (and resume later)

	mu   sync.Mutex
	jobs map[jobKey]*job
}

// New returns the API. bg bounds background rebuilds (cancel it on
// shutdown: an interrupted rebuild keeps its shadow and resumes when
// started again).
func New(svc *replay.Service, audit AuditFunc, bg context.Context) *API {
	return &API{svc: svc, audit: audit, bg: bg, jobs: map[jobKey]*job{}}
}

// Register adds the routes to r, which must already authenticate.
func (a *API) Register(r *mux.Router) {
	s := r.NewRoute().Subrouter()
	s.Use(httpapi.RequireScope(auth.ScopeAdmin))
	s.HandleFunc("/v1/admin/projections/{name}", a.projection).Methods(http.MethodGet).Name(RouteProjection)
	s.HandleFunc("/v1/admin/projections/{name}/rebuild", a.startRebuild).Methods(http.MethodPost).Name(RouteRebuild)
	s.HandleFunc("/v1/admin/projections/{name}/rebuild", a.rebuildStatus).Methods(http.MethodGet).Name(RouteRebuildStatus)
	s.HandleFunc("/v1/admin/dead-letters", a.list).Methods(http.MethodGet).Name(RouteDeadLetters)
	s.HandleFunc("/v1/admin/dead-letters/retry", a.retryMany).Methods(http.MethodPost).Name(RouteDeadLettersRetry)
	s.HandleFunc("/v1/admin/dead-letters/{id:[0-9]+}", a.show).Methods(http.MethodGet).Name(RouteDeadLetter)
	s.HandleFunc("/v1/admin/dead-letters/{id:[0-9]+}/retry", a.retryOne).Methods(http.MethodPost).Name(RouteDeadLetterRetry)
	s.HandleFunc("/v1/admin/dead-letters/{id:[0-9]+}/discard", a.discard).Methods(http.MethodPost).Name(RouteDeadLetterDrop)
}

func badRequest(msg string) error {
	return httpapi.Errorf(http.StatusBadRequest, httpapi.CodeInvalidRequest, msg)
}

// fail writes err, mapping replay's errors (their messages are ours, never
// database text); anything else is httpapi's business (500 or 503).
func fail(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, replay.ErrInvalid):
		httpapi.WriteError(w, r, badRequest(err.Error()))
	case errors.Is(err, replay.ErrNotFound):
		httpapi.WriteError(w, r, httpapi.Errorf(http.StatusNotFound, httpapi.CodeNotFound, "dead letter not found"))
	case errors.Is(err, replay.ErrNothingToDo):
		httpapi.WriteError(w, r, httpapi.Errorf(http.StatusConflict, CodeNothingToDo, err.Error()))
	case errors.Is(err, replay.ErrBusy):
		httpapi.WriteError(w, r, &httpapi.Error{Status: http.StatusConflict, Code: CodeBusy, Message: err.Error(), RetryAfter: 5 * time.Second})
	default:
		httpapi.WriteError(w, r, err)
	}
}

// params parses the query string strictly: only the allowed names, each at
// most once.
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

// caller is who asks and over which tenants.
type caller struct {
	claims auth.Claims
	// tenant is the only tenant the request may see; "" with all.
	tenant string
	all    bool
}

// who resolves ?scope= (tenant by default; all needs the cross_tenant
// claim) and records the request when it crosses tenants or changes
// something (mutating).
func (a *API) who(w http.ResponseWriter, r *http.Request, q url.Values, action string, mutating bool) (caller, bool) {
	claims, ok := httpapi.ClaimsFrom(r.Context())
	if !ok {
		httpapi.WriteError(w, r, httpapi.Errorf(http.StatusUnauthorized, httpapi.CodeUnauthenticated, "a bearer token is required"))
		return caller{}, false
	}
	c := caller{claims: claims, tenant: string(claims.Tenant)}
	switch q.Get("scope") {
	case "", "tenant":
	case "all":
		if !claims.CrossTenant {
			httpapi.WriteError(w, r, httpapi.Errorf(http.StatusForbidden, httpapi.CodeForbidden, "scope=all needs a token with the cross_tenant claim"))
			return c, false
		}
		c.tenant, c.all = "", true
	default:
		httpapi.WriteError(w, r, badRequest("scope must be tenant or all"))
		return c, false
	}
	if c.all || mutating {
		target := r.Method + " " + r.URL.Path
		if c.all {
			target += "?scope=all"
		}
		if err := a.audit(r.Context(), Audit{Subject: claims.Subject, Action: action, Target: target, RequestID: httpapi.RequestID(r.Context())}); err != nil {
			httpapi.WriteError(w, r, err)
			return c, false
		}
	}
	return c, true
}

// actor is what the dead-letter store records as who acted.
func (c caller) actor() string { return "api:" + c.claims.Subject + "@" + string(c.claims.Tenant) }

// ----- projections -----

// Position is a log position as the API shows it.
type Position struct {
	Token string `json:"token"`
	Major uint64 `json:"major"`
	Minor uint64 `json:"minor"`
}

func position(p event.Position) Position { return Position{p.Token(), p.Major, p.Minor} }

// ProjectionStatus is GET /v1/admin/projections/{name}.
type ProjectionStatus struct {
	Name          string        `json:"name"`
	Scope         string        `json:"scope"`
	State         string        `json:"state"`
	Checkpoint    Position      `json:"checkpoint"`
	Head          Position      `json:"head"`
	LagEvents     int64         `json:"lag_events"`
	LagSeconds    float64       `json:"lag_seconds"`
	ParkedStreams int64         `json:"parked_streams"`
	DeadLetters   int64         `json:"dead_letters"`
	LastError     *string       `json:"last_error"`
	Rebuild       *RebuildState `json:"rebuild"`
	Job           *RebuildJob   `json:"job,omitempty"`
	Leftovers     []string      `json:"leftover_tables,omitempty"`
}

// RebuildState is a rebuild in progress or interrupted (cross-tenant view).
type RebuildState struct {
	Scope          string   `json:"scope"`
	Running        bool     `json:"running"`
	Checkpoint     Position `json:"checkpoint"`
	LagEvents      int64    `json:"lag_events"`
	PendingIndexes int      `json:"pending_indexes"`
}

// tenantError replaces a projection's error in a tenant's view (it may be
// about another tenant's event).
const tenantError = "the projection cannot apply an event and retries it; details are in the cross-tenant view"

func (a *API) projection(w http.ResponseWriter, r *http.Request) {
	q, err := params(r, "scope")
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	c, ok := a.who(w, r, q, "read", false)
	if !ok {
		return
	}
	name := projectionName(r)
	var list []replay.Status
	if c.all {
		list, err = a.svc.Status(r.Context())
	} else {
		list, err = a.svc.TenantStatus(r.Context(), c.tenant)
	}
	if err != nil {
		fail(w, r, err)
		return
	}
	i := slices.IndexFunc(list, func(s replay.Status) bool { return s.Name == name })
	if i < 0 {
		httpapi.WriteError(w, r, httpapi.Errorf(http.StatusNotFound, httpapi.CodeNotFound, "projection not found"))
		return
	}
	s := list[i]
	out := ProjectionStatus{Name: s.Name, Scope: map[bool]string{true: "all", false: "tenant"}[c.all], State: string(s.State),
		Checkpoint: position(s.Checkpoint), Head: position(s.Head), LagEvents: s.LagEvents, LagSeconds: s.LagSeconds,
		ParkedStreams: s.ParkedStreams, DeadLetters: s.ParkedLetters}
	if s.State == projections.StateError {
		msg := s.LastError
		if !c.all || msg == "" {
			msg = tenantError
		}
		out.LastError = &msg
	}
	if c.all {
		if rb := s.Rebuild; rb != nil {
			out.Rebuild = &RebuildState{Scope: rb.Scope, Running: rb.Active, Checkpoint: position(rb.Checkpoint), LagEvents: rb.LagEvents, PendingIndexes: rb.PendingIndexes}
		}
		out.Leftovers = s.Leftovers
	}
	out.Job = a.jobView(name, c)
	httpapi.WriteJSON(w, http.StatusOK, out)
}

// ----- rebuilds -----

type jobKey struct{ projection, tenant string } // tenant "" for a rebuild of every tenant

type job struct {
	mu       sync.Mutex
	view     RebuildJob
	cancel   context.CancelFunc
	finished bool
}

// RebuildJob is a rebuild started over HTTP in this process.
type RebuildJob struct {
	Projection string     `json:"projection"`
	Scope      string     `json:"scope"` // all, tenant or from
	State      string     `json:"state"` // running, done, failed
	Phase      string     `json:"phase"`
	Done       int64      `json:"done"`
	Total      int64      `json:"total"`
	Rate       float64    `json:"events_per_second"`
	ETASeconds float64    `json:"eta_seconds"`
	StartedAt  time.Time  `json:"started_at"`
	EndedAt    *time.Time `json:"ended_at"`
	Checkpoint *Position  `json:"checkpoint"`
	Error      string     `json:"error,omitempty"`
	Notes      []string   `json:"notes,omitempty"`
}

type rebuildRequest struct {
	From   string `json:"from"`
	DryRun bool   `json:"dry_run"`
}

// decodeOptional decodes a JSON body when there is one.
func decodeOptional(w http.ResponseWriter, r *http.Request, dst any) error {
	body, err := httpapi.ReadBody(w, r)
	if err != nil || len(body) == 0 {
		return err
	}
	return httpapi.DecodeStrict(body, dst)
}

// startRebuild starts a rebuild of one projection in the background: of
// the caller's tenant, or of every tenant with scope=all. A dry run
// answers the plan at once. 202 with the job; 409 busy when one of the
// same slot runs already, or another the plan shows stands in the way.
func (a *API) startRebuild(w http.ResponseWriter, r *http.Request) {
	q, err := params(r, "scope")
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	var req rebuildRequest
	if err := decodeOptional(w, r, &req); err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	c, ok := a.who(w, r, q, "rebuild", !req.DryRun)
	if !ok {
		return
	}
	name := projectionName(r)
	o := replay.RebuildOptions{Projections: []string{name}, Tenant: c.tenant, Actor: c.actor()}
	if req.From != "" {
		pos, err := event.ParseToken(req.From)
		if err != nil {
			httpapi.WriteError(w, r, badRequest("from must be a consistency token"))
			return
		}
		o.From = &pos
	}
	if req.DryRun {
		plan, err := a.svc.Plan(r.Context(), o)
		if err != nil {
			fail(w, r, err)
			return
		}
		httpapi.WriteJSON(w, http.StatusOK, planView(plan, c))
		return
	}
	// Validate before starting, and answer a conflict the plan already
	// shows (a rebuild of the same slot running, an operator's rebuild of
	// every tenant in progress) now, not as a failed job later.
	plan, err := a.svc.Plan(r.Context(), o)
	if err != nil {
		fail(w, r, err)
		return
	}
	for _, p := range plan.Projections {
		if p.Conflict != "" {
			fail(w, r, fmt.Errorf("%w: %s", replay.ErrBusy, p.Conflict))
			return
		}
	}
	if o.From == nil { // shadow tables need the owner connection
		if err := a.svc.CheckOwner(r.Context()); err != nil {
			fail(w, r, err)
			return
		}
	}
	key := jobKey{name, c.tenant}
	a.mu.Lock()
	if j, ok := a.jobs[key]; ok && !j.isFinished() {
		a.mu.Unlock()
		fail(w, r, fmt.Errorf("%w: a rebuild of %s is running already", replay.ErrBusy, name))
		return
	}
	ctx, cancel := context.WithCancel(a.bg)
	j := &job{cancel: cancel, view: RebuildJob{Projection: name, Scope: scopeName(o), State: "running", Phase: string(replay.PhaseBuild), StartedAt: time.Now().UTC()}}
	a.jobs[key] = j
	a.mu.Unlock()
	o.Progress = func(p replay.Progress) {
		j.mu.Lock()
		j.view.Phase, j.view.Done, j.view.Total, j.view.Rate, j.view.ETASeconds = string(p.Phase), p.Done, p.Total, p.Rate, p.ETA.Seconds()
		j.mu.Unlock()
	}
	go func() {
		defer cancel()
		res, err := a.svc.Rebuild(ctx, o)
		j.mu.Lock()
		defer j.mu.Unlock()
		now := time.Now().UTC()
		j.view.EndedAt, j.finished = &now, true
		if err != nil {
			// The job shows a summary and points at the server log: the
			// details (database text, names of tables) go there.
			a.svc.Logger().Error("rebuild started over HTTP failed", "projection", name, "scope", scopeName(o), "tenant", o.Tenant,
				"actor", o.Actor, "error", err.Error())
			j.view.State, j.view.Error = "failed", publicError(err)
			return
		}
		j.view.State, j.view.Phase = "done", string(replay.PhaseDone)
		for _, p := range res.Projections {
			pos := position(p.Checkpoint)
			j.view.Checkpoint, j.view.Notes = &pos, p.Notes
		}
	}()
	httpapi.WriteJSON(w, http.StatusAccepted, j.snapshot())
}

func scopeName(o replay.RebuildOptions) string {
	switch {
	case o.From != nil:
		return "from"
	case o.Tenant != "":
		return "tenant"
	}
	return "all"
}

// publicError keeps the messages of replay's own errors and hides the rest.
func publicError(err error) string {
	for _, e := range []error{replay.ErrInvalid, replay.ErrBusy, replay.ErrNothingToDo, replay.ErrNotFound} {
		if errors.Is(err, e) {
			return err.Error()
		}
	}
	if errors.Is(err, context.Canceled) {
		return "interrupted (the server stopped); start it again to resume"
	}
	return "the rebuild failed; the details are in the server log and `strata replay status`; start it again to resume"
}

func (j *job) isFinished() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.finished
}

func (j *job) snapshot() RebuildJob {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.view
}

// jobView returns the caller's job for a projection, if any.
func (a *API) jobView(name string, c caller) *RebuildJob {
	a.mu.Lock()
	j, ok := a.jobs[jobKey{name, c.tenant}]
	a.mu.Unlock()
	if !ok {
		return nil
	}
	v := j.snapshot()
	return &v
}

// rebuildStatus answers the caller's rebuild job of a projection (in this
// process); 404 when there is none.
func (a *API) rebuildStatus(w http.ResponseWriter, r *http.Request) {
	q, err := params(r, "scope")
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	c, ok := a.who(w, r, q, "read", false)
	if !ok {
		return
	}
	v := a.jobView(projectionName(r), c)
	if v == nil {
		httpapi.WriteError(w, r, httpapi.Errorf(http.StatusNotFound, httpapi.CodeNotFound, "no rebuild of this projection was started here"))
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, v)
}

// PlanView is a dry run's answer.
type PlanView struct {
	DryRun          bool             `json:"dry_run"`
	Head            Position         `json:"head"`
	EstimateSeconds float64          `json:"estimate_seconds"`
	Projections     []replay.Planned `json:"projections"`
}

func planView(p replay.Plan, c caller) PlanView {
	out := PlanView{DryRun: true, Head: position(p.Head), EstimateSeconds: p.Estimate.Seconds(), Projections: p.Projections}
	if !c.all {
		for i := range out.Projections {
			out.Projections[i].Events = 0 // the whole log's size is not the tenant's business
		}
	}
	return out
}

// ----- dead letters -----

// Letter is a dead letter as the API shows it.
type Letter struct {
	ID            int64           `json:"id"`
	Projection    string          `json:"projection"`
	Tenant        string          `json:"tenant"`
	Stream        string          `json:"stream"`
	Version       int64           `json:"version"`
	EventID       string          `json:"event_id"`
	Position      string          `json:"position"`
	Type          string          `json:"type"`
	SchemaVersion int             `json:"schema_version"`
	Data          json.RawMessage `json:"data"`
	Metadata      event.Metadata  `json:"metadata"`
	RecordedAt    time.Time       `json:"recorded_at"`
	Error         string          `json:"error"`
	Attempts      int             `json:"attempts"`
	FirstFailedAt *time.Time      `json:"first_failed_at"`
	LastFailedAt  *time.Time      `json:"last_failed_at"`
	NextAttemptAt *time.Time      `json:"next_attempt_at"`
	Head          bool            `json:"head"`
	Status        string          `json:"status"`
	ParkedAt      time.Time       `json:"parked_at"`
	ResolvedAt    *time.Time      `json:"resolved_at"`
	ResolvedBy    string          `json:"resolved_by,omitempty"`
	Reason        string          `json:"reason,omitempty"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// LetterView renders a dead letter with its full error text, for operators
// (the CLI's --json and the cross-tenant view); a tenant's view goes
// through letterView.
func LetterView(l projections.DeadLetter) Letter {
	data := l.Event.Data
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	return Letter{ID: l.ID, Projection: l.Projection, Tenant: l.Tenant, Stream: l.Event.Stream, Version: l.Event.Version,
		EventID: l.Event.ID, Position: l.Event.Position.Token(), Type: l.Event.Type, SchemaVersion: l.Event.SchemaVersion,
		Data: data, Metadata: l.Event.Metadata, RecordedAt: l.Event.RecordedAt.UTC(), Error: l.Error, Attempts: l.Attempts,
		FirstFailedAt: timePtr(l.FirstFailedAt), LastFailedAt: timePtr(l.LastFailedAt), NextAttemptAt: timePtr(l.NextAttemptAt),
		Head: l.Head, Status: string(l.Status), ParkedAt: l.ParkedAt.UTC(), ResolvedAt: timePtr(l.ResolvedAt),
		ResolvedBy: l.ResolvedBy, Reason: l.Reason}
}

// tenantLetterError replaces a dead letter's error in a tenant's view when
// it holds PostgreSQL's text (e.g. "ERROR: bigint out of range (SQLSTATE
// 22003)"): database error text never reaches a client (ARCHITECTURE
// decision 3), and it can name tables, constraints and values. The
// SQLSTATE code stays, so that the tenant can tell one failure from
// another; the cross-tenant view and `strata replay dlq show` keep the
// full text. Errors of the projection's own code (a missing row, an
// unexpected event, a consumer's reason) carry no database text and are
// shown as they are, as before.
const tenantLetterError = "the projection's database statement failed on this event%s; the details are in the cross-tenant view and `strata replay dlq show`"

// sqlState finds the code pgconn.PgError.Error() ends its text with.
var sqlState = regexp.MustCompile(`\(SQLSTATE ([0-9A-Z]{5})\)`)

// publicLetterError is a letter's error as a tenant's view shows it.
func publicLetterError(text string) string {
	if !strings.Contains(text, "SQLSTATE") {
		return text
	}
	code := ""
	if m := sqlState.FindStringSubmatch(text); m != nil {
		code = " (SQLSTATE " + m[1] + ")"
	}
	return fmt.Sprintf(tenantLetterError, code)
}

// letterView renders a letter for c: sanitized unless c sees every tenant.
func letterView(l projections.DeadLetter, c caller) Letter {
	v := LetterView(l)
	if !c.all {
		v.Error = publicLetterError(v.Error)
	}
	return v
}

func (a *API) list(w http.ResponseWriter, r *http.Request) {
	q, err := params(r, "scope", "projection", "stream", "status", "limit")
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	o := replay.ListOptions{Stream: q.Get("stream"), Limit: 100}
	if p := q.Get("projection"); p != "" {
		o.Projections = []string{p}
	}
	switch s := q.Get("status"); s {
	case "":
	case "all":
		o.Statuses = []projections.LetterStatus{}
	default:
		o.Statuses = []projections.LetterStatus{projections.LetterStatus(s)}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			httpapi.WriteError(w, r, badRequest("limit must be an integer from 1 to 1000"))
			return
		}
		o.Limit = n
	}
	c, ok := a.who(w, r, q, "read", false)
	if !ok {
		return
	}
	o.Tenant = c.tenant
	letters, err := a.svc.DeadLetters(r.Context(), o)
	if err != nil {
		fail(w, r, err)
		return
	}
	out := make([]Letter, 0, len(letters))
	for _, l := range letters {
		out = append(out, letterView(l, c))
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"scope": map[bool]string{true: "all", false: "tenant"}[c.all], "dead_letters": out})
}

// projectionName is the {name} of a projection route, decoded once (the
// router matches on the escaped path). A malformed escape, which net/http
// refuses before routing anyway, is left as it is: it names no projection.
func projectionName(r *http.Request) string {
	name, err := httpapi.PathVar(r, "name")
	if err != nil {
		return mux.Vars(r)["name"]
	}
	return name
}

func letterIDOf(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(mux.Vars(r)["id"], 10, 64)
	if err != nil || id <= 0 {
		return 0, badRequest("the dead letter ID must be a positive number")
	}
	return id, nil
}

func (a *API) show(w http.ResponseWriter, r *http.Request) {
	q, err := params(r, "scope")
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	id, err := letterIDOf(r)
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	c, ok := a.who(w, r, q, "read", false)
	if !ok {
		return
	}
	l, err := a.svc.DeadLetter(r.Context(), c.tenant, id)
	if err != nil {
		fail(w, r, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, letterView(l, c))
}

// RetriedStream is one stream of a retry's answer.
type RetriedStream struct {
	Projection    string     `json:"projection"`
	Tenant        string     `json:"tenant"`
	Stream        string     `json:"stream"`
	Applied       []int64    `json:"applied"`
	Unparked      bool       `json:"unparked"`
	Failed        *Letter    `json:"failed"`
	NextAttemptAt *time.Time `json:"next_attempt_at"`
}

func retryView(rep replay.RetryReport, c caller) map[string]any {
	out := []RetriedStream{}
	for _, s := range rep.Streams {
		v := RetriedStream{Projection: s.Projection, Tenant: s.Tenant, Stream: s.Stream, Applied: s.Applied, Unparked: s.Unparked,
			NextAttemptAt: timePtr(s.NextAttemptAt)}
		if v.Applied == nil {
			v.Applied = []int64{}
		}
		if s.Failed != nil {
			f := letterView(*s.Failed, c)
			v.Failed = &f
		}
		out = append(out, v)
	}
	return map[string]any{"streams": out, "applied": rep.Applied(), "still_parked": len(rep.Failed())}
}

// retryOne retries the stream of one dead letter: 200 with what happened
// (a letter failing again is reported, not an HTTP error).
func (a *API) retryOne(w http.ResponseWriter, r *http.Request) {
	q, err := params(r, "scope")
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	id, err := letterIDOf(r)
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	c, ok := a.who(w, r, q, "retry", true)
	if !ok {
		return
	}
	rep, err := a.svc.Retry(r.Context(), replay.RetrySpec{ID: id, Tenant: c.tenant, Actor: c.actor()})
	if err != nil {
		fail(w, r, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, retryView(rep, c))
}

type retryRequest struct {
	Projection string `json:"projection"`
	Stream     string `json:"stream"`
	All        bool   `json:"all"`
}

// retryMany retries one stream by name or every parked stream (of the
// caller's tenant, or of all with scope=all).
func (a *API) retryMany(w http.ResponseWriter, r *http.Request) {
	q, err := params(r, "scope")
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	var req retryRequest
	if err := httpapi.DecodeJSON(w, r, &req); err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	if (req.Stream == "") == !req.All {
		httpapi.WriteError(w, r, badRequest(`name a "stream" or set "all": true`))
		return
	}
	c, ok := a.who(w, r, q, "retry", true)
	if !ok {
		return
	}
	spec := replay.RetrySpec{Stream: req.Stream, All: req.All, Tenant: c.tenant, Actor: c.actor()}
	if req.Projection != "" {
		spec.Projections = []string{req.Projection}
	}
	rep, err := a.svc.Retry(r.Context(), spec)
	if err != nil {
		fail(w, r, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, retryView(rep, c))
}

type discardRequest struct {
	Reason string `json:"reason"`
}

// discard marks a dead letter discarded with the caller and the reason.
func (a *API) discard(w http.ResponseWriter, r *http.Request) {
	q, err := params(r, "scope")
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	id, err := letterIDOf(r)
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	var req discardRequest
	if err := httpapi.DecodeJSON(w, r, &req); err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	if req.Reason == "" || len(req.Reason) > 1000 {
		httpapi.WriteError(w, r, badRequest("reason is required (at most 1000 bytes): a discard is recorded, never silent"))
		return
	}
	c, ok := a.who(w, r, q, "discard", true)
	if !ok {
		return
	}
	l, err := a.svc.Discard(r.Context(), c.tenant, id, c.actor(), req.Reason)
	if err != nil {
		fail(w, r, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, letterView(l, c))
}
