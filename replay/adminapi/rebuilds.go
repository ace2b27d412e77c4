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
// It imports replay, projections, domain and httpapi and
// auth; the database is replay's business.
package adminapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/httpapi"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/replay"
)

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
		msg := s.VisibleError(c.all)
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
	if !slices.Contains(a.svc.Names(), name) {
		// As GET of the projection answers: the resource does not exist.
		httpapi.WriteError(w, r, httpapi.Errorf(http.StatusNotFound, httpapi.CodeNotFound, "projection not found"))
		return
	}
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
