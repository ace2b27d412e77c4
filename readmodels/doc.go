// Package readmodels is the generic query side: DB reads the tables
// projections write, always as the application role inside a transaction
// whose tenant comes from the context (row-level security does the
// filtering; a missing tenant fails closed); Cursor pages lists by keyset;
// DB also writes the audit trail of cross-tenant admin reads. Modules'
// readers (examples/orders/orderquery) build on it; the HTTP plumbing is
// readmodels/queryapi.
//
// It imports domain, db and pgx; never commands, never
// projections, never a module.
package readmodels
