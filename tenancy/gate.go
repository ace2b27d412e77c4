package tenancy

import (
	"net/http"
	"time"

	"github.com/gorilla/mux"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/httpapi"
)

// GateConfig configures Gate.
type GateConfig struct {
	// RejectFunc, if set, is called with every refusal's code (metrics).
	RejectFunc func(r *http.Request, code string)
}

// Gate refuses the requests of tenants the directory says are not to be
// served, before they reach a limit, a body or any tenant's data. Mount it
// right after Authenticate on the command, query and admin routes:
//
//   - suspended (and erasing, erased): 403 tenant_suspended, always;
//   - not in the directory, or provisioning: 403 tenant_unknown when the
//     directory is required (Directory.Required), served otherwise (the
//     behaviour of installations from before the directory);
//   - before the directory's first load: 503 unavailable, since a
//     suspended tenant cannot be told apart yet; likewise, for a member of
//     the erasure's barrier (DirectoryConfig.Lease), whenever it has not
//     heartbeated within its lease (the fence, member.go).
func Gate(d *Directory, cfg GateConfig) mux.MiddlewareFunc {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// Counted before the check, so that the barrier's drain
			// (member.go) sees every request that may have been admitted
			// before the tenant's change was applied.
			if tenant, ok := domain.TenantFromContext(r.Context()); ok {
				c := d.inflight(tenant)
				c.Add(1)
				defer c.Add(-1)
			}
			if err := d.Admit(r); err != nil {
				if cfg.RejectFunc != nil {
					cfg.RejectFunc(r, err.Code)
				}
				httpapi.WriteError(w, r, err)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// Admit returns the refusal of the request's tenant, or nil.
func (d *Directory) Admit(r *http.Request) *httpapi.Error {
	tenant, ok := domain.TenantFromContext(r.Context())
	if !ok {
		return httpapi.Errorf(http.StatusInternalServerError, httpapi.CodeInternal, "internal error")
	}
	if !d.Loaded() {
		return &httpapi.Error{Status: http.StatusServiceUnavailable, Code: httpapi.CodeUnavailable,
			Message: "the tenant directory is not loaded yet: retry later", RetryAfter: 2 * time.Second}
	}
	if d.Fenced() {
		return d.fenceError()
	}
	e, known := d.Lookup(tenant)
	switch {
	case known && e.Status == StatusActive:
		return nil
	case known && e.Status == StatusSuspended:
		return httpapi.Errorf(http.StatusForbidden, httpapi.CodeTenantSuspended, "tenant "+string(tenant)+" is suspended: ask the platform operator")
	case known && (e.Status == StatusErasing || e.Status == StatusErased):
		return httpapi.Errorf(http.StatusForbidden, httpapi.CodeTenantSuspended, "tenant "+string(tenant)+" is being erased and is not served")
	case known && (e.Status == StatusArchiving || e.Status == StatusArchived || e.Status == StatusRehydrating):
		return httpapi.Errorf(http.StatusForbidden, httpapi.CodeTenantSuspended, "tenant "+string(tenant)+" is "+string(e.Status)+" (its data is in the archive store) and is not served: the platform operator brings it back with `strata tenants rehydrate`")
	case !d.Required():
		return nil
	case known:
		return httpapi.Errorf(http.StatusForbidden, httpapi.CodeTenantUnknown, "tenant "+string(tenant)+" is not provisioned yet: the platform operator finishes it with `strata tenants provision`")
	}
	return httpapi.Errorf(http.StatusForbidden, httpapi.CodeTenantUnknown, "tenant "+string(tenant)+" is not in the tenant directory")
}
