package platformapi

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gorilla/mux"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/httpapi"
	"github.com/strata-es/strata/tenancy"
	"github.com/strata-es/strata/tenancy/portability"
)

// Route names of the export jobs.
const (
	RouteExportStart   = "platform.tenant.exports.start"
	RouteExportShow    = "platform.tenant.export"
	RouteExportArchive = "platform.tenant.export.archive"
	RouteExportDelete  = "platform.tenant.export.delete"
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
	s.HandleFunc("/v1/platform/tenants/{id}/exports/{job}", a.exportDelete).Methods(http.MethodDelete).Name(RouteExportDelete)
	s.HandleFunc("/v1/platform/tenants/{id}/exports/{job}/archive", a.exportArchive).Methods(http.MethodGet).Name(RouteExportArchive)
}

// exportReady is the start of every export route: the owner connection,
// the export jobs, the path's tenant.
func (a *API) exportReady(w http.ResponseWriter, r *http.Request) (tenancy.Actor, domain.TenantID, bool) {
	actor, ok := a.ready(w, r)
	if !ok {
		return actor, "", false
	}
	if a.exports == nil {
		httpapi.WriteError(w, r, &httpapi.Error{Status: http.StatusServiceUnavailable, Code: httpapi.CodeUnavailable,
			Message: "this process has no owner connection (DATABASE_URL): tenant exports run elsewhere", RetryAfter: 2 * time.Second})
		return actor, "", false
	}
	id, ok := pathTenant(w, r)
	return actor, id, ok
}

// pathJob is the path's job ID in its one spelling (a lower-case,
// hyphenated UUID); any other answers 404, like a job that does not exist,
// before anything reaches the database.
func pathJob(w http.ResponseWriter, r *http.Request) (string, bool) {
	job := mux.Vars(r)["job"]
	if !portability.ValidJobID(job) {
		httpapi.WriteError(w, r, portability.ErrJobNotFound)
		return "", false
	}
	return job, true
}

// exportError maps the export jobs' own refusal, the cap of running jobs,
// onto the error table (429 rate_limited with Retry-After, as a tenant's
// requests in flight are); the rest is Classify's.
func exportError(err error) error {
	var busy *portability.BusyError
	if errors.As(err, &busy) {
		return &httpapi.Error{Status: http.StatusTooManyRequests, Code: httpapi.CodeRateLimited, Message: busy.Error(), RetryAfter: busy.RetryAfter}
	}
	return err
}

func (a *API) exportStart(w http.ResponseWriter, r *http.Request) {
	actor, id, ok := a.exportReady(w, r)
	if !ok {
		return
	}
	if err := a.store.RecordFor(r.Context(), actor, "export_start", id, nil); err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	job, err := a.exports.Start(r.Context(), actor.Subject, id)
	if err != nil {
		httpapi.WriteError(w, r, exportError(err))
		return
	}
	w.Header().Set("Location", "/v1/platform/tenants/"+string(id)+"/exports/"+job.ID)
	httpapi.WriteJSON(w, http.StatusAccepted, job)
}

// exportShow answers a job's status. It is not recorded: a client polls
// it every second or so while the job runs, and a row per poll recorded
// nothing anyone asked for while growing tenant_audit without bound
// (issue 29). The job's start, its downloads, deletion and expiry are
// recorded; a poll refused before it reached the job (no platform scope,
// a malformed tenant) is recorded as refused.
func (a *API) exportShow(w http.ResponseWriter, r *http.Request) {
	_, id, ok := a.exportReady(w, r)
	if !ok {
		return
	}
	tenancy.MarkAudited(r.Context()) // deliberately not recorded, see above
	job, ok := pathJob(w, r)
	if !ok {
		return
	}
	j, err := a.exports.Get(r.Context(), id, job)
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, j)
}

// exportDelete deletes a job that is not running, archive included (204).
func (a *API) exportDelete(w http.ResponseWriter, r *http.Request) {
	actor, id, ok := a.exportReady(w, r)
	if !ok {
		return
	}
	job, ok := pathJob(w, r)
	if !ok {
		return
	}
	if err := a.store.RecordFor(r.Context(), actor, "export_delete", id, map[string]any{"job": job}); err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	if _, err := a.exports.Delete(r.Context(), id, job); err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *API) exportArchive(w http.ResponseWriter, r *http.Request) {
	actor, id, ok := a.exportReady(w, r)
	if !ok {
		return
	}
	job, ok := pathJob(w, r)
	if !ok {
		return
	}
	if err := a.store.RecordFor(r.Context(), actor, "export_download", id, map[string]any{"job": job}); err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	started := false
	err := a.exports.Archive(r.Context(), id, job, func(j portability.Job) {
		started = true
		w.Header().Set("Content-Type", "application/gzip")
		w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s-%s.strata.tar.gz"`, id, j.ID))
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
