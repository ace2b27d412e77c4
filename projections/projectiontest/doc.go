// Package projectiontest is strata's public test kit for projections, the
// way river ships rivertest: recorded histories (Load, Write), seeding them
// into a real PostgreSQL event log (Seed, Append), reading checkpoints, and
// rendering read-model tables found from the projection and the catalog
// (Dump). Modules' tests and the engine's own tests use it; it is imported
// by tests only.
package projectiontest
