// Package db is strata's PostgreSQL plumbing: connection pools that run as
// the unprivileged application or projector role, the one helper through
// which every tenant-scoped transaction goes (WithTenantTx), error
// classification, and the embedded, versioned migrations applied by
// `strata migrate`. It may import pgx and domain, nothing else of strata.
package db
