package queryapi

import (
	"net/http"
	"strconv"

	"github.com/strata-es/strata/httpapi"
	"github.com/strata-es/strata/readmodels"
)

// RouteAdminAudit names GET /v1/admin/audit.
const RouteAdminAudit = "admin.audit"

// AuditView is GET /v1/admin/audit's answer: the token's tenant's
// admin_audit rows, newest first.
type AuditView struct {
	Entries []readmodels.AuditRecord `json:"entries"`
}

// adminAudit answers who did what in the token's tenant (admin_audit,
// read under row-level security): ?limit= (1 to 1000, default 100) and
// ?before= (an entry's ID, for the next page). Reading the trail is not
// itself recorded: it crosses no tenant and changes nothing.
func (a *API) adminAudit(w http.ResponseWriter, r *http.Request) {
	q, err := params(r, "limit", "before")
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	limit, before := 100, int64(0)
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > 1000 {
			httpapi.WriteError(w, r, badRequest("limit must be an integer from 1 to 1000"))
			return
		}
	}
	if v := q.Get("before"); v != "" {
		if before, err = strconv.ParseInt(v, 10, 64); err != nil || before < 1 {
			httpapi.WriteError(w, r, badRequest("before must be a positive entry ID"))
			return
		}
	}
	entries, err := a.models.AuditTrail(r.Context(), limit, before)
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, AuditView{Entries: entries})
}
