-- Tiers, cohorts and retention (docs/tenants.md, "Tiers", "Cohorts and
-- tenant-aware metrics", "Retention").
--
-- tenant_tiers: a named set of default quotas (same keys and syntax as
-- tenants.quotas). A tenant's effective quota, key by key, is its own
-- quota, else its tier's, else the serving process's environment default.
-- Global like tenants (no tenant_id, no RLS, listed in globalTables): every
-- serving process must know every tier; only the owner writes. A change
-- takes a version from tenants_version and is pushed on the tenants'
-- channel as "tier:<name>:<version>", on which a Directory reloads.
CREATE TABLE tenant_tiers (
    name        text        PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_-]{0,62}$'),
    quotas      jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(quotas) = 'object'),
    description text        NOT NULL DEFAULT '' CHECK (length(description) <= 200),
    version     bigint      NOT NULL DEFAULT nextval('tenants_version'),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE TRIGGER tenant_tiers_touch BEFORE UPDATE ON tenant_tiers FOR EACH ROW EXECUTE FUNCTION tenants_touch();
CREATE FUNCTION tenant_tiers_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('strata_tenants', 'tier:' || NEW.name || ':' || NEW.version);
    RETURN NULL;
END $$;
CREATE TRIGGER tenant_tiers_notify AFTER INSERT OR UPDATE ON tenant_tiers FOR EACH ROW EXECUTE FUNCTION tenant_tiers_notify();

-- The seeded tiers. free is below the process defaults (100/s commands,
-- 500/s queries; 32/64/16 in flight), pro is above them, enterprise sets
-- none of its own: its tenants get the process defaults unless their own
-- quotas say more.
INSERT INTO tenant_tiers (name, description, quotas) VALUES
    ('free', 'evaluation and small tenants',
     '{"rate_commands": "20/s,burst=40", "rate_queries": "100/s,burst=200", "in_flight_commands": "8", "in_flight_queries": "16", "in_flight_waits": "4"}'),
    ('pro', 'paying tenants',
     '{"rate_commands": "200/s,burst=400", "rate_queries": "1000/s,burst=2000", "in_flight_commands": "32", "in_flight_queries": "64", "in_flight_waits": "16"}'),
    ('enterprise', 'the process defaults, raised per tenant with its own quotas', '{}');

-- tenants.tier: NULL means no tier (the process defaults under the
-- tenant's own quotas), which is what every tenant of an installation from
-- before this migration keeps and what provisioning gives unless asked.
-- A tier cannot be dropped while a tenant uses it.
-- tenants.cohort: a named group of tenants whose metrics carry tenant_id
-- besides tenant_tier (bounded: STRATA_METRICS_COHORT_CAP per process).
ALTER TABLE tenants
    ADD COLUMN tier   text REFERENCES tenant_tiers (name) ON UPDATE CASCADE,
    ADD COLUMN cohort text CHECK (cohort ~ '^[a-z][a-z0-9_-]{0,62}$');

-- The serving role enforces the tier's quotas and labels metrics.
GRANT SELECT (tier, cohort) ON tenants TO strata_app;
GRANT SELECT ON tenant_tiers TO strata_app;

-- Retention (tenants.retention: idempotency_records, resolved_dead_letters,
-- audit; docs/tenants.md). The job runs in the projector role's process,
-- as strata_projector, one transaction per tenant and batch with
-- app.tenant_id set: row-level security confines each delete to that
-- tenant. It reads which tenants exist and their windows (a column grant,
-- nothing else of the directory), and may delete — and read the columns
-- its WHERE needs, nothing more — from the three tables below.
GRANT SELECT (id, status, retention) ON tenants TO strata_projector;

CREATE POLICY idempotency_keys_retention_read ON idempotency_keys FOR SELECT TO strata_projector
    USING (tenant_id = current_setting('app.tenant_id', true));
CREATE POLICY idempotency_keys_retention_delete ON idempotency_keys FOR DELETE TO strata_projector
    USING (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT (tenant_id, key, created_at), DELETE ON idempotency_keys TO strata_projector;
CREATE INDEX idempotency_keys_created ON idempotency_keys (tenant_id, created_at);

-- dead_letters already has the projector's tenant policy (004); the job
-- deletes only resolved letters (status retried, discarded, superseded,
-- resolved before the window), never parked ones.
GRANT DELETE ON dead_letters TO strata_projector;

CREATE POLICY admin_audit_retention_read ON admin_audit FOR SELECT TO strata_projector
    USING (tenant_id = current_setting('app.tenant_id', true));
CREATE POLICY admin_audit_retention_delete ON admin_audit FOR DELETE TO strata_projector
    USING (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT (tenant_id, id, at), DELETE ON admin_audit TO strata_projector;
