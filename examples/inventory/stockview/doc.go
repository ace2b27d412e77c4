// Package stockview is the inventory module's read side: the projection of
// stock per SKU (inventory_items) and its table's migration line. It
// imports the engine (projections, db) and examples/inventory/stock; the
// engine never imports it.
package stockview
