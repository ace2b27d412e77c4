// Package order holds the Order aggregate. An Order is rebuilt from its past
// events with Apply (or Load) and decides what happens next with command
// methods (Create, AddLine, RemoveLine, Place, Pay, Cancel) that check every
// business rule and return new event payloads without mutating the
// aggregate; the caller appends those events to the order's stream
// ("order-<id>", see StreamID) and may apply them afterwards. Prices and
// totals are domain/money's Money (integer minor units and a three-letter
// currency, overflow-checked), shared with every other module rather than
// declared here. Events have stable type names and schema versions, and
// Codecs/NewRegistry describe them for the event store, including the
// upcaster for version 1 of order.line_added. Like its parent, this package
// imports the standard library and strata's domain packages only.
package order
