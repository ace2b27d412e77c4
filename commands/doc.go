// Package commands is the write side: one file per command, and the Handler
// that loads an order, lets the aggregate decide, and appends the new
// events with the loaded version as the expected one, retrying version
// conflicts a bounded number of times and recording idempotency outcomes
// atomically with the append. It imports domain and the eventstore port,
// never projections or readmodels, and no adapter.
package commands
