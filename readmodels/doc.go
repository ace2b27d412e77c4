// Package readmodels is the query side: it reads the tables the projections
// write, always as the application role inside a transaction whose tenant
// comes from the context (row-level security does the filtering; a missing
// tenant fails closed). It also writes the audit trail of cross-tenant
// admin reads. The HTTP routes live in readmodels/queryapi.
//
// It imports domain, internal/db and pgx; never commands, never projections.
package readmodels
