package platformapi

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/gorilla/mux"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/httpapi"
	"github.com/strata-es/strata/tenancy"
)

// Route names of the erasure.
const (
	RouteErase   = "platform.tenant.erase"
	RouteErasure = "platform.tenant.erasure"
)

// eraseJobs runs erasures in the background (tenantJobs).
type eraseJobs struct {
	tenantJobs
	eraser *tenancy.Eraser
}

// SetEraser enables the erasure routes; ctx bounds the background jobs.
// Without it they answer 503.
func (a *API) SetEraser(ctx context.Context, e *tenancy.Eraser, logger *slog.Logger) {
	a.erase = &eraseJobs{tenantJobs: newBackground(ctx, logger), eraser: e}
}

func (a *API) registerErasure(s *mux.Router) {
	s.HandleFunc("/v1/platform/tenants/{id}/erase", a.startErase).Methods(http.MethodPost).Name(RouteErase)
	s.HandleFunc("/v1/platform/tenants/{id}/erasure", a.erasure).Methods(http.MethodGet).Name(RouteErasure)
}

func (a *API) eraseReady(w http.ResponseWriter, r *http.Request) (tenancy.Actor, domain.TenantID, bool) {
	actor, ok := a.ready(w, r)
	if !ok {
		return actor, "", false
	}
	if a.erase == nil {
		httpapi.WriteError(w, r, &httpapi.Error{Status: http.StatusServiceUnavailable, Code: httpapi.CodeUnavailable,
			Message: "this process does not run erasures: use `strata tenants erase`"})
		return actor, "", false
	}
	id, ok := pathTenant(w, r)
	return actor, id, ok
}

// startErase starts (or resumes) the tenant's erasure as a job and answers
// 202 with the workflow's state; GET .../erasure follows it.
func (a *API) startErase(w http.ResponseWriter, r *http.Request) {
	actor, id, ok := a.eraseReady(w, r)
	if !ok {
		return
	}
	var req reasonRequest
	if err := httpapi.DecodeJSON(w, r, &req); err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	state, err := a.erase.eraser.Begin(r.Context(), actor, id, req.Reason)
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	if state.NextStep() != "" {
		a.erase.start(id, "erasure", func(ctx context.Context) error {
			_, err := a.erase.eraser.Run(ctx, state)
			return err
		})
	}
	httpapi.WriteJSON(w, http.StatusAccepted, state)
}

func (a *API) erasure(w http.ResponseWriter, r *http.Request) {
	actor, id, ok := a.eraseReady(w, r)
	if !ok {
		return
	}
	state, err := a.erase.eraser.Status(r.Context(), actor, id)
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, state)
}
