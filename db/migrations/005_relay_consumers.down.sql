-- Recreates 003's stand-in dead-letter table of broker-fed consumers
-- (empty: the letters stay in dead_letters) and drops the consumers'
-- descriptions.
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

ALTER TABLE projection_checkpoints DROP COLUMN consumer;
