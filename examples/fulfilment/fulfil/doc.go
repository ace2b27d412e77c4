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
// It imports the standard library, domain/event and examples/orders/order (the event
// types it consumes); the engine's process runtime (commands/process) is
// reached through examples/fulfilment/fulfilcmd, which adapts Process.Decide to a
// process.Definition. Decide never reads the clock: times come from the
// inputs, so a decision replays identically.
package fulfil
