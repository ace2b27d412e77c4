-- Aggregate snapshots (issue 31 §4): an aggregate type may keep its state
-- beside its stream, so that a command on a long stream reads the snapshot
-- and the events after it instead of the whole stream. A snapshot is a
-- cache: never required for correctness, ignored when its schema (the
-- aggregate's snapshot version and the registry's codec versions) is not
-- the reader's, rebuilt from the log when missing. A stream with personal
-- data has its snapshot sealed with the stream's data subject's key, so
-- forgetting the subject shreds it as it shreds the events.
--
-- A tenant table under the rules of 002_read_side: the application role
-- reads and writes the snapshots of its transaction's tenant; an erasure
-- deletes them (db.EnsureEraserGrants).
CREATE TABLE aggregate_snapshots (
    tenant_id      text        NOT NULL CHECK (tenant_id ~ '^[a-z0-9-]{1,63}$'),
    stream_id      text        NOT NULL CHECK (length(stream_id) BETWEEN 1 AND 200),
    schema         text        NOT NULL CHECK (length(schema) BETWEEN 1 AND 200),
    stream_version bigint      NOT NULL CHECK (stream_version > 0),
    tx_id          xid8        NOT NULL,
    position       bigint      NOT NULL,
    data           bytea       NOT NULL,
    taken_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, stream_id)
);
ALTER TABLE aggregate_snapshots ENABLE ROW LEVEL SECURITY;
ALTER TABLE aggregate_snapshots FORCE ROW LEVEL SECURITY;
CREATE POLICY aggregate_snapshots_app ON aggregate_snapshots FOR ALL TO strata_app
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT, INSERT, UPDATE, DELETE ON aggregate_snapshots TO strata_app;
