// Package linearize records concurrent histories of the event store and of
// the idempotency-key register and has porcupine
// (github.com/anishathalye/porcupine), a linearizability checker nobody on
// the team wrote, judge them against sequential models:
//
//   - StreamModel: a versioned stream with optimistic concurrency.
//     append(expected, n events) answers ok(new last version), conflict or
//     indeterminate; read() answers the versions seen and which append
//     wrote each. Partitioned per (tenant, stream).
//   - RegisterModel: the idempotency-key register. A command under (tenant,
//     key) with a request hash answers the first execution's outcome for
//     the same hash, forever, and "reused" for another hash. Partitioned
//     per (tenant, key).
//   - ConditionModel: a tenant's tagged events under tagged reads and
//     appends conditioned on them (condition.go). read(query) answers the
//     matching events; a conditional append succeeds iff the events its
//     query matches are still those its read saw. Partitioned per tenant
//     and connected group of tags.
//
// Indeterminate operations (a timeout, a cancelled context, a dropped
// connection: the effect may or may not have happened) are recorded the
// porcupine way: their return is at the end of the history, so the checker
// may place their effect anywhere after the call, and the model accepts
// them with or without effect (see StreamModel).
//
// Histories use a logical clock (an atomic counter ticked at every call
// and return) rather than wall time: its order agrees with real time, with
// no clock resolution or skew to produce a false verdict.
//
// The package imports only the event store port and domain/event, so the
// fault harness can record its own histories with it.
package linearize
