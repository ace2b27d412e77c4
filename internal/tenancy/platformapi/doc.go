// Package platformapi serves the tenant directory over HTTP for the
// platform operator: /v1/platform/tenants (list, provision), .../{id}
// (show), .../{id}/suspend, .../{id}/resume and .../{id}/quotas.
//
// Every route needs the platform scope (auth.ScopePlatform), which a
// tenant's admin scope does not imply: a tenant's own administrator cannot
// reach them. The token's tenant does not limit them, and the directory's
// Gate is not in front of them (a platform operator must be able to resume
// the tenant their token names). Every call is recorded in tenant_audit by
// the Store before it runs, with the caller's subject and tenant and the
// request ID.
//
// It imports internal/tenancy, internal/httpapi, internal/auth and domain.
package platformapi
