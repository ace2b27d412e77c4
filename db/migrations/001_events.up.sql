-- The event log. Every event of every tenant, append-only.
--
-- position is handed out at INSERT but becomes visible at COMMIT, so it is
-- NOT a safe cursor on its own: a reader that remembers "last position seen"
-- would skip a lower position that commits later. Readers page by
-- (tx_id, position) and stop below pg_snapshot_xmin(pg_current_snapshot()),
-- in one statement (ARCHITECTURE decision 1). The append transaction takes
-- the stream's advisory lock before its first write, so one stream's
-- versions are ordered the same way by tx_id as by version.
CREATE TABLE events (
    position       bigint GENERATED ALWAYS AS IDENTITY,
    tx_id          xid8        NOT NULL DEFAULT pg_current_xact_id(),
    tenant_id      text        NOT NULL CHECK (tenant_id ~ '^[a-z0-9-]{1,63}$'),
    stream_id      text        NOT NULL CHECK (length(stream_id) BETWEEN 1 AND 200),
    version        bigint      NOT NULL CHECK (version > 0),
    event_id       uuid        NOT NULL,
    event_type     text        NOT NULL,
    schema_version int         NOT NULL CHECK (schema_version > 0),
    data           jsonb       NOT NULL,
    metadata       jsonb       NOT NULL,
    recorded_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT events_stream_version UNIQUE (tenant_id, stream_id, version),
    CONSTRAINT events_event_id UNIQUE (tenant_id, event_id)
);
-- The global log's cursor.
CREATE INDEX events_log ON events (tx_id, position);

ALTER TABLE events ENABLE ROW LEVEL SECURITY;
ALTER TABLE events FORCE ROW LEVEL SECURITY;
-- The application role sees and writes only its transaction's tenant.
-- current_setting(..., true) is NULL when never set and '' after a
-- transaction-local setting ended; neither matches a valid tenant_id.
CREATE POLICY events_tenant ON events TO strata_app
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
-- The projector's cross-tenant read of the global log: an explicit, named
-- grant, read-only.
CREATE POLICY events_projector_read_all ON events FOR SELECT TO strata_projector
    USING (true);
GRANT SELECT, INSERT ON events TO strata_app;
GRANT SELECT ON events TO strata_projector;

-- Command idempotency (ARCHITECTURE decision 4): the outcome of a command
-- sent with an Idempotency-Key, written in the transaction that appends its
-- events (or alone, for a rejected command).
CREATE TABLE idempotency_keys (
    tenant_id    text        NOT NULL CHECK (tenant_id ~ '^[a-z0-9-]{1,63}$'),
    key          text        NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    request_hash text        NOT NULL,
    response     bytea       NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, key)
);
ALTER TABLE idempotency_keys ENABLE ROW LEVEL SECURITY;
ALTER TABLE idempotency_keys FORCE ROW LEVEL SECURITY;
CREATE POLICY idempotency_keys_tenant ON idempotency_keys TO strata_app
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT, INSERT ON idempotency_keys TO strata_app;
