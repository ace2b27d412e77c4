// Package projectiontest is strata's public test kit for projections, the
// way river ships rivertest: recorded histories (Load, Write), seeding them
// into a real PostgreSQL event log (Seed, Append), reading checkpoints,
// rendering read-model tables found from the projection and the catalog
// (Dump), and holding a migration line's tables to the engine's tenancy
// rules in the catalog and at run time (CheckTenantTables). Modules' tests
// and the engine's own tests use it; it is imported by tests only.
package projectiontest
