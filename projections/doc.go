// Package projections builds the read models from the global event log.
//
// A Projection names itself (its checkpoint key), lists the event types it
// handles and the tables it owns, and queues the SQL that applies one event
// into a pgx.Batch. A Runner drives one projection: it reads the log after
// the projection's checkpoint in batches and applies each batch in one
// PostgreSQL transaction (set tenant -> read-model writes -> checkpoint), so
// that effects are exactly-once although delivery is at-least-once
// (ARCHITECTURE decisions 1-3). Only one runner per projection is active
// across processes (a session advisory lock); runners wake on appends in
// this process, on LISTEN/NOTIFY from other processes, and by polling.
//
// The package also holds what the query side needs to know about
// projections: checkpoints (Consistency waits for a consistency token) and
// their status and lag (Monitor).
//
// It imports domain, the eventstore port, internal/db, internal/failpoint and
// pgx; never commands, never readmodels.
package projections
