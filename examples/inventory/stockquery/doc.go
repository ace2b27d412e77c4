// Package stockquery is the inventory module's query side: the reader of
// stock per SKU and its query routes. It imports the engine (readmodels,
// readmodels/queryapi) and examples/inventory/stockview (the names of the
// projections behind each route); the engine never imports it.
package stockquery
