// Package fulfilcmd is the fulfilment module's write side: the process
// manager that coordinates the order and inventory modules and the payment
// provider. It hands examples/fulfilment/fulfil's pure state machine to the
// engine's process runtime (a process.Definition named "fulfilment"; the
// domain decides in the runtime's own types, nothing is translated),
// binds the commands its decisions issue (inventory.reserve, release,
// commit; order.pay, cancel) over the modules' own handlers, and gives the
// http provider's port (payhttp) when STRATA_PAYMENT_PROVIDER=http. It
// has no events and no command routes of its own.
//
// It imports the engine (commands, commands/commandapi, commands/process),
// the modules whose commands it issues (examples/inventory/stockcmd,
// examples/orders/ordercmd) and its domain.
package fulfilcmd
