// Package tenancy is the tenant directory, the control plane of the
// installation (ARCHITECTURE decision 12; docs/tenants.md): which tenants
// exist, their lifecycle status, quotas, retention settings and placement.
//
// It has three parts. Store is the platform path, the only writer: it
// provisions tenants step by step (ProvisionSteps), suspends and resumes
// them, edits their quotas, and records every call in tenant_audit; it
// runs on the owner connection as strata_owner. Directory is what a
// serving process keeps in memory: every tenant's status and quotas, loaded
// as the application role (a column grant) and kept current by the push
// (NOTIFY strata_tenants at commit of every change, "<id>:<version>") and a
// periodic full reload as the safety net; Check reads the row itself, for a
// decision that must not rest on the cache. Gate is the HTTP middleware
// that refuses a tenant that is suspended (403 tenant_suspended) or, when
// the directory is required, unknown or not yet active (403
// tenant_unknown).
//
// Eraser is the erasure workflow (erase*.go; docs/tenants.md, "Erasure"):
// status erasing, an acknowledgement barrier over the serving processes'
// Directories (member.go: each registers, heartbeats, acknowledges and
// fences itself when it cannot heartbeat), quiescence, every store found
// from the catalog erased in its mode and verified, and a receipt.
//
// It imports domain, db, internal/failpoint, httpapi,
// internal/pgsession and pgx; its HTTP API is the subpackage platformapi.
package tenancy
