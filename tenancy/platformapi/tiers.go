package platformapi

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/gorilla/mux"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/httpapi"
	"github.com/strata-es/strata/telemetry"
	"github.com/strata-es/strata/tenancy"
)

// Route names of tiers, cohorts, retention and the heavy hitters.
const (
	RouteTiers        = "platform.tiers"
	RouteTier         = "platform.tier"
	RouteTenantTier   = "platform.tenant.tier"
	RouteCohort       = "platform.tenant.cohort"
	RouteRetention    = "platform.tenant.retention"
	RouteHeavyHitters = "platform.heavy_hitters"
)

// WithHeavyHitters has GET /v1/platform/heavy-hitters answer from h (this
// process's counts).
func (a *API) WithHeavyHitters(h *telemetry.HeavyHitters) *API {
	a.hitters = h
	return a
}

func (a *API) registerTiers(s *mux.Router) {
	s.HandleFunc("/v1/platform/tiers", a.tiers).Methods(http.MethodGet).Name(RouteTiers)
	s.HandleFunc("/v1/platform/tiers/{name}", a.setTier).Methods(http.MethodPut).Name(RouteTier)
	s.HandleFunc("/v1/platform/tenants/{id}/tier", a.tenantTier).Methods(http.MethodPut).Name(RouteTenantTier)
	s.HandleFunc("/v1/platform/tenants/{id}/cohort", a.cohort).Methods(http.MethodPut).Name(RouteCohort)
	s.HandleFunc("/v1/platform/tenants/{id}/retention", a.retention).Methods(http.MethodPut).Name(RouteRetention)
	s.HandleFunc("/v1/platform/heavy-hitters", a.heavyHitters).Methods(http.MethodGet).Name(RouteHeavyHitters)
}

// TierView is a tier as the API and `strata tenants tiers --json` show it.
type TierView struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	Quotas      tenancy.Quotas `json:"quotas"`
	Version     int64          `json:"version"`
	UpdatedAt   time.Time      `json:"updated_at"`
}

// TierListView is GET /v1/platform/tiers's answer.
type TierListView struct {
	Tiers []TierView `json:"tiers"`
}

// ViewTier renders t.
func ViewTier(t tenancy.Tier) TierView {
	return TierView{Name: t.Name, Description: t.Description, Quotas: t.Quotas, Version: t.Version, UpdatedAt: t.UpdatedAt.UTC()}
}

func (a *API) tiers(w http.ResponseWriter, r *http.Request) {
	actor, ok := a.ready(w, r)
	if !ok {
		return
	}
	ts, err := a.store.Tiers(r.Context(), actor)
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	out := TierListView{Tiers: make([]TierView, 0, len(ts))}
	for _, t := range ts {
		out.Tiers = append(out.Tiers, ViewTier(t))
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
}

type tierRequest struct {
	Quotas      tenancy.Quotas `json:"quotas"`
	Description string         `json:"description"`
}

func (a *API) setTier(w http.ResponseWriter, r *http.Request) {
	actor, ok := a.ready(w, r)
	if !ok {
		return
	}
	name, err := httpapi.PathVar(r, "name")
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	var req tierRequest
	if err := httpapi.DecodeJSON(w, r, &req); err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	t, err := a.store.SetTierQuotas(r.Context(), actor, name, req.Quotas, req.Description)
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, ViewTier(t))
}

type tenantTierRequest struct {
	Tier string `json:"tier"`
}

func (a *API) tenantTier(w http.ResponseWriter, r *http.Request) {
	updateTenant(a, w, r, func(ctx context.Context, actor tenancy.Actor, id domain.TenantID, req tenantTierRequest) (tenancy.Tenant, error) {
		return a.store.SetTier(ctx, actor, id, req.Tier)
	})
}

type cohortRequest struct {
	Cohort string `json:"cohort"`
}

func (a *API) cohort(w http.ResponseWriter, r *http.Request) {
	updateTenant(a, w, r, func(ctx context.Context, actor tenancy.Actor, id domain.TenantID, req cohortRequest) (tenancy.Tenant, error) {
		return a.store.SetCohort(ctx, actor, id, req.Cohort)
	})
}

func (a *API) retention(w http.ResponseWriter, r *http.Request) {
	updateTenant(a, w, r, func(ctx context.Context, actor tenancy.Actor, id domain.TenantID, windows map[string]string) (tenancy.Tenant, error) {
		return a.store.SetRetention(ctx, actor, id, windows)
	})
}

// HeavyHittersView is GET /v1/platform/heavy-hitters's answer: this
// process's counts (each serving process counts what it served; sum the
// strata_tenant_heavy_hitter series across processes for the whole).
type HeavyHittersView struct {
	telemetry.TopView
}

func (a *API) heavyHitters(w http.ResponseWriter, r *http.Request) {
	actor, ok := a.ready(w, r)
	if !ok {
		return
	}
	n := 10
	if v := r.URL.Query().Get("top"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > 1000 {
			httpapi.WriteError(w, r, httpapi.Errorf(http.StatusBadRequest, httpapi.CodeInvalidRequest, "top must be an integer from 1 to 1000"))
			return
		}
	}
	if err := a.store.Record(r.Context(), actor, "heavy_hitters", map[string]any{"top": n}); err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	h := a.hitters
	if h == nil {
		h = telemetry.NewHeavyHitters(telemetry.HeavyHittersConfig{}) // nothing counted here
	}
	httpapi.WriteJSON(w, http.StatusOK, HeavyHittersView{h.View(n)})
}
