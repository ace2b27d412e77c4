-- The tenant directory: the control plane (ARCHITECTURE decision 12;
-- docs/tenants.md). Which tenants exist, their lifecycle status, their
-- quotas, retention settings and placement, how far their provisioning
-- got, and who changed any of it.
--
-- These tables are global, not tenant tables: they have no tenant_id
-- column (the directory's key is `id`, the audit's target is `tenant`) and
-- no row-level security, deliberately. Every serving process must know the
-- status and quotas of every tenant to enforce them before a request
-- reaches any tenant's data, so a policy on the transaction's tenant would
-- defeat the directory's purpose; what confines the serving role instead
-- is a column grant: strata_app may read id, status, quotas and version
-- (what it enforces) and nothing else, and no serving role may write.
-- Only the platform path writes: `strata tenants` and the platform routes
-- (/v1/platform/tenants, the platform scope), both on the owner connection
-- with SET LOCAL ROLE strata_owner per transaction. The projector role has
-- no grant at all: projections, the relay and dead letters do not stop
-- for a suspended tenant (its data is kept, not served).

-- tenants: one row per tenant.
--   status:       provisioning (the row exists, provisioning has not
--                 finished: not served while the directory is required),
--                 active, suspended (reversible; data kept, nothing
--                 served), erasing and erased (reserved for the erasure
--                 workflow of a later migration: nothing served);
--   status_reason: why it was last suspended or resumed (operators');
--   quotas:       per-tenant overrides of the serving limits, keys
--                 rate_commands, rate_queries (httpapi.ParseRate syntax,
--                 e.g. "500/s,burst=1000" or "unlimited") and
--                 in_flight_commands, in_flight_queries, in_flight_waits
--                 (httpapi.ParseSlots syntax: "128" or "unlimited"); a key
--                 that is absent keeps the process's default (the
--                 STRATA_RATE_* / STRATA_TENANT_IN_FLIGHT_* settings and
--                 their *_OVERRIDES);
--   retention:    per-tenant retention windows (documented, not enforced
--                 yet: the retention job of a later session reads it);
--   placement:    where the tenant's data lives; 'pool' is the shared
--                 database (placements come with ARCHITECTURE decision 14);
--   provisioning: the provisioning steps done, step name -> time done
--                 (tenancy.ProvisionSteps); a tenant whose status is
--                 provisioning shows here how far it got;
--   version:      from tenants_version, taken by every change: it orders a
--                 tenant's changes and names one in the push (NOTIFY
--                 strata_tenants, payload "<id>:<version>") so that a
--                 serving process keeps only the newest it has seen.
CREATE SEQUENCE tenants_version;
CREATE TABLE tenants (
    id            text        PRIMARY KEY CHECK (id ~ '^[a-z0-9-]{1,63}$'),
    name          text        NOT NULL DEFAULT '' CHECK (length(name) <= 200),
    status        text        NOT NULL DEFAULT 'provisioning'
                              CHECK (status IN ('provisioning', 'active', 'suspended', 'erasing', 'erased')),
    status_reason text        CHECK (length(status_reason) <= 500),
    quotas        jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(quotas) = 'object'),
    retention     jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(retention) = 'object'),
    placement     text        NOT NULL DEFAULT 'pool' CHECK (placement ~ '^[a-z][a-z0-9_-]{0,62}$'),
    provisioning  jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(provisioning) = 'object'),
    version       bigint      NOT NULL DEFAULT nextval('tenants_version'),
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- Every change takes a new version and announces itself, however it is
-- made (the platform path, or an operator's SQL on the owner connection):
-- the NOTIFY is sent at commit, so a serving process never sees a change
-- that may still roll back. Not SECURITY DEFINER: it runs as whoever
-- writes, which is only the owner.
CREATE FUNCTION tenants_touch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.version := nextval('tenants_version');
    NEW.updated_at := now();
    RETURN NEW;
END $$;
CREATE TRIGGER tenants_touch BEFORE UPDATE ON tenants FOR EACH ROW EXECUTE FUNCTION tenants_touch();

CREATE FUNCTION tenants_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('strata_tenants', NEW.id || ':' || NEW.version);
    RETURN NULL;
END $$;
CREATE TRIGGER tenants_notify AFTER INSERT OR UPDATE ON tenants FOR EACH ROW EXECUTE FUNCTION tenants_notify();

-- tenant_audit: every platform call, reads included (who, when, what,
-- which tenant). subject is the caller ("api:<sub>@<token tenant>" over
-- HTTP, "cli:<os user>" from `strata tenants`); tenant is the tenant acted
-- on (NULL for a list); detail holds the call's arguments (name, reason,
-- quotas). Written first, in its own transaction, so that a call that
-- fails afterwards is still recorded. Append-only: nobody is granted
-- UPDATE or DELETE (the erasure workflow will anonymize, as the owner).
CREATE TABLE tenant_audit (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         timestamptz NOT NULL DEFAULT now(),
    subject    text        NOT NULL CHECK (length(subject) BETWEEN 1 AND 300),
    action     text        NOT NULL CHECK (action ~ '^[a-z][a-z_]{0,62}$'),
    tenant     text        CHECK (tenant ~ '^[a-z0-9-]{1,63}$'),
    detail     jsonb       NOT NULL DEFAULT '{}',
    request_id text
);
CREATE INDEX tenant_audit_tenant ON tenant_audit (tenant, id);

-- engine_settings: installation-wide settings the engine decides once and
-- keeps. require_tenant_directory: whether a token's tenant must be an
-- active tenant of the directory to be served (STRATA_REQUIRE_TENANT_DIRECTORY
-- overrides it when set). This migration turns it on for a new
-- installation and off for an existing one, so an upgrade keeps serving
-- the tenants it served before: new means no event was ever appended to
-- the PostgreSQL log (its position sequence was never used) and no
-- projection has a checkpoint past the start (which also covers an
-- EventStoreDB log). The events table itself cannot tell: its rows are
-- under FORCE'd row-level security, invisible to the owner.
CREATE TABLE engine_settings (
    name   text        PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_]{0,62}$'),
    value  jsonb       NOT NULL,
    note   text        NOT NULL DEFAULT '',
    set_at timestamptz NOT NULL DEFAULT now()
);
DO $$
DECLARE
    used boolean;
BEGIN
    EXECUTE 'SELECT is_called FROM ' || pg_get_serial_sequence('events', 'position') INTO used;
    used := used OR EXISTS (SELECT 1 FROM projection_checkpoints WHERE pos_major > 0 OR pos_minor > 0);
    INSERT INTO engine_settings (name, value, note)
    VALUES ('require_tenant_directory', to_jsonb(NOT used),
            CASE WHEN used THEN 'existing installation at migration 008: unknown tenants keep being served'
                 ELSE 'new installation at migration 008: only active tenants of the directory are served' END);
END $$;

GRANT SELECT (id, status, quotas, version) ON tenants TO strata_app;
GRANT SELECT ON engine_settings TO strata_app;
