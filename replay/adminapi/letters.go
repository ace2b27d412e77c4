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
	"net/http"
	"strconv"

	"github.com/gorilla/mux"

	"github.com/strata-es/strata/httpapi"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/replay"
)

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
