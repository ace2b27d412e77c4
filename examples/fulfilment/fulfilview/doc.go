// Package fulfilview is the fulfilment module's read side: the projection
// order_fulfilment (one row per order: the stage of its fulfilment, its
// lines, how many of its reservations were made, released and committed,
// the payment reference and the cancellation reason) and the module's
// migration line. It is built from the log alone — the order events and
// the inventory events whose reservation_id is the order's ID — so a
// rebuild reproduces it; it does not read the process's own tables.
//
// It imports the engine (projections, db) and the domains whose
// events it reads (examples/orders/order, examples/inventory/stock).
package fulfilview
