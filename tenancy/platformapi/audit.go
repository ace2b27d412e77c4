package platformapi

import (
	"net/http"
	"net/url"
	"strconv"

	"github.com/gorilla/mux"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/httpapi"
	"github.com/strata-es/strata/tenancy"
)

// RouteAudit names GET /v1/platform/audit.
const RouteAudit = "platform.audit"

// AuditView is GET /v1/platform/audit's answer: tenant_audit, newest first.
type AuditView struct {
	Entries []tenancy.AuditEntry `json:"entries"`
}

func (a *API) registerAudit(s *mux.Router) {
	s.HandleFunc("/v1/platform/audit", a.auditTrail).Methods(http.MethodGet).Name(RouteAudit)
}

// auditTrail answers who made which platform call: ?tenant= (one
// tenant's), ?limit= (1 to 1000, default 100), ?before= (an entry's ID,
// the next page).
func (a *API) auditTrail(w http.ResponseWriter, r *http.Request) {
	actor, ok := a.ready(w, r)
	if !ok {
		return
	}
	bad := func(msg string) {
		httpapi.WriteError(w, r, httpapi.Errorf(http.StatusBadRequest, httpapi.CodeInvalidRequest, msg))
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		bad("the query string is malformed")
		return
	}
	for k, vs := range q {
		if k != "tenant" && k != "limit" && k != "before" {
			bad("unknown query parameter; known: tenant, limit, before")
			return
		}
		if len(vs) > 1 {
			bad("a query parameter is given more than once")
			return
		}
	}
	var tenant domain.TenantID
	if v := q.Get("tenant"); v != "" {
		if tenant, err = domain.ParseTenantID(v); err != nil {
			bad("tenant must match [a-z0-9-]{1,63}")
			return
		}
	}
	limit, before := 100, int64(0)
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > 1000 {
			bad("limit must be an integer from 1 to 1000")
			return
		}
	}
	if v := q.Get("before"); v != "" {
		if before, err = strconv.ParseInt(v, 10, 64); err != nil || before < 1 {
			bad("before must be a positive entry ID")
			return
		}
	}
	entries, err := a.store.AuditTrail(r.Context(), actor, tenant, limit, before)
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, AuditView{Entries: entries})
}
