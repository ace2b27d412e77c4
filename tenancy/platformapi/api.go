package platformapi

import (
	"context"
	"net/http"
	"time"

	"github.com/gorilla/mux"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/httpapi"
	"github.com/strata-es/strata/telemetry"
	"github.com/strata-es/strata/tenancy"
	"github.com/strata-es/strata/tenancy/portability"
)

// Route names (metrics, logs, the OpenAPI document's operationIds).
const (
	RouteList      = "platform.tenants"
	RouteProvision = "platform.tenants.provision"
	RouteShow      = "platform.tenant"
	RouteSuspend   = "platform.tenant.suspend"
	RouteResume    = "platform.tenant.resume"
	RouteQuotas    = "platform.tenant.quotas"
)

// API serves the routes on a Store. A nil Store (a process without the
// owner connection) answers 503 with what to set.
type API struct {
	store    *tenancy.Store
	exports  *portability.Jobs       // exports.go
	hitters  *telemetry.HeavyHitters // tiers.go
	erase    *eraseJobs              // erase.go
	archive  *archiveJobs            // archive.go
	refusals *refusals               // record.go
}

// New returns the API.
func New(store *tenancy.Store) *API { return &API{store: store, refusals: newRefusals(time.Now)} }

// Register mounts the routes on r, which must authenticate (Authenticate).
// Every call is recorded (record.go), a refused one included: recordCalls
// comes before the scope check.
func (a *API) Register(r *mux.Router) {
	s := r.NewRoute().Subrouter()
	s.Use(a.recordCalls, httpapi.RequireScope(auth.ScopePlatform))
	s.HandleFunc("/v1/platform/tenants", a.list).Methods(http.MethodGet).Name(RouteList)
	s.HandleFunc("/v1/platform/tenants", a.provision).Methods(http.MethodPost).Name(RouteProvision)
	s.HandleFunc("/v1/platform/tenants/{id}", a.show).Methods(http.MethodGet).Name(RouteShow)
	s.HandleFunc("/v1/platform/tenants/{id}/suspend", a.suspend).Methods(http.MethodPost).Name(RouteSuspend)
	s.HandleFunc("/v1/platform/tenants/{id}/resume", a.resume).Methods(http.MethodPost).Name(RouteResume)
	s.HandleFunc("/v1/platform/tenants/{id}/quotas", a.quotas).Methods(http.MethodPut).Name(RouteQuotas)
	a.registerExports(s)
	a.registerTiers(s)
	a.registerErasure(s)
	a.registerArchive(s)
	a.registerAudit(s)
}

// TenantView is a tenant as the API and `strata tenants --json` show it.
type TenantView struct {
	ID           string               `json:"id"`
	Name         string               `json:"name"`
	Status       string               `json:"status"`
	StatusReason string               `json:"status_reason,omitempty"`
	Quotas       tenancy.Quotas       `json:"quotas"`
	Retention    map[string]any       `json:"retention"`
	Placement    string               `json:"placement"`
	Provisioning map[string]time.Time `json:"provisioning"`
	StepsDone    []string             `json:"steps_done"`
	StepsPending []string             `json:"steps_pending"`
	Version      int64                `json:"version"`
	CreatedAt    time.Time            `json:"created_at"`
	UpdatedAt    time.Time            `json:"updated_at"`
	Tier         string               `json:"tier,omitempty"`
	Cohort       string               `json:"cohort,omitempty"`
}

// View renders t.
func View(t tenancy.Tenant) TenantView {
	v := TenantView{ID: string(t.ID), Name: t.Name, Status: string(t.Status), StatusReason: t.StatusReason, Quotas: t.Quotas,
		Retention: t.Retention, Placement: t.Placement, Provisioning: t.Provisioning, StepsDone: t.StepsDone(),
		StepsPending: t.StepsPending(), Version: t.Version, CreatedAt: t.CreatedAt.UTC(), UpdatedAt: t.UpdatedAt.UTC(),
		Tier: t.Tier, Cohort: t.Cohort}
	if v.StepsDone == nil {
		v.StepsDone = []string{}
	}
	if v.StepsPending == nil {
		v.StepsPending = []string{}
	}
	if v.Retention == nil {
		v.Retention = map[string]any{}
	}
	if v.Provisioning == nil {
		v.Provisioning = map[string]time.Time{}
	}
	return v
}

// ListView is GET /v1/platform/tenants's answer.
type ListView struct {
	Tenants []TenantView `json:"tenants"`
}

