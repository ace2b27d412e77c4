-- The completeness ledger (issue 19; docs/guarantees.md "Completeness"):
-- per checkpoint generation (projection_checkpoints.generation: a
-- projection, its rebuild, a process manager) and tenant, what the runner has passed over of the tenant's events, written
-- in the transaction that moves the checkpoint past them. `strata replay
-- verify` recomputes the same figures from the store up to the checkpoint
-- and names the first event missing or extra.
--   events:  every event of the tenant the checkpoint has passed;
--            = applied + parked + skipped;
--   applied: handed to the projection;
--   parked:  sent to the dead-letter store (failing, or behind a failure);
--   skipped: passed over by type filter (not the projection's types);
--   hash:    rolling SHA-256 over the event IDs in log order:
--            h0 = 32 zero bytes, h(n) = sha256(h(n-1) || id(n) as 16 bytes);
--   pos:     the last event counted.
-- Keyed by generation, not by name: a rebuild's swap hands its generation
-- to the live checkpoint and with it the ledger the rebuild kept; a tenant
-- swap moves that tenant's rows like its dead letters. Rows of generations
-- no longer in projection_checkpoints are history.
-- The ledger holds no tenant data beyond counts; only the projector role
-- reads and writes it, under the tenant's setting like every tenant table
-- (decision 3): the runner queues a tenant's row with its statements.
CREATE TABLE projection_ledger (
    projection text          NOT NULL CHECK (projection ~ '^[a-z][a-z0-9_]{0,62}$'),
    generation uuid          NOT NULL,
    tenant_id  text          NOT NULL CHECK (tenant_id ~ '^[a-z0-9-]{1,63}$'),
    events     bigint        NOT NULL CHECK (events >= 0),
    applied    bigint        NOT NULL CHECK (applied >= 0),
    parked     bigint        NOT NULL CHECK (parked >= 0),
    skipped    bigint        NOT NULL CHECK (skipped >= 0),
    hash       bytea         NOT NULL CHECK (length(hash) = 32),
    pos_major  numeric(20,0) NOT NULL,
    pos_minor  numeric(20,0) NOT NULL,
    updated_at timestamptz   NOT NULL DEFAULT now(),
    CONSTRAINT projection_ledger_pkey PRIMARY KEY (generation, tenant_id),
    CONSTRAINT projection_ledger_sum CHECK (events = applied + parked + skipped)
);

-- projection_ledger_marks: the ledger's (events, hash) at the first batch
-- end past every multiple of 256 events, so that verify can narrow a
-- disagreement down to one window and name the event in it.
CREATE TABLE projection_ledger_marks (
    generation uuid          NOT NULL,
    tenant_id  text          NOT NULL CHECK (tenant_id ~ '^[a-z0-9-]{1,63}$'),
    events     bigint        NOT NULL CHECK (events > 0),
    hash       bytea         NOT NULL CHECK (length(hash) = 32),
    pos_major  numeric(20,0) NOT NULL,
    pos_minor  numeric(20,0) NOT NULL,
    CONSTRAINT projection_ledger_marks_pkey PRIMARY KEY (generation, tenant_id, events)
);

ALTER TABLE projection_ledger ENABLE ROW LEVEL SECURITY;
ALTER TABLE projection_ledger FORCE ROW LEVEL SECURITY;
CREATE POLICY projection_ledger_projector ON projection_ledger TO strata_projector
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
ALTER TABLE projection_ledger_marks ENABLE ROW LEVEL SECURITY;
ALTER TABLE projection_ledger_marks FORCE ROW LEVEL SECURITY;
CREATE POLICY projection_ledger_marks_projector ON projection_ledger_marks TO strata_projector
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT, INSERT, UPDATE, DELETE ON projection_ledger, projection_ledger_marks TO strata_projector;

-- projection_ledger_since: checkpoints that had moved before the ledger
-- existed (an upgrade). Their ledgers count only the events after this
-- position, and verify checks only those. A generation made afterwards
-- has no row: its ledger counts from the first event.
CREATE TABLE projection_ledger_since (
    generation uuid          PRIMARY KEY,
    pos_major  numeric(20,0) NOT NULL,
    pos_minor  numeric(20,0) NOT NULL
);
INSERT INTO projection_ledger_since (generation, pos_major, pos_minor)
SELECT generation, pos_major, pos_minor FROM projection_checkpoints WHERE pos_major > 0 OR pos_minor > 0;
GRANT SELECT ON projection_ledger_since TO strata_projector;
