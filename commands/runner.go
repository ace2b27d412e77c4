package commands

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
)

// runner is what every kind of command execution shares, whatever it
// loads and appends (a Handler's one aggregate, a Spanner's several): the
// command ID, the idempotency record, and the retries of conflicts.
type runner struct {
	idem eventstore.IdempotencyStore
	cfg  Config
}

// execution is one command's identity, fixed before its first attempt.
type execution struct {
	tenant    domain.TenantID
	commandID string
	// meta is stamped on every event the command appends.
	meta event.Metadata
}

// start fixes the execution of a command, or answers it (done) with the
// outcome recorded under its idempotency key.
func (h runner) start(ctx context.Context, opts Options) (execution, Result, bool, error) {
	tenant, ok := domain.TenantFromContext(ctx)
	if !ok {
		return execution{}, Result{}, false, eventstore.ErrNoTenant
	}
	idem := opts.Idempotency
	if idem != nil {
		if h.idem == nil {
			return execution{}, Result{}, false, errors.New("idempotency keys are not supported by this store")
		}
		if res, done, err := h.replay(ctx, tenant, idem); done || err != nil {
			return execution{}, res, true, err
		}
	}
	// The command ID, and from it every event ID, is fixed before the first
	// attempt and derived from the idempotency key when there is one, so a
	// retried request produces the same event IDs.
	commandID := uuid.NewString()
	if idem != nil {
		commandID = CommandID(string(tenant), idem.Key)
	}
	meta := opts.Metadata
	meta.CommandID = commandID
	if meta.CausationID == "" {
		meta.CausationID = commandID
	}
	if meta.CorrelationID == "" {
		meta.CorrelationID = commandID
	}
	return execution{tenant: tenant, commandID: commandID, meta: meta}, Result{}, false, nil
}

// execute runs attempts until one is final: a success, a rejection
// (recorded under the idempotency key), an error, or a conflict that is
// not retried (If-Match, or MaxAttempts reached).
func (h runner) execute(ctx context.Context, x execution, opts Options, attempt func(first bool) (Result, error)) (Result, error) {
	idem := opts.Idempotency
	for n := 1; ; n++ {
		res, err := attempt(n == 1)
		switch {
		case err == nil:
			return res, nil
		case errors.Is(err, eventstore.ErrIdempotencyKeyExists):
			// A concurrent duplicate committed first; ours rolled back.
			res, _, err := h.replay(ctx, x.tenant, idem)
			return res, err
		case errors.Is(err, eventstore.ErrVersionConflict) && (opts.ExpectedVersion == nil || errors.Is(err, eventstore.ErrConditionFailed)) && n < h.cfg.MaxAttempts:
			// Someone else moved the aggregate between our load and append.
			// That someone may be a concurrent duplicate of this very
			// request: its outcome, once recorded, is ours.
			if idem != nil {
				if res, done, err := h.replay(ctx, x.tenant, idem); done || err != nil {
					return res, err
				}
			}
			// Otherwise decide again on the new state, after a short
			// jittered pause.
			pause := time.Duration(n) * time.Duration(1+rand.IntN(5)) * time.Millisecond
			select {
			case <-ctx.Done():
				return Result{}, ctx.Err()
			case <-time.After(pause):
			}
			continue
		case isRejection(err) && idem != nil:
			return h.recordRejection(ctx, x.tenant, idem, err)
		default:
			return Result{}, err
		}
	}
}

// unchanged answers a command that appended nothing: the aggregate's
// version and the position of its last event (a consistency token that
// reads the state the decision saw), recorded under the idempotency key
// when there is one.
func (h runner) unchanged(ctx context.Context, tenant domain.TenantID, id string, version int64, last event.Position, idem *Idempotency) (Result, error) {
	res := Result{ID: id, Version: version, Position: last}
	if idem == nil {
		return res, nil
	}
	body, err := idem.Respond(res, nil)
	if err != nil {
		return Result{}, fmt.Errorf("render outcome: %w", err)
	}
	switch err := h.idem.SaveIdempotency(ctx, string(tenant), idem.Key, idem.RequestHash, body); {
	case err == nil:
		return res, nil
	case errors.Is(err, eventstore.ErrIdempotencyKeyExists):
		replayed, _, err := h.replay(ctx, tenant, idem)
		return replayed, err
	default:
		return Result{}, fmt.Errorf("record outcome: %w", err)
	}
}

