// Package decision is the vocabulary of a process manager's pure Decide
// (ARCHITECTURE decision 10): the inputs an instance receives (a log event,
// the outcome of a step it issued, a fired deadline) and the decision it
// returns (its new state and status, the commands and intents it issues,
// the deadlines it sets or cancels). The runtime that stores, dispatches
// and fires them is commands/process, which names these same types
// (process.Input is decision.Input); they live here so that a module's
// domain package, which may import the standard library and strata's
// domain only, decides in the runtime's own types instead of mirroring
// them and translating at the edge.
//
// It imports the standard library, domain and domain/event.
package decision
