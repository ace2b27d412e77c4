// Package orderquery is the orders module's query side: the reader of the
// order read models and the query routes over them (one order, the order
// list, customer summaries, daily revenue). It imports the engine
// (readmodels, readmodels/queryapi, httpapi), examples/orders/order and
// examples/orders/orderview (for the names of the projections behind each route);
// the engine never imports it.
package orderquery
