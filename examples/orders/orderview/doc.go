// Package orderview is the orders module's read side: the four projections
// of order events (order details, the order list, customer summaries and
// daily revenue), their tables' migration line, and golden data. It imports
// the engine (projections) and examples/orders/order; the engine never imports it.
package orderview
