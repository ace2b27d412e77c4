// Package platformapi serves the tenant directory over HTTP for the
// platform operator: /v1/platform/tenants (list, provision), .../{id}
// (show), .../{id}/suspend, .../{id}/resume, .../{id}/quotas, the export
// jobs, tiers, erasure and the audit trail.
//
// Every route needs the platform scope (auth.ScopePlatform), which a
// tenant's admin scope does not imply: a tenant's own administrator cannot
// reach them. The token's tenant does not limit them, and the directory's
// Gate is not in front of them (a platform operator must be able to resume
// the tenant their token names). Every call is recorded in tenant_audit:
// by the Store before it runs, with the caller's subject and tenant and the
// request ID; a call refused before any Store call (no platform scope, a
// malformed path, body or query) by recordCalls, as "refused" with its
// route, status and code, throttled per subject (record.go). A request
// without a verified identity never reaches the package and is not
// recorded.
//
// It imports tenancy (and its portability), httpapi,
// telemetry, auth and domain.
package platformapi
