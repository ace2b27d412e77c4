-- Verified tenant erasure (ARCHITECTURE decisions 12 and 13;
-- docs/tenants.md, "Erasure").
--
-- tenant_directory_members: every serving process's tenant Directory while
-- it runs (one row per process, by a random member id). It heartbeats
-- (heartbeat_at) and acknowledges the erasure's barrier notifications
-- (seen_version: the highest directory version it has acknowledged; a
-- barrier for version V is acknowledged only after every change committed
-- before it was applied, because NOTIFY delivers in commit order on the
-- one listening connection). A member whose heartbeat is older than the
-- lease (STRATA_TENANT_DIRECTORY_LEASE) is treated as gone by the barrier,
-- which is safe because a Directory that could not heartbeat within the
-- lease refuses every tenant (503) until it can. Global: it holds no
-- tenant's data (host, pid and times of strata's own processes). The
-- application role writes only its own bookkeeping columns.
CREATE TABLE tenant_directory_members (
    member_id    text        PRIMARY KEY CHECK (length(member_id) BETWEEN 1 AND 100),
    role         text        NOT NULL DEFAULT '' CHECK (length(role) <= 100),
    host         text        NOT NULL DEFAULT '' CHECK (length(host) <= 255),
    pid          int         NOT NULL DEFAULT 0,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    seen_version bigint      NOT NULL DEFAULT 0
);
GRANT SELECT, INSERT, DELETE ON tenant_directory_members TO strata_app;
GRANT UPDATE (heartbeat_at, seen_version) ON tenant_directory_members TO strata_app;

-- tenant_erasures: one row per erasure workflow (one per tenant: an erased
-- tenant stays a tombstone and is not provisioned again). steps holds when
-- each step finished (suppress, quiesce, inventory, erase, verify,
-- receipt); stores the inventory with each store's mode, count before
-- (taken once, at the inventory step, and kept: a rerun reports the same
-- counts), state pending/done/unknown, count after and verification; the
-- receipt is written last and kept after the data is gone. Global and
-- owner-only: the platform path reads and writes it, no serving role.
CREATE TABLE tenant_erasures (
    tenant      text        PRIMARY KEY CHECK (tenant ~ '^[a-z0-9-]{1,63}$'),
    receipt_id  uuid        NOT NULL,
    reason      text        NOT NULL CHECK (length(reason) BETWEEN 1 AND 500),
    requested_by text       NOT NULL,
    -- the last tenant_audit row when the workflow began: the audit's count
    -- before is of the rows up to it (the erasure's own calls, and those of
    -- its reruns, are anonymized too but not counted, so that every rerun
    -- reports the same count).
    audit_floor bigint      NOT NULL DEFAULT 0,
    started_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    steps       jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(steps) = 'object'),
    barrier     jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(barrier) = 'object'),
    quiesce     jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(quiesce) = 'object'),
    stores      jsonb       NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(stores) = 'array'),
    last_error  text,
    receipt     jsonb,
    finished_at timestamptz
);

-- The log refuses new events of a tenant that is being erased or erased,
-- whoever appends them: the command API (already refused at the gate),
-- process managers' outgoing commands and deadlines, an import. Checked
-- once per statement against the directory (strata_app may read a
-- tenant's status), so a committed `erasing` fences every later append;
-- the workflow waits for appends that were in progress at that moment.
CREATE FUNCTION events_refuse_erased() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    t text;
BEGIN
    SELECT n.tenant_id INTO t FROM new_events n JOIN strata.tenants d ON d.id = n.tenant_id
    WHERE d.status IN ('erasing', 'erased') LIMIT 1;
    IF t IS NOT NULL THEN
        RAISE EXCEPTION 'tenant % is being erased: the log refuses its events', t USING ERRCODE = 'P0001', HINT = 'tenant_erasing';
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER events_refuse_erased AFTER INSERT ON events REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION events_refuse_erased();

-- strata_eraser (a NOLOGIN role created with the others; the owner login
-- is a member and takes it with SET LOCAL ROLE) is the only role that may
-- delete a tenant's rows from the tenant tables, the log included: SELECT
-- and DELETE with a policy on the transaction's tenant, granted on every
-- table that has a tenant_id column by db.EnsureEraserGrants at the end of
-- every `strata migrate up` (so a module's new table is covered without a
-- list) and again by the workflow before it erases (for a rebuild's shadow
-- tables). The relay's watermill-sql copy of the log has no tenant_id and
-- no row-level security (the tenant is in each row's metadata): the eraser
-- may delete from it directly.
GRANT USAGE ON SCHEMA strata TO strata_eraser;
GRANT SELECT, DELETE ON "watermill_strata_events" TO strata_eraser;
