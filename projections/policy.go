package projections

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/strata-es/strata/db"
)

// FailurePolicy is what a runner does with an event its projection cannot
// apply (ARCHITECTURE decision 5), when RunnerConfig.DeadLetters is set.
//
// The first time an event fails with a failure of its own (IsPoison), its
// stream is parked at once: the event goes to the dead-letter store, every
// later event of the stream for this projection follows it there in order,
// and the checkpoint moves on in the same transaction, so that no other
// stream waits for it. The runner then retries the stream in the
// background, the first retry InitialDelay after the failure, each next one
// twice as late (at most MaxDelay, each delay scaled by a random factor in
// [1-Jitter, 1+Jitter]). A retry re-applies the stream's dead letters in
// order; when all of them apply, the stream is unparked. After Attempts
// failed attempts (the first failure counts) the stream stays parked until
// an operator retries or discards its letters (`strata replay dlq`).
//
// Failures that are not the event's own (the database unreachable, a
// serialization failure or deadlock, the batch running out of time, and
// errors about the schema, privileges or resources, which every event would
// hit) park nothing and count no attempt: the batch is retried with backoff
// until they pass.
type FailurePolicy struct {
	// Attempts is how often an event is tried before it stays parked
	// (default 5; STRATA_PROJECTION_RETRY_ATTEMPTS in serve). 1 parks it
	// for an operator at the first failure.
	Attempts int
	// InitialDelay is the pause before the first retry (default 200ms;
	// STRATA_PROJECTION_RETRY_INITIAL).
	InitialDelay time.Duration
	// MaxDelay caps the pause between retries (default 10s;
	// STRATA_PROJECTION_RETRY_MAX).
	MaxDelay time.Duration
	// Jitter spreads retries: each pause is multiplied by a random factor
	// in [1-Jitter, 1+Jitter] (default 0.2; 0 < Jitter < 1). A negative
	// value turns jitter off.
	Jitter float64
}

func (p *FailurePolicy) setDefaults() {
	if p.Attempts == 0 {
		p.Attempts = 5
	}
	if p.InitialDelay == 0 {
		p.InitialDelay = 200 * time.Millisecond
	}
	if p.MaxDelay == 0 {
		p.MaxDelay = 10 * time.Second
	}
	if p.Jitter == 0 {
		p.Jitter = 0.2
	}
}

// Validate reports every invalid setting.
func (p FailurePolicy) Validate() error {
	var errs []error
	if p.Attempts < 1 || p.Attempts > 1000 {
		errs = append(errs, fmt.Errorf("retry attempts %d: want 1 to 1000", p.Attempts))
	}
	if p.InitialDelay <= 0 {
		errs = append(errs, fmt.Errorf("initial retry delay %s: want a positive duration", p.InitialDelay))
	}
	if p.MaxDelay < p.InitialDelay {
		errs = append(errs, fmt.Errorf("max retry delay %s is below the initial delay %s", p.MaxDelay, p.InitialDelay))
	}
	if p.Jitter >= 1 {
		errs = append(errs, fmt.Errorf("retry jitter %g: want below 1", p.Jitter))
	}
	return errors.Join(errs...)
}

// Delay returns the pause after the failed attempt number attempt (1 for
// the first failure): InitialDelay doubled attempt-1 times, capped at
// MaxDelay, jittered.
func (p FailurePolicy) Delay(attempt int) time.Duration {
	d := p.InitialDelay
	for i := 1; i < attempt && d < p.MaxDelay; i++ {
		d *= 2
	}
	d = min(d, p.MaxDelay)
	if p.Jitter > 0 {
		d = time.Duration(float64(d) * (1 - p.Jitter + 2*p.Jitter*rand.Float64()))
	}
	return max(d, time.Millisecond)
}

// IsPoison reports whether err, the failure to apply one event, belongs to
// the event (a payload the projection cannot handle, a row it expects and
// does not find, a data or constraint error raised by its statements), so
// that parking the event's stream lets every other stream go on. It is
// false for failures of the environment, which every event would meet and
// which retrying resolves: the database unreachable, serialization
// failures and deadlocks, timeouts and cancellations, and SQL errors about
// the schema, privileges, resources or the server (a missing table or
// column after a bad deploy must not park every stream).
func IsPoison(err error) bool {
	if err == nil || IsTransient(err) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if len(pgErr.Code) < 2 {
			return false
		}
		switch pgErr.Code[:2] {
		case "22", // data exception (division by zero, overflow, bad value)
			"23",             // integrity constraint violation (the event contradicts the rows)
			"P0",             // raised by PL/pgSQL
			"2F", "38", "39": // function errors
			return true
		}
		return false
	}
	return true
}

// IsTransient reports failures that pass by themselves and never count as
// an attempt: the database unreachable, serialization failures, deadlocks,
// and a batch or statement that ran out of time or was cancelled.
func IsTransient(err error) bool {
	if err == nil {
		return false
	}
	if db.IsUnavailable(err) || db.IsTransient(err) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	switch db.SQLState(err) {
	case "57014", // query_canceled (statement_timeout)
		"55P03": // lock_not_available (lock_timeout)
		return true
	}
	return false
}
