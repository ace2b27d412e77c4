// Package fulfilquery is the fulfilment module's query side: the reader of
// order_fulfilment (where each order's fulfilment stands, as the log shows
// it) and its query route, GET /v1/orders/{id}/fulfilment. It imports the
// engine (readmodels, readmodels/queryapi, httpapi) and
// examples/fulfilment/fulfilview (the projection's name); the engine never imports
// it.
package fulfilquery
