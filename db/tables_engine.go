package db

// engineTables declares every table the engine's migrations (and
// bootstrap's schema_migrations) create, each in its class (tables.go). A
// migration that creates a table declares it here in the same commit: the
// catalog test (readmodels/catalog_test.go) fails on a table in no
// classification, and an erasure refuses to start on such a schema.
func engineTables() []Table {
	return []Table{
		// Tenant-scoped: tenant_id, row-level security; an erasure deletes
		// the tenant's rows as strata_eraser under the tenant's setting.
		TenantTable("events"),
		TenantTable("idempotency_keys"),
		TenantTable("admin_audit"),
		TenantTable("relay_applied"),
		TenantTable("dead_letters"),
		TenantTable("parked_streams"),
		TenantTable("process_instances"),
		TenantTable("process_steps"),
		TenantTable("process_deadlines"),
		TenantTable("process_history"),
		TenantTable("projection_ledger"),
		TenantTable("projection_ledger_marks"),
		TenantTable("subject_keys"),
		TenantTable("subject_erasures"),
		TenantTable("event_tags"),
		TenantTable("aggregate_snapshots"),

		// Tenant-referencing, in the order an erasure deals with them (an
		// archive's chunks before its job, whose row names the tenant).
		ReferencingTable("watermill_strata_events", TableErase{Mode: EraseDelete,
			Count:  `SELECT count(*) FROM watermill_strata_events WHERE metadata::jsonb->>'tenant' = $1`,
			Delete: `DELETE FROM watermill_strata_events WHERE ctid = ANY (ARRAY(SELECT ctid FROM watermill_strata_events WHERE metadata::jsonb->>'tenant' = $1 LIMIT $2))`},
			"the relay's watermill-sql copy of the log (migration 003): the tenant is in each message's metadata"),
		ReferencingTable("tenant_export_chunks", TableErase{Mode: EraseDelete,
			Count: `SELECT count(*) FROM tenant_export_chunks c JOIN tenant_exports e ON e.id = c.job WHERE e.tenant = $1`,
			Delete: `DELETE FROM tenant_export_chunks WHERE ctid = ANY (ARRAY(SELECT c.ctid FROM tenant_export_chunks c JOIN tenant_exports e ON e.id = c.job
WHERE e.tenant = $1 LIMIT $2))`},
			"an export's archive (migration 010): gzip'd tar bytes of the tenant's events, idempotency records, read models and dead letters, by job"),
		ReferencingTable("tenant_exports", TableErase{Mode: EraseDelete,
			Count:  `SELECT count(*) FROM tenant_exports WHERE tenant = $1`,
			Delete: `DELETE FROM tenant_exports WHERE ctid = ANY (ARRAY(SELECT ctid FROM tenant_exports WHERE tenant = $1 LIMIT $2))`},
			"export jobs (migration 010): the tenant in `tenant`, the archive's manifest"),
		ReferencingTable("tenant_arrivals", TableErase{Mode: EraseDelete,
			Count:  `SELECT count(*) FROM tenant_arrivals WHERE tenant = $1`,
			Delete: `DELETE FROM tenant_arrivals WHERE ctid = ANY (ARRAY(SELECT ctid FROM tenant_arrivals WHERE tenant = $1 LIMIT $2))`},
			"a tenant that arrived by a move (migration 015): its name and the position through which its events are copies"),
		ReferencingTable("tenant_write_freezes", TableErase{Mode: EraseDelete,
			Count:  `SELECT count(*) FROM tenant_write_freezes WHERE tenant = $1`,
			Delete: `DELETE FROM tenant_write_freezes WHERE ctid = ANY (ARRAY(SELECT ctid FROM tenant_write_freezes WHERE tenant = $1 LIMIT $2))`},
			"a move's write freeze (migration 014); the erased tenant's writes are refused by the log's erasure trigger instead"),
		ReferencingTable("tenant_moves", TableErase{Mode: EraseDelete,
			Count:  `SELECT count(*) FROM tenant_moves WHERE tenant = $1`,
			Delete: `DELETE FROM tenant_moves WHERE ctid = ANY (ARRAY(SELECT ctid FROM tenant_moves WHERE tenant = $1 LIMIT $2))`},
			"the tenant's moves between placements (migration 014): phases, counts, receipts"),
		ReferencingTable("tenant_archives", TableErase{Mode: EraseDelete,
			Count:  `SELECT count(*) FROM tenant_archives WHERE tenant = $1`,
			Delete: `DELETE FROM tenant_archives WHERE ctid = ANY (ARRAY(SELECT ctid FROM tenant_archives WHERE tenant = $1 LIMIT $2))`},
			"the tenant's archive to object storage and its re-hydration (migration 019): the object's key and hashes, the archive's manifest and receipt; the object itself is the archive store's (an external store of the erasure)"),
		ReferencingTable("tenant_audit", TableErase{Mode: EraseAnonymize,
			Count: `SELECT count(*) FROM tenant_audit WHERE tenant = $1 OR subject LIKE '%@' || $1`},
			"the platform calls about the tenant (migration 008): kept as the platform's record, the tenant, the caller's token tenant and the arguments replaced by the receipt's pseudonym"),
		ReferencingTable("tenants", TableErase{Mode: EraseKeep},
			"the directory's tombstone (migration 008): the ID stays, status erased and the name cleared, so that the ID is never provisioned again and the log refuses its events"),
		ReferencingTable("tenant_erasures", TableErase{Mode: EraseKeep},
			"the erasure's workflow and receipt (migration 009): the proof that the data is gone must outlive it"),

		// Global: no tenant's data.
		GlobalTable("schema_migrations", "the applied migrations of every line"),
		GlobalTable("projection_checkpoints", "one row per runner (projection, rebuild, process manager, relay, consumer): position and state; a one-tenant rebuild's row names the tenant only by a hash"),
		GlobalTable("projection_ledger_since", "per checkpoint generation, the position its completeness ledger counts from"),
		GlobalTable("watermill_offsets_strata_events", "the relay's watermill-sql consumer groups and their offsets"),
		GlobalTable("engine_settings", "installation-wide settings"),
		GlobalTable("key_encryption_keys", "the key-encryption keys held in the database (migration 020): they wrap the tenants' data keys and hold no tenant's data"),
		GlobalTable("tenant_directory_members", "strata's own serving processes (host, pid, heartbeats) for the directory's barrier"),
		GlobalTable("tenant_tiers", "named default quotas"),
		GlobalTable("placements", "the databases tenants are placed in"),
		GlobalTable("log_watermark", "one row: the end of the log before a purge deleted its newest events"),
	}
}
