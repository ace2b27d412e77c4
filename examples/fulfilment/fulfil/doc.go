// Package fulfil is the order-fulfilment process as a pure state
// machine (ARCHITECTURE decision 10): given an instance's state and one
// input (an order event, the outcome of a step it issued, a fired
// deadline) it decides the new state, the commands and payment intents to
// issue and the deadline to set or cancel. One instance follows one order;
// it reserves the order's lines in inventory when the order is placed,
// takes the payment (through a provider, or lets the customer pay), commits
// the reservations when the order is paid, and releases them (cancelling
// the order when it is ours to cancel) when it is cancelled, out of stock,
// declined or late.
//
// It imports the standard library, domain/event, domain/decision (the
// process-manager vocabulary: Decide takes a decision.Input and returns a
// decision.Decision, the runtime's own types) and examples/orders/order
// (the event types it consumes). The commands it issues are named and
// carried as JSON payloads of their commands' shape, so it imports no
// other module's write side; examples/fulfilment/fulfilcmd hands Decide to
// the engine's runtime (commands/process) and binds the commands. Decide
// never reads the clock: times come from the inputs, so a decision replays
// identically.
package fulfil