// replay returns the stored outcome under idem's key, if there is one.
func (h runner) replay(ctx context.Context, tenant domain.TenantID, idem *Idempotency) (Result, bool, error) {
	rec, found, err := h.idem.LookupIdempotency(ctx, string(tenant), idem.Key)
	if err != nil {
		return Result{}, false, fmt.Errorf("look up idempotency key: %w", err)
	}
	if !found {
		return Result{}, false, nil
	}
	if rec.RequestHash != idem.RequestHash {
		return Result{}, true, ErrIdempotencyKeyReused
	}
	return Result{Replayed: rec.Response}, true, nil
}

// recordRejection stores a definite rejection under the key, so a retry
// gets the same answer instead of a second decision on newer state.
func (h runner) recordRejection(ctx context.Context, tenant domain.TenantID, idem *Idempotency, cause error) (Result, error) {
	body, err := idem.Respond(Result{}, cause)
	if err != nil {
		return Result{}, fmt.Errorf("render rejection: %w", err)
	}
	err = h.idem.SaveIdempotency(ctx, string(tenant), idem.Key, idem.RequestHash, body)
	switch {
	case err == nil:
		return Result{}, cause
	case errors.Is(err, eventstore.ErrIdempotencyKeyExists):
		res, _, err := h.replay(ctx, tenant, idem)
		return res, err
	default:
		return Result{}, fmt.Errorf("record idempotent rejection: %w", err)
	}
}

// isRejection reports a definite, state-dependent "no" worth remembering
// under an idempotency key: rule violations and a missing aggregate. Malformed
// input is not stored: it never reached a decision.
func isRejection(err error) bool {
	return errors.Is(err, domain.ErrRejected) || errors.Is(err, domain.ErrNotFound)
}

// recordApplied stores the outcome of an execution found in the stream and
// returns it as a replay.
func (h runner) recordApplied(ctx context.Context, tenant domain.TenantID, idem *Idempotency, res Result) (Result, error) {
	body, err := idem.Respond(res, nil)
	if err != nil {
		return Result{}, fmt.Errorf("render recovered outcome: %w", err)
	}
	err = h.idem.SaveIdempotency(ctx, string(tenant), idem.Key, idem.RequestHash, body)
	if err != nil && !errors.Is(err, eventstore.ErrIdempotencyKeyExists) {
		return Result{}, fmt.Errorf("record recovered outcome: %w", err)
	}
	replayed, _, err := h.replay(ctx, tenant, idem)
	return replayed, err
}

// admit runs a Guarded command's check (aggregate.go): the events
// matching its guard, read with the position the append is conditioned
// on. Other commands have no condition.
//
// On a first attempt (optimistic) whose guard admits an empty history
// (Admit(nil) is nil: "this address is free when nobody has it"), it
// reads nothing and conditions the append on no event matching the guard
// at all (After is the beginning of the log): what the read would have
// found empty, the append's check finds empty under the same locks, so
// the common case of a claim costs one round trip, not two. blind says so:
// when that condition fails, the caller reads and decides again at once
// (readAfterBlind), without the pause of a contended retry.
func (h runner) admit(ctx context.Context, store eventstore.Store, tenant domain.TenantID, cmd Named, optimistic bool) (cond *eventstore.AppendCondition, blind bool, err error) {
	g, ok := cmd.(Guarded)
	if !ok {
		return nil, false, nil
	}
	tags, ok := store.(eventstore.TagReader)
	if !ok {
		return nil, false, fmt.Errorf("%s is a guarded command, and this event store keeps no tags (use PostgreSQL, or EventStoreDB on KurrentDB 25.1 or later)", cmd.Name())
	}
	q := g.Guard()
	if optimistic && g.Admit(nil) == nil {
		return &eventstore.AppendCondition{Query: q}, true, nil
	}
	recs, at, err := tags.ReadTagged(ctx, string(tenant), q)
	if err != nil {
		return nil, false, fmt.Errorf("%s: read its guard: %w", cmd.Name(), err)
	}
	matched := make([]event.Payload, len(recs))
	for i, rec := range recs {
		if matched[i], err = h.cfg.Registry.DecodeRecord(rec); err != nil {
			return nil, false, fmt.Errorf("%s: read its guard: %w", cmd.Name(), err)
		}
	}
	if err := g.Admit(matched); err != nil {
		return nil, false, err
	}
	return &eventstore.AppendCondition{Query: q, After: at}, false, nil
}

// readAfterBlind reports whether an append conditioned blind (admit)
// failed its condition: events match the guard after all, and the
// command must read them and decide again.
func readAfterBlind(blind bool, err error) bool {
	return blind && errors.Is(err, eventstore.ErrConditionFailed)
}
