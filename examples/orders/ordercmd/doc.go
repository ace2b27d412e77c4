// Package ordercmd is the orders module's write side: the order aggregate's
// description for the engine's handler, its commands, and their HTTP
// routes. It imports the engine (commands, commands/commandapi,
// httpapi) and examples/orders/order; the engine never imports it.
package ordercmd
