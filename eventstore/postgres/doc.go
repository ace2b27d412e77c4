// Package postgres is the PostgreSQL adapter of the event store port. It
// appends under a per-stream advisory lock taken before the transaction's
// first write, stamps every event with its writing transaction's xid8 and
// serves the global log by (tx_id, position) below the oldest running
// transaction, so readers never skip an event that commits late
// (ARCHITECTURE decision 1). It imports the port, domain and db.
package postgres
