// Package relay publishes the committed events of the global log as
// integration events through a watermill Publisher, and feeds projections
// from a watermill Subscriber.
//
// The publishing side is a Relay: a reader of the global log checkpointed
// like a projection (a row relay_<topic> in projection_checkpoints, one
// active relay across processes through a session advisory lock). It
// publishes each batch in log order and advances its checkpoint only after
// the batch is acknowledged: by NATS JetStream (at-least-once, deduplicated
// by message ID — tenant and event ID — within JetStream's window), or
// inside the checkpoint's own transaction by watermill-sql on the same
// PostgreSQL (exactly once). An event it cannot publish (too large for the
// transport, refused as invalid) parks its stream for its tenant in the
// dead-letter store, where Republisher retries it; a broker that fails is
// retried, never parked (poison.go).
//
// The consuming side is a Consumer: a watermill Router whose handler turns
// each message back into an event.Record and applies it to a projection's
// tables in one transaction that also records the stream version applied,
// so that redeliveries change nothing (exactly-once effects). Failures go
// through Retry and then into a DeadLetterSink, by default the runners'
// dead-letter store under the consumer's name (StoreSink), where `strata
// replay dlq` retries (ConsumerProjection) and discards them; a message
// that failed only because the consumer was shutting down is not
// dead-lettered.
//
// It imports domain/event, the eventstore port, projections, db,
// internal/failpoint, pgx, watermill and its SQL and NATS adapters; never
// commands, never readmodels.
package relay
