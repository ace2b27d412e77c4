-- Cold tenants archived to object storage and re-hydrated (issue 32 §3;
-- docs/tenants.md, "Archive"). An archive writes the tenant's export to an
-- S3-compatible store, reads it back to verify it, purges the tenant's rows
-- here and leaves the directory row archived; a re-hydration imports the
-- object back and serves the tenant again.
--
-- The statuses: archiving (out of service, being written out: nothing of
-- the tenant is destroyed until the object is verified), archived (its data
-- is only in the object), rehydrating (being imported back).
ALTER TABLE tenants DROP CONSTRAINT tenants_status_check;
ALTER TABLE tenants ADD CONSTRAINT tenants_status_check
    CHECK (status IN ('provisioning', 'active', 'suspended', 'erasing', 'erased', 'archiving', 'archived', 'rehydrating'));

-- The log refuses the events of an archiving or archived tenant as it does
-- an erased one's (a process manager's deadline, say, would otherwise append
-- an event after the export read the log, and the purge would drop it).
-- A rehydrating tenant's events are the import's.
CREATE OR REPLACE FUNCTION events_refuse_erased() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    t text;
    s text;
BEGIN
    SELECT n.tenant_id, d.status INTO t, s FROM new_events n JOIN strata.tenants d ON d.id = n.tenant_id
    WHERE d.status IN ('erasing', 'erased', 'archiving', 'archived') LIMIT 1;
    IF t IS NOT NULL AND s IN ('erasing', 'erased') THEN
        RAISE EXCEPTION 'tenant % is being erased: the log refuses its events', t USING ERRCODE = 'P0001', HINT = 'tenant_erasing';
    ELSIF t IS NOT NULL THEN
        RAISE EXCEPTION 'tenant % is archived: the log refuses its events until it is re-hydrated', t USING ERRCODE = 'P0001', HINT = 'tenant_archived';
    END IF;
    RETURN NULL;
END $$;

-- One row per tenant: its archive (phase archiving, then archived) and its
-- re-hydration (rehydrating, then rehydrated); a later archive of the same
-- tenant replaces a rehydrated row. steps maps each workflow step done to
-- when; the object's key, size and SHA-256 are recorded once it is
-- uploaded, and a re-hydration refuses an object whose bytes differ.
-- Only the owner reads and writes it.
CREATE TABLE tenant_archives (
    tenant         text        PRIMARY KEY CHECK (tenant ~ '^[a-z0-9-]{1,63}$'),
    archive_id     uuid        NOT NULL,
    phase          text        NOT NULL CHECK (phase IN ('archiving', 'archived', 'rehydrating', 'rehydrated')),
    prior_status   text        NOT NULL CHECK (prior_status IN ('active', 'suspended')),
    reason         text        NOT NULL CHECK (length(reason) BETWEEN 1 AND 500),
    requested_by   text        NOT NULL,
    steps          jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(steps) = 'object'),
    store          text        NOT NULL DEFAULT '',
    object_key     text        NOT NULL DEFAULT '',
    bytes          bigint      NOT NULL DEFAULT 0,
    sha256         text        NOT NULL DEFAULT '',
    manifest       jsonb,
    barrier        jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(barrier) = 'object'),
    quiesce        jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(quiesce) = 'object'),
    receipt        jsonb,
    rehydration    jsonb,
    last_error     text        CHECK (length(last_error) <= 2000),
    started_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    finished_at    timestamptz
);
