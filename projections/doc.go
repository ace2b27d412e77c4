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
// A poison event parks its stream, not the projection (decision 5): the
// runner writes it and the stream's later events to the dead-letter store
// in the batch's transaction and retries the stream in the background
// (FailurePolicy, deadletter.go). Tools take a projection from its runner
// for a moment with AcquireExclusive (a rebuild's swap, a dead-letter
// retry); projections that can write into other tables (Retargetable) can
// be rebuilt into shadow copies (package replay). A writer that applies a
// projection without a Runner (a broker-fed consumer, package
// projections/relay) parks into the same store under its own checkpoint
// key (RegisterConsumer, ParkEvent, QueuePauseProbe; park.go), so the same
// tools retry and discard its letters.
//
// The package also holds what the query side needs to know about
// projections: checkpoints (Consistency waits for a consistency token) and
// their status and lag (Monitor).
//
// It imports domain, the eventstore port, db, internal/failpoint and
// pgx; never commands, never readmodels.
package projections
