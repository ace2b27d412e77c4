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
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/gorilla/mux"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/httpapi"
	"github.com/strata-es/strata/replay"
)

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
	s.HandleFunc("/v1/admin/processes", a.processes).Methods(http.MethodGet).Name(RouteProcesses)
	s.HandleFunc("/v1/admin/processes/{process}/instances/{instance}", a.processInstance).Methods(http.MethodGet).Name(RouteProcessInstance)
}

func badRequest(msg string) error {
	return httpapi.Errorf(http.StatusBadRequest, httpapi.CodeInvalidRequest, msg)
}

// fail writes err, mapping replay's errors (their messages are ours, never
// database text); anything else is httpapi's business (500 or 503).
func fail(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, replay.ErrNoOwner):
		// The request is valid; this process cannot carry it out (another
		// with the owner connection can), as the platform API answers.
		httpapi.WriteError(w, r, &httpapi.Error{Status: http.StatusServiceUnavailable, Code: httpapi.CodeUnavailable,
			Message: replay.ErrNoOwner.Error(), RetryAfter: 2 * time.Second})
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
