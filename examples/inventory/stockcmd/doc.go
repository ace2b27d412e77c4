// Package stockcmd is the inventory module's write side: the item
// aggregate's description for the engine's handler, its commands and their
// HTTP routes. It imports the engine (commands, commands/commandapi) and
// examples/inventory/stock; the engine never imports it.
package stockcmd
