// Package portability exports a tenant's data as one archive and imports
// an archive into an empty tenant (docs/tenants.md, "Export and import";
// issue 15 item 4).
//
// An archive is a gzip'd tar: manifest.json (format version, tenant, per
// file its line count and SHA-256, and a volatile "export" section),
// events.jsonl (the tenant's events in log order, with ordinals instead of
// the source's positions), idempotency.jsonl, dead_letters.jsonl and
// readmodels/<table>.jsonl for every read-model table of every module.
//
// Tenant enforcement is the database's, as for queries: the events and
// idempotency records are read (and imported) as strata_app, the read
// models and dead letters as strata_projector, each in a transaction
// whose app.tenant_id is the tenant, so row-level security confines every
// read to the tenant whatever the query asks for. Events are never read as
// the projector, whose policy on the log crosses tenants.
//
// An import is history, not live traffic (ARCHITECTURE decision 18):
// bounded (ImportLimits), checked whole before anything is written
// (validate.go, archive_read.go: strict JSON, regular files with the
// format's names only, every event through its module's codec and rules),
// loaded in bounded transactions under the tenant's import lock and
// resumable (load.go, import_state.go), marked in tenant_arrivals so that
// no process manager or relay acts on it again, and given new,
// derived event IDs under another tenant (ids.go).
//
// The engine knows no module: the read-model tables and the columns that
// hold log positions come from the modules' registered projections, which
// cmd/strata passes in Config.
package portability
