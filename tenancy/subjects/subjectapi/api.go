// Package subjectapi serves a tenant admin's erasures of data subjects
// (docs/personal-data.md, "Forget a subject"): POST
// /v1/admin/subjects/erase starts (or resumes) one in the background and
// answers with where it is; GET /v1/admin/subject-erasures/{id} follows
// it to its receipt. The subject's ID travels in the body, never in a
// path that access logs and traces keep.
package subjectapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/gorilla/mux"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/httpapi"
	"github.com/strata-es/strata/internal/background"
	"github.com/strata-es/strata/tenancy/subjects"
)

// Route names.
const (
	RouteErase   = "admin.subject_erase"
	RouteErasure = "admin.subject_erasure"
)

// AuditFunc records a tenant admin's call (admin_audit).
type AuditFunc func(ctx context.Context, subject, action, target, requestID string) error

// API serves the routes.
type API struct {
	eraser *subjects.Eraser // nil: this process cannot erase (no owner connection): 503
	audit  AuditFunc
	jobs   *background.Runner // by tenant and erasure ID
}

// New returns the API; eraser may be nil (the routes then answer 503).
// Erasures run on bg: a shutdown stops one between steps, and a POST
// resumes it.
func New(eraser *subjects.Eraser, audit AuditFunc, bg context.Context, logger *slog.Logger) *API {
	return &API{eraser: eraser, audit: audit, jobs: background.New(bg, logger)}
}

// Register adds the routes to r, which must already authenticate; they
// need the admin scope.
func (a *API) Register(r *mux.Router) {
	s := r.NewRoute().Subrouter()
	s.Use(httpapi.RequireScope(auth.ScopeAdmin))
	s.HandleFunc("/v1/admin/subjects/erase", a.erase).Methods(http.MethodPost).Name(RouteErase)
	s.HandleFunc("/v1/admin/subject-erasures/{id}", a.status).Methods(http.MethodGet).Name(RouteErasure)
}

type eraseRequest struct {
	Subject string `json:"subject"`
	Reason  string `json:"reason"`
}

var errNoOwner = &httpapi.Error{Status: http.StatusServiceUnavailable, Code: httpapi.CodeUnavailable,
	Message: "this process has no owner connection (DATABASE_URL): another serving process, or `strata subjects erase`, can erase", RetryAfter: 2 * time.Second}

func (a *API) erase(w http.ResponseWriter, r *http.Request) {
	var req eraseRequest
	if err := httpapi.DecodeJSON(w, r, &req); err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	if a.eraser == nil {
		httpapi.WriteError(w, r, errNoOwner)
		return
	}
	claims, _ := httpapi.ClaimsFrom(r.Context())
	sr := subjects.Request{Tenant: claims.Tenant, Subject: req.Subject, Reason: req.Reason, Actor: "api:" + claims.Subject}
	st, err := a.eraser.Begin(r.Context(), sr)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if err := a.audit(r.Context(), claims.Subject, "subject.erase", "subject erasure "+st.ErasureID, httpapi.RequestID(r.Context())); err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	if !st.Finished {
		a.start(string(claims.Tenant)+"/"+st.ErasureID, sr)
	}
	httpapi.WriteJSON(w, http.StatusAccepted, st)
}

// start runs the erasure in the background unless it runs here already.
func (a *API) start(key string, req subjects.Request) {
	a.jobs.Start(key, "subject erasure", func(ctx context.Context) error {
		_, err := a.eraser.Erase(ctx, req)
		return err
	}, "tenant", string(req.Tenant))
}

func (a *API) status(w http.ResponseWriter, r *http.Request) {
	if a.eraser == nil {
		httpapi.WriteError(w, r, errNoOwner)
		return
	}
	id, err := httpapi.PathVar(r, "id")
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	claims, _ := httpapi.ClaimsFrom(r.Context())
	st, err := a.eraser.Status(r.Context(), claims.Tenant, id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, st)
}

func writeError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, subjects.ErrInvalid):
		httpapi.WriteError(w, r, httpapi.Errorf(http.StatusBadRequest, httpapi.CodeInvalidRequest, err.Error()))
	case errors.Is(err, subjects.ErrNotFound):
		httpapi.WriteError(w, r, httpapi.Errorf(http.StatusNotFound, httpapi.CodeNotFound, "subject erasure not found"))
	default:
		httpapi.WriteError(w, r, err)
	}
}
