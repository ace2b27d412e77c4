// Package adminapi serves the replay operations over HTTP for the admin
// scope, so that a dashboard can drive what `strata replay` does: a
// projection's status, rebuilds (started in the background, progress
// polled), and the dead-letter store's list, show, retry and discard.
//
// Every route needs a token with the admin scope and works on the token's
// tenant only; ?scope=all widens it to every tenant and needs the
// cross_tenant claim. Cross-tenant requests, and every request that
// changes something, are recorded first through the audit function (the
// admin_audit table, in the caller's tenant), like GET
// /v1/admin/projections?scope=all. Another tenant's dead letter answers 404,
// exactly like a missing one.
//
// It imports replay, projections, domain and httpapi and
// auth; the database is replay's business.
package adminapi

import (
	"context"
	"net/http"
	"net/url"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/httpapi"
)

// Audit is one record of an admin action.
type Audit struct {
	Subject, Action, Target, RequestID string
}

// AuditFunc records an admin action in the caller's tenant (from ctx);
// an error fails the request before anything is read or changed.
type AuditFunc func(ctx context.Context, a Audit) error

// caller is who asks and over which tenants.
type caller struct {
	claims auth.Claims
	// tenant is the only tenant the request may see; "" with all.
	tenant string
	all    bool
}

// who resolves ?scope= (tenant by default; all needs the cross_tenant
// claim) and records the request when it crosses tenants or changes
// something (mutating).
func (a *API) who(w http.ResponseWriter, r *http.Request, q url.Values, action string, mutating bool) (caller, bool) {
	claims, ok := httpapi.ClaimsFrom(r.Context())
	if !ok {
		httpapi.WriteError(w, r, httpapi.Errorf(http.StatusUnauthorized, httpapi.CodeUnauthenticated, "a bearer token is required"))
		return caller{}, false
	}
	c := caller{claims: claims, tenant: string(claims.Tenant)}
	switch q.Get("scope") {
	case "", "tenant":
	case "all":
		if !claims.CrossTenant {
			httpapi.WriteError(w, r, httpapi.Errorf(http.StatusForbidden, httpapi.CodeForbidden, "scope=all needs a token with the cross_tenant claim"))
			return c, false
		}
		c.tenant, c.all = "", true
	default:
		httpapi.WriteError(w, r, badRequest("scope must be tenant or all"))
		return c, false
	}
	if c.all || mutating {
		target := r.Method + " " + r.URL.Path
		if c.all {
			target += "?scope=all"
		}
		if err := a.audit(r.Context(), Audit{Subject: claims.Subject, Action: action, Target: target, RequestID: httpapi.RequestID(r.Context())}); err != nil {
			httpapi.WriteError(w, r, err)
			return c, false
		}
	}
	return c, true
}

// actor is what the dead-letter store records as who acted.
func (c caller) actor() string { return "api:" + c.claims.Subject + "@" + string(c.claims.Tenant) }

// ----- projections -----
