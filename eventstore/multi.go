package eventstore

import (
	"context"

	"github.com/strata-es/strata/domain/event"
)

// Multi-stream appends (issue 31): one command's events on several streams
// of one tenant, each stream with its own expectation, all or nothing. An
// invariant that spans aggregates ("a seat is sold once across bookings")
// holds without a saga: the command reads each aggregate, decides, and
// appends to every stream it read at the version it read.

// StreamAppend is one stream's part of a multi-stream append.
type StreamAppend struct {
	Stream   string
	Expected ExpectedVersion
	Events   []NewEvent
}

// MultiAppendRequest appends to several distinct streams of one tenant in
// one transaction.
type MultiAppendRequest struct {
	Tenant  string
	Streams []StreamAppend
	// Idempotency, optional, records the command's outcome under its key
	// in the same transaction, as for one stream.
	Idempotency *MultiIdempotency
	// Condition, optional, guards the whole append (condition.go).
	Condition *AppendCondition
}

// MultiIdempotency is Idempotency for a multi-stream append.
type MultiIdempotency struct {
	Key         string
	RequestHash string
	// Response builds the bytes stored as the outcome, inside the append's
	// transaction, once its result is known.
	Response func(MultiAppendResult) ([]byte, error)
}

// MultiAppendResult describes a multi-stream append that committed.
type MultiAppendResult struct {
	// Streams holds each stream's result, in the request's order.
	Streams []AppendResult
	// Position is the global position of the last event appended; its
	// Token is the consistency token returned to clients.
	Position event.Position
}

// MultiAppender is a Store that appends to several streams atomically.
type MultiAppender interface {
	// AppendMulti appends every stream's events if every stream satisfies
	// its expectation, and nothing otherwise. Errors: ErrVersionConflict
	// (naming the first stream whose expectation failed),
	// ErrIdempotencyKeyExists, ErrNoTenant, ErrUnavailable.
	AppendMulti(ctx context.Context, req MultiAppendRequest) (MultiAppendResult, error)
}
