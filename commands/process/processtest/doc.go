// Package processtest is strata's public test kit for process managers,
// as commands/commandtest is for aggregates and projections/projectiontest
// for projections. It has two parts:
//
//   - For, a given/when/then scenario over a Definition's Decide, pure (no
//     database): given past inputs (events, outcomes of steps, fired
//     deadlines), when one more, then the decision (status, done, commands,
//     intents, deadlines set and cancelled). The kit feeds Decide as the
//     runtime does: the state through JSON, the events round-tripped
//     through their codecs and numbered in their stream, outcomes and
//     firings named after the steps and deadlines decided before, nothing
//     decided for a Done instance; it calls Decide twice per input
//     (determinism) and refuses what the runtime refuses
//     (decision.Decision.Validate).
//   - NewRuntime, the real runtime (runner, dispatcher, deadlines) over a
//     real PostgreSQL started by the kit, with a Clock the test moves: the
//     test appends events, settles the runner, advances the clock to fire
//     deadlines and retry steps, and reads instances, steps and deadlines;
//     every execution of a command or an intent is recorded (Calls), and
//     Answer makes fake commands and ports.
//
// A package whose tests use NewRuntime calls Main from its TestMain. The
// kit is imported by tests only; modules' tests and the engine's own use it.
package processtest
