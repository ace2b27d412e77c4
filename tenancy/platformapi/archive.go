package platformapi

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/gorilla/mux"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/httpapi"
	"github.com/strata-es/strata/tenancy"
	"github.com/strata-es/strata/tenancy/archive"
)

// Route names of the archive.
const (
	RouteArchive       = "platform.tenant.archive"
	RouteArchiveStatus = "platform.tenant.archive_status"
	RouteRehydrate     = "platform.tenant.rehydrate"
)

// archiveJobs runs archives and re-hydrations in the background
// (tenantJobs).
type archiveJobs struct {
	tenantJobs
	archiver *archive.Archiver
}

// SetArchiver enables the archive routes; ctx bounds the background jobs.
// Without it (no archive store configured) they answer 503.
func (a *API) SetArchiver(ctx context.Context, ar *archive.Archiver, logger *slog.Logger) {
	a.archive = &archiveJobs{tenantJobs: newBackground(ctx, logger), archiver: ar}
}

func (a *API) registerArchive(s *mux.Router) {
	s.HandleFunc("/v1/platform/tenants/{id}/archive", a.startArchive).Methods(http.MethodPost).Name(RouteArchive)
	s.HandleFunc("/v1/platform/tenants/{id}/archive", a.archiveStatus).Methods(http.MethodGet).Name(RouteArchiveStatus)
	s.HandleFunc("/v1/platform/tenants/{id}/rehydrate", a.startRehydrate).Methods(http.MethodPost).Name(RouteRehydrate)
}

func (a *API) archiveReady(w http.ResponseWriter, r *http.Request) (tenancy.Actor, domain.TenantID, bool) {
	actor, ok := a.ready(w, r)
	if !ok {
		return actor, "", false
	}
	if a.archive == nil {
		httpapi.WriteError(w, r, &httpapi.Error{Status: http.StatusServiceUnavailable, Code: httpapi.CodeUnavailable,
			Message: "no archive store is configured (STRATA_ARCHIVE_S3_ENDPOINT, STRATA_ARCHIVE_S3_BUCKET)"})
		return actor, "", false
	}
	id, ok := pathTenant(w, r)
	return actor, id, ok
}

// startArchive starts (or resumes) the tenant's archive as a job and
// answers 202 with its record; GET .../archive follows it.
func (a *API) startArchive(w http.ResponseWriter, r *http.Request) {
	actor, id, ok := a.archiveReady(w, r)
	if !ok {
		return
	}
	var req reasonRequest
	if err := httpapi.DecodeJSON(w, r, &req); err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	rec, err := a.archive.archiver.Begin(r.Context(), actor, id, req.Reason)
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	if rec.Phase == archive.PhaseArchiving {
		a.archive.start(id, "archive", func(ctx context.Context) error {
			_, err := a.archive.archiver.Resume(ctx, id)
			return err
		})
	}
	httpapi.WriteJSON(w, http.StatusAccepted, rec)
}

// startRehydrate starts (or resumes) the tenant's re-hydration as a job
// and answers 202 with its record as it is now.
func (a *API) startRehydrate(w http.ResponseWriter, r *http.Request) {
	actor, id, ok := a.archiveReady(w, r)
	if !ok {
		return
	}
	rec, err := a.archive.archiver.Status(r.Context(), id)
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	if rec.Phase == archive.PhaseArchiving {
		httpapi.WriteError(w, r, fmt.Errorf("%w: the archive of %s is not finished (next step %s): POST .../archive to finish it first", domain.ErrRejected, id, rec.NextStep()))
		return
	}
	if rec.Phase != archive.PhaseRehydrated {
		a.archive.start(id, "re-hydration", func(ctx context.Context) error {
			_, err := a.archive.archiver.Rehydrate(ctx, actor, id)
			return err
		})
	}
	httpapi.WriteJSON(w, http.StatusAccepted, rec)
}

func (a *API) archiveStatus(w http.ResponseWriter, r *http.Request) {
	_, id, ok := a.archiveReady(w, r)
	if !ok {
		return
	}
	rec, err := a.archive.archiver.Status(r.Context(), id)
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, rec)
}
