package esdb

import (
	"context"
	"fmt"

	"github.com/strata-es/strata/eventstore"
)

var _ eventstore.MultiAppender = (*Store)(nil)

// AppendMulti implements eventstore.MultiAppender with one AppendRecords
// call (records.go): every stream's expectation is a consistency check,
// the server validates all of them before it writes any record, and the
// records keep the request's order in $all. It needs KurrentDB 25.1 or
// later (ErrUnsupported otherwise). Idempotency is recorded as for one
// stream (appendIdempotent): looked up before, saved after the append.
func (s *Store) AppendMulti(ctx context.Context, req eventstore.MultiAppendRequest) (eventstore.MultiAppendResult, error) {
	if req.Tenant == "" {
		return eventstore.MultiAppendResult{}, eventstore.ErrNoTenant
	}
	op := fmt.Sprintf("append to %d streams of %s", len(req.Streams), req.Tenant)
	if len(req.Streams) == 0 {
		return eventstore.MultiAppendResult{}, fmt.Errorf("%s: %w: no streams", op, ErrInvalidAppend)
	}
	seen := make(map[string]bool, len(req.Streams))
	parts := make([]recordsPart, len(req.Streams))
	for i, sa := range req.Streams {
		if seen[sa.Stream] {
			return eventstore.MultiAppendResult{}, fmt.Errorf("%s: %w: stream %s twice (append its events in one part)", op, ErrInvalidAppend, sa.Stream)
		}
		seen[sa.Stream] = true
		p, err := s.newRecordsPart(req.Tenant, sa.Stream, sa.Expected, sa.Events)
		if err != nil {
			return eventstore.MultiAppendResult{}, fmt.Errorf("%s: %w", op, err)
		}
		parts[i] = p
	}
	if err := validCondition(req.Condition); err != nil {
		return eventstore.MultiAppendResult{}, fmt.Errorf("%s: %w", op, err)
	}
	run := func() (eventstore.MultiAppendResult, error) {
		res, pos, err := s.appendRecords(ctx, op, req.Tenant, parts, req.Condition)
		return eventstore.MultiAppendResult{Streams: res, Position: pos}, err
	}
	if req.Idempotency == nil {
		return run()
	}
	key := req.Idempotency
	return idempotent(ctx, s, op, req.Tenant, key.Key, key.RequestHash, key.Response, run)
}

// validCondition refuses a condition whose query cannot be used.
func validCondition(c *eventstore.AppendCondition) error {
	if c == nil {
		return nil
	}
	if err := c.Query.Validate(); err != nil {
		return fmt.Errorf("%w: condition: %w", ErrInvalidAppend, err)
	}
	return nil
}
