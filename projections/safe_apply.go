package projections

import (
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/internal/failpoint"
)

// A projection's Apply and ApplyBatch, and the callbacks they queue, are a
// module's code. A panic in them used to end the whole serving process —
// every projection of every tenant, again at every restart, since the
// event that caused it is still there (ARCHITECTURE decision 17: poison
// never stops the others). Every call into them goes through ApplyEvent,
// ApplyEvents or GuardCallbacks, which turn a panic into an
// error wrapping ErrPanicked: a poison error like any other, which parks
// the event's stream for its tenant.

// ErrPanicked wraps a panic recovered from a projection's code.
var ErrPanicked = errors.New("the projection's code panicked")

// FailpointApplyPanic is a panic point (internal/failpoint, keyed by the
// event's tenant): a projection's code that panics on one tenant's
// events, for the fault harness.
const FailpointApplyPanic = "projections.apply-panic"

// ApplyEvent calls p.Apply(b, ev); a panic comes back as an error wrapping
// ErrPanicked.
func ApplyEvent(p Projection, b *pgx.Batch, ev Event) (err error) {
	defer recoverInto(&err, p.Name())
	failpoint.PanicFor(FailpointApplyPanic, ev.Tenant)
	return p.Apply(b, ev)
}

// ApplyEvents calls p.ApplyBatch(b, evs); a panic comes back as an error
// wrapping ErrPanicked.
func ApplyEvents(p BatchProjection, b *pgx.Batch, evs []Event) (err error) {
	defer recoverInto(&err, p.Name())
	for _, ev := range evs {
		failpoint.PanicFor(FailpointApplyPanic, ev.Tenant)
	}
	return p.ApplyBatch(b, evs)
}

// GuardCallbacks makes every callback queued in b (a projection may
// attach one to check what it changed) turn a panic into an error wrapping
// ErrPanicked. Call it just before sending b: pgx runs the callbacks both
// when the caller reads the results and, for those left, when it closes
// them, so guarding each call site would miss the second.
func GuardCallbacks(b *pgx.Batch) {
	for _, qq := range b.QueuedQueries {
		if fn := qq.Fn; fn != nil {
			qq.Fn = func(br pgx.BatchResults) (err error) {
				defer recoverInto(&err, "a queued statement's callback")
				return fn(br)
			}
		}
	}
}

func recoverInto(err *error, who string) {
	if v := recover(); v != nil {
		*err = fmt.Errorf("%w: %s: %v\n%s", ErrPanicked, who, v, clipStack(debug.Stack()))
	}
}

// clipStack keeps the start of a stack trace: enough to find the frame,
// bounded for the dead-letter store.
func clipStack(s []byte) string {
	const max = 1500
	if len(s) > max {
		s = s[:max]
	}
	return string(s)
}