func (a *API) ready(w http.ResponseWriter, r *http.Request) (tenancy.Actor, bool) {
	if a.store == nil {
		httpapi.WriteError(w, r, &httpapi.Error{Status: http.StatusServiceUnavailable, Code: httpapi.CodeUnavailable,
			Message: "this process has no owner connection (DATABASE_URL): the tenant directory cannot be changed here", RetryAfter: 2 * time.Second})
		return tenancy.Actor{}, false
	}
	c, _ := httpapi.ClaimsFrom(r.Context())
	return actorOf(r, c), true
}

// actorOf is who makes a call over HTTP: the token's subject and tenant.
func actorOf(r *http.Request, c auth.Claims) tenancy.Actor {
	return tenancy.Actor{Subject: "api:" + c.Subject + "@" + string(c.Tenant), RequestID: httpapi.RequestID(r.Context())}
}

func pathTenant(w http.ResponseWriter, r *http.Request) (domain.TenantID, bool) {
	v, err := httpapi.PathVar(r, "id")
	if err == nil {
		var id domain.TenantID
		if id, err = domain.ParseTenantID(v); err == nil {
			return id, true
		}
		err = httpapi.Errorf(http.StatusBadRequest, httpapi.CodeInvalidRequest, "the tenant ID must match [a-z0-9-]{1,63}")
	}
	httpapi.WriteError(w, r, err)
	return "", false
}

func (a *API) list(w http.ResponseWriter, r *http.Request) {
	actor, ok := a.ready(w, r)
	if !ok {
		return
	}
	ts, err := a.store.List(r.Context(), actor)
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	out := ListView{Tenants: make([]TenantView, 0, len(ts))}
	for _, t := range ts {
		out.Tenants = append(out.Tenants, View(t))
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
}

type provisionRequest struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Quotas    *tenancy.Quotas `json:"quotas"`
	Placement string          `json:"placement"`
}

func (a *API) provision(w http.ResponseWriter, r *http.Request) {
	actor, ok := a.ready(w, r)
	if !ok {
		return
	}
	var req provisionRequest
	if err := httpapi.DecodeJSON(w, r, &req); err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	id, err := domain.ParseTenantID(req.ID)
	if err != nil {
		httpapi.WriteError(w, r, httpapi.Errorf(http.StatusBadRequest, httpapi.CodeInvalidRequest, "id must match [a-z0-9-]{1,63}"))
		return
	}
	t, err := a.store.Provision(r.Context(), actor, tenancy.ProvisionRequest{ID: id, Name: req.Name, Quotas: req.Quotas, Placement: req.Placement})
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, View(t))
}

func (a *API) show(w http.ResponseWriter, r *http.Request) {
	actor, ok := a.ready(w, r)
	if !ok {
		return
	}
	id, ok := pathTenant(w, r)
	if !ok {
		return
	}
	t, err := a.store.Get(r.Context(), actor, id)
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, View(t))
}

type reasonRequest struct {
	Reason string `json:"reason"`
}

func (a *API) suspend(w http.ResponseWriter, r *http.Request) { a.transition(w, r, a.store.Suspend) }
func (a *API) resume(w http.ResponseWriter, r *http.Request)  { a.transition(w, r, a.store.Resume) }

func (a *API) transition(w http.ResponseWriter, r *http.Request, op func(ctx context.Context, a tenancy.Actor, id domain.TenantID, reason string) (tenancy.Tenant, error)) {
	actor, ok := a.ready(w, r)
	if !ok {
		return
	}
	id, ok := pathTenant(w, r)
	if !ok {
		return
	}
	var req reasonRequest
	if r.ContentLength != 0 || r.Header.Get("Content-Type") != "" {
		if err := httpapi.DecodeJSON(w, r, &req); err != nil {
			httpapi.WriteError(w, r, err)
			return
		}
	}
	t, err := op(r.Context(), actor, id, req.Reason)
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, View(t))
}

func (a *API) quotas(w http.ResponseWriter, r *http.Request) {
	updateTenant(a, w, r, func(ctx context.Context, actor tenancy.Actor, id domain.TenantID, q tenancy.Quotas) (tenancy.Tenant, error) {
		return a.store.SetQuotas(ctx, actor, id, q)
	})
}

// updateTenant is the shape of the routes that change one tenant with a
// JSON body (quotas, tier, cohort, retention): the platform capability,
// the path's tenant, the strictly decoded body, the Store's call, and the
// tenant as it is now.
func updateTenant[Req any](a *API, w http.ResponseWriter, r *http.Request, apply func(context.Context, tenancy.Actor, domain.TenantID, Req) (tenancy.Tenant, error)) {
	actor, ok := a.ready(w, r)
	if !ok {
		return
	}
	id, ok := pathTenant(w, r)
	if !ok {
		return
	}
	var req Req
	if err := httpapi.DecodeJSON(w, r, &req); err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	t, err := apply(r.Context(), actor, id, req)
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, View(t))
}
