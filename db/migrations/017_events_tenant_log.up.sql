-- One tenant's events in log order (issue 35, "tenant work at the tenant's
-- size"): `replay verify --tenant` and the other tenant-scoped readers page
-- by (tenant_id, tx_id, position) under the same horizon as the global
-- log's readers, so their cost follows the tenant's events, not the log's.
CREATE INDEX events_tenant_log ON events (tenant_id, tx_id, position);
