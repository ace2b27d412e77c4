-- The dead-letter store and the bookkeeping of rebuilds (ARCHITECTURE
-- decisions 5 and 6; docs/replay.md).
--
-- Both new tables are tenant tables and follow the rules of 002_read_side:
-- tenant_id NOT NULL with the pattern CHECK, RLS ENABLE'd and FORCE'd, a
-- SELECT policy for strata_app and a USING + WITH CHECK policy for
-- strata_projector on the transaction's tenant, unique keys starting with
-- tenant_id, explicit grants and no TRUNCATE.
--
-- There is deliberately no cross-tenant policy on them. The projector
-- already reads every tenant's events through the one named cross-tenant
-- policy (events_projector_read_all); the operator tooling that lists dead
-- letters of every tenant learns the tenants from the log that way and then
-- reads each tenant's letters under that tenant's setting, like every other
-- access. What must be known across tenants without that (the metrics, the
-- status table, whether a runner has to look for parked streams at all) is
-- kept as counters on the projection's checkpoint row, which say nothing
-- about any one tenant.

-- projection_checkpoints gains:
--   generation:     the identity of the projection's current rows. A full
--                   rebuild builds a new generation in shadow tables under a
--                   checkpoint row of its own (<name>__rebuild) and the swap
--                   makes it the live one; dead letters and parked streams
--                   belong to a generation, so the swap carries the rebuild's
--                   own letters over and leaves the replaced ones behind
--                   without touching any tenant's rows in that transaction.
--   parked_streams: streams of this generation parked now (all tenants);
--   parked_letters: dead letters of this generation still parked;
--                   both are changed in the transactions that park, retry or
--                   discard, never recounted.
--   rebuild:        on a <name>__rebuild row, what the rebuild is (the live
--                   projection, whole or one tenant, its shadow tables, the
--                   indexes still to build before the swap); NULL otherwise.
--                   A tenant is recorded only as a hash.
ALTER TABLE projection_checkpoints
    ADD COLUMN generation     uuid   NOT NULL DEFAULT gen_random_uuid(),
    ADD COLUMN parked_streams bigint NOT NULL DEFAULT 0,
    ADD COLUMN parked_letters bigint NOT NULL DEFAULT 0,
    ADD COLUMN rebuild        jsonb;

-- dead_letters: one row per event a projection did not apply because the
-- event failed (the head of its stream: attempts >= 1) or because an
-- earlier event of its stream had failed (parked behind it: attempts 0).
-- Written in the transaction that moves the projection's checkpoint past
-- the event. The event is copied whole (data, metadata, position), so a
-- letter can be shown and re-applied without the log.
--   status parked:     waiting; the runner retries the head with backoff
--                      while parked_streams.next_attempt_at is set, an
--                      operator retries or discards it afterwards;
--   status retried:    applied by a retry (resolved_at, resolved_by);
--   status discarded:  never to be applied (resolved_by and reason are
--                      required: a discard is never silent);
--   status superseded: its generation was replaced by a rebuild of the
--                      tenant, which re-applied the event from the log.
-- Letters are history: the projector may insert and update them, nobody
-- may delete them.
CREATE TABLE dead_letters (
    tenant_id       text          NOT NULL CHECK (tenant_id ~ '^[a-z0-9-]{1,63}$'),
    id              bigint        GENERATED ALWAYS AS IDENTITY,
    projection      text          NOT NULL CHECK (projection ~ '^[a-z][a-z0-9_]{0,62}$'),
    generation      uuid          NOT NULL,
    stream_id       text          NOT NULL,
    version         bigint        NOT NULL CHECK (version > 0),
    event_id        uuid          NOT NULL,
    pos_major       numeric(20,0) NOT NULL,
    pos_minor       numeric(20,0) NOT NULL,
    event_type      text          NOT NULL,
    schema_version  int           NOT NULL,
    data            jsonb         NOT NULL,
    metadata        jsonb         NOT NULL,
    recorded_at     timestamptz   NOT NULL,
    error           text          NOT NULL,
    attempts        int           NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    first_failed_at timestamptz,
    last_failed_at  timestamptz,
    parked_at       timestamptz   NOT NULL DEFAULT now(),
    status          text          NOT NULL DEFAULT 'parked'
                                  CHECK (status IN ('parked', 'retried', 'discarded', 'superseded')),
    resolved_at     timestamptz,
    resolved_by     text,
    reason          text,
    CONSTRAINT dead_letters_pkey PRIMARY KEY (tenant_id, id),
    CONSTRAINT dead_letters_event UNIQUE (tenant_id, projection, generation, event_id),
    CONSTRAINT dead_letters_resolved CHECK ((status = 'parked') = (resolved_at IS NULL)),
    CONSTRAINT dead_letters_discard_reason CHECK (status <> 'discarded' OR (resolved_by IS NOT NULL AND reason IS NOT NULL))
);
-- A stream's letters in order (retry), and a tenant's letters by projection.
CREATE INDEX dead_letters_stream ON dead_letters (tenant_id, projection, generation, stream_id, version);

-- parked_streams: the streams a projection (generation) does not apply
-- now. While a row exists every event of the stream goes to dead_letters
-- behind head_version. next_attempt_at is when the runner retries the head
-- next (NULL: no automatic attempt left; an operator must act).
CREATE TABLE parked_streams (
    tenant_id       text        NOT NULL CHECK (tenant_id ~ '^[a-z0-9-]{1,63}$'),
    projection      text        NOT NULL CHECK (projection ~ '^[a-z][a-z0-9_]{0,62}$'),
    generation      uuid        NOT NULL,
    stream_id       text        NOT NULL,
    head_version    bigint      NOT NULL CHECK (head_version > 0),
    parked_at       timestamptz NOT NULL DEFAULT now(),
    next_attempt_at timestamptz,
    CONSTRAINT parked_streams_pkey PRIMARY KEY (tenant_id, projection, generation, stream_id)
);

ALTER TABLE dead_letters ENABLE ROW LEVEL SECURITY;
ALTER TABLE dead_letters FORCE ROW LEVEL SECURITY;
CREATE POLICY dead_letters_app ON dead_letters FOR SELECT TO strata_app
    USING (tenant_id = current_setting('app.tenant_id', true));
CREATE POLICY dead_letters_projector ON dead_letters TO strata_projector
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));

ALTER TABLE parked_streams ENABLE ROW LEVEL SECURITY;
ALTER TABLE parked_streams FORCE ROW LEVEL SECURITY;
CREATE POLICY parked_streams_app ON parked_streams FOR SELECT TO strata_app
    USING (tenant_id = current_setting('app.tenant_id', true));
CREATE POLICY parked_streams_projector ON parked_streams TO strata_projector
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));

GRANT SELECT ON dead_letters, parked_streams TO strata_app;
GRANT SELECT, INSERT, UPDATE ON dead_letters TO strata_projector;
GRANT SELECT, INSERT, UPDATE, DELETE ON parked_streams TO strata_projector;
