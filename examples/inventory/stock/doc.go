// Package stock is the inventory module's aggregate: stock of one SKU
// per tenant, received into stock, reserved for a while and then either
// released or committed (the reserved units leave). It guards the rules
// (no negative availability, a reservation ID used once per SKU, release
// and commit only an open reservation) and is idempotent on the
// reservation ID. It imports only domain and the standard library.
package stock
