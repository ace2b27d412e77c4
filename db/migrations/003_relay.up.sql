-- The relay (projections/relay): committed events published as integration
-- events, and projections fed back from a subscriber.
--
-- The relay's checkpoint is a row of projection_checkpoints named
-- relay_<topic>; it needs no table of its own.

-- watermill-sql's tables for the default topic strata_events, exactly as
-- watermill's DefaultPostgreSQLSchema and DefaultPostgreSQLOffsetsAdapter
-- would create them (they are created here, owned by strata_owner, never by
-- watermill at run time). The relay inserts a batch of messages in the
-- transaction that advances its checkpoint; subscribers read rows below
-- pg_snapshot_xmin ordered by (transaction_id, "offset"), so they never
-- skip a row that commits late (the offset alone is no safe cursor).
--
-- These are cross-tenant copies of the log, like events itself: no
-- tenant_id column (the tenant is in each row's metadata), no RLS, and
-- grants to the projector role only, which already reads every tenant's
-- events through events_projector_read_all. The application role gets
-- nothing.
CREATE TABLE "watermill_strata_events" (
    "offset"         BIGSERIAL,
    "uuid"           VARCHAR(36) NOT NULL,
    "created_at"     TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
    -- JSON, not JSONB: the event's bytes are kept exactly.
    "payload"        JSON DEFAULT NULL,
    "metadata"       JSON DEFAULT NULL,
    "transaction_id" xid8 NOT NULL,
    PRIMARY KEY ("transaction_id", "offset")
);
-- One row per consumer group: the last acknowledged row. Subscribers seed
-- their group's row (INSERT ... ON CONFLICT DO NOTHING), lock it for each
-- poll (SELECT ... FOR UPDATE, which needs UPDATE) and move it on ack
-- (INSERT ... ON CONFLICT DO UPDATE).
CREATE TABLE "watermill_offsets_strata_events" (
    consumer_group                VARCHAR(255) NOT NULL,
    offset_acked                  BIGINT,
    last_processed_transaction_id xid8 NOT NULL,
    PRIMARY KEY (consumer_group)
);
GRANT SELECT, INSERT ON "watermill_strata_events" TO strata_projector;
GRANT USAGE ON SEQUENCE "watermill_strata_events_offset_seq" TO strata_projector;
GRANT SELECT, INSERT, UPDATE ON "watermill_offsets_strata_events" TO strata_projector;

-- relay_applied: for each consumer (a projection fed from a subscriber),
-- tenant and stream, the last version handled (applied, or parked as a
-- dead letter), written in the transaction that applies the event. A
-- redelivered message finds its version already there and changes nothing;
-- a version more than one ahead is a gap, and the consumer waits.
CREATE TABLE relay_applied (
    tenant_id  text        NOT NULL CHECK (tenant_id ~ '^[a-z0-9-]{1,63}$'),
    consumer   text        NOT NULL CHECK (consumer ~ '^[a-z][a-z0-9_]{0,62}$'),
    stream_id  text        NOT NULL,
    version    bigint      NOT NULL CHECK (version > 0),
    event_id   uuid        NOT NULL,
    position   text        NOT NULL, -- consistency token of the event
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT relay_applied_pkey PRIMARY KEY (tenant_id, consumer, stream_id)
) WITH (fillfactor = 85);
ALTER TABLE relay_applied ENABLE ROW LEVEL SECURITY;
ALTER TABLE relay_applied FORCE ROW LEVEL SECURITY;
CREATE POLICY relay_applied_projector ON relay_applied TO strata_projector
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT, INSERT, UPDATE ON relay_applied TO strata_projector;

-- relay_dead_letters: events a consumer could not apply after its retries,
-- and every later event of the same stream for that consumer (the stream
-- is parked while it has rows here; ARCHITECTURE decision 5). Written in
-- the transaction that records the version as handled in relay_applied.
-- This table stands in for the shared dead-letter store: the consumer
-- writes through the relay.DeadLetterSink interface.
CREATE TABLE relay_dead_letters (
    tenant_id      text        NOT NULL CHECK (tenant_id ~ '^[a-z0-9-]{1,63}$'),
    id             bigint      GENERATED ALWAYS AS IDENTITY,
    consumer       text        NOT NULL,
    stream_id      text        NOT NULL,
    version        bigint      NOT NULL CHECK (version > 0),
    event_id       uuid        NOT NULL,
    event_type     text        NOT NULL,
    schema_version int         NOT NULL,
    position       text        NOT NULL,
    recorded_at    timestamptz,
    payload        bytea       NOT NULL, -- the message payload as received
    metadata       jsonb       NOT NULL, -- the message metadata, with watermill's poison keys
    reason         text        NOT NULL,
    attempts       int         NOT NULL,
    parked_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT relay_dead_letters_pkey PRIMARY KEY (tenant_id, id),
    CONSTRAINT relay_dead_letters_event UNIQUE (tenant_id, consumer, event_id)
);
CREATE INDEX relay_dead_letters_stream ON relay_dead_letters (tenant_id, consumer, stream_id, version);
ALTER TABLE relay_dead_letters ENABLE ROW LEVEL SECURITY;
ALTER TABLE relay_dead_letters FORCE ROW LEVEL SECURITY;
CREATE POLICY relay_dead_letters_projector ON relay_dead_letters TO strata_projector
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT, INSERT, DELETE ON relay_dead_letters TO strata_projector;
