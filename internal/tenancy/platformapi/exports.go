package platformapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/gorilla/mux"

	"github.com/strata-es/strata/internal/httpapi"
	"github.com/strata-es/strata/internal/tenancy/portability"
)

// Route names of the export jobs.
const (
	RouteExportStart   = "platform.tenant.exports.start"
	RouteExportShow    = "platform.tenant.export"
	RouteExportArchive = "platform.tenant.export.archive"
)

// WithExports serves the export jobs with jobs (nil: the routes answer 503,
// as every platform route does without the owner connection).
func (a *API) WithExports(jobs *portability.Jobs) *API {
	a.exports = jobs
	return a
}

func (a *API) registerExports(s *mux.Router) {
	s.HandleFunc("/v1/platform/tenants/{id}/exports", a.exportStart).Methods(http.MethodPost).Name(RouteExportStart)
	s.HandleFunc("/v1/platform/tenants/{id}/exports/{job}", a.exportShow).Methods(http.MethodGet).Name(RouteExportShow)
	s.HandleFunc("/v1/platform/tenants/{id}/exports/{job}/archive", a.exportArchive).Methods(http.MethodGet).Name(RouteExportArchive)
}

func (a *API) exportsReady(w http.ResponseWriter, r *http.Request) bool {
	if a.exports == nil {
		httpapi.WriteError(w, r, &httpapi.Error{Status: http.StatusServiceUnavailable, Code: httpapi.CodeUnavailable,
			Message: "this process has no owner connection (DATABASE_URL): tenant exports run elsewhere", RetryAfter: 2 * time.Second})
		return false
	}
	return true
}

func (a *API) exportStart(w http.ResponseWriter, r *http.Request) {
	actor, ok := a.ready(w, r)
	if !ok || !a.exportsReady(w, r) {
		return
	}
	id, ok := pathTenant(w, r)
	if !ok {
		return
	}
	if err := a.exports.Audit(r.Context(), actor.Subject, "export_start", id, nil); err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	job, err := a.exports.Start(r.Context(), actor.Subject, id)
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/platform/tenants/"+string(id)+"/exports/"+job.ID)
	httpapi.WriteJSON(w, http.StatusAccepted, job)
}

func (a *API) exportShow(w http.ResponseWriter, r *http.Request) {
	actor, ok := a.ready(w, r)
	if !ok || !a.exportsReady(w, r) {
		return
	}
	id, ok := pathTenant(w, r)
	if !ok {
		return
	}
	job := mux.Vars(r)["job"]
	if err := a.exports.Audit(r.Context(), actor.Subject, "export_show", id, map[string]any{"job": job}); err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	j, err := a.exports.Get(r.Context(), id, job)
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, j)
}

func (a *API) exportArchive(w http.ResponseWriter, r *http.Request) {
	actor, ok := a.ready(w, r)
	if !ok || !a.exportsReady(w, r) {
		return
	}
	id, ok := pathTenant(w, r)
	if !ok {
		return
	}
	job := mux.Vars(r)["job"]
	if err := a.exports.Audit(r.Context(), actor.Subject, "export_download", id, map[string]any{"job": job}); err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	started := false
	err := a.exports.Archive(r.Context(), id, job, func(j portability.Job) {
		started = true
		w.Header().Set("Content-Type", "application/gzip")
		w.Header().Set("Content-Disposition", `attachment; filename="`+string(id)+`-`+j.ID+`.strata.tar.gz"`)
		if j.Bytes > 0 {
			w.Header().Set("Content-Length", strconv.FormatInt(j.Bytes, 10))
		}
		w.WriteHeader(http.StatusOK)
	}, w)
	if err != nil && !started {
		httpapi.WriteError(w, r, err)
	}
	// An error after the first byte cannot change the status: the client
	// sees a short body (Content-Length) and the gzip stream's own check.
}
