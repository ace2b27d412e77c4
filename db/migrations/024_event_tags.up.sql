-- Event tags (issue 31, append conditions). An event's tags are the array
-- metadata->'tags' (eventstore/postgres/condition.go); a tagged read ("the
-- events tagged email:… of this tenant") finds them through event_tags, a
-- row per tag, filled by a trigger on every insert into the log, so that
-- every path that writes events (appends, imports, moves) fills it.
--
-- Why a table and not an index of the metadata: under row-level security
-- only leakproof operators can be index conditions, and jsonb's @> is not;
-- a text equality is. An untagged event, the common case, costs an append
-- the trigger's WHEN test only.
--
-- No backfill: no event had tags before this migration (the metadata had
-- no such field).
CREATE TABLE event_tags (
    tenant_id text   NOT NULL CHECK (tenant_id ~ '^[a-z0-9-]{1,63}$'),
    tag       text   NOT NULL,
    tx_id     xid8   NOT NULL,
    position  bigint NOT NULL,
    PRIMARY KEY (tenant_id, tag, tx_id, position)
);
ALTER TABLE event_tags ENABLE ROW LEVEL SECURITY;
ALTER TABLE event_tags FORCE ROW LEVEL SECURITY;
CREATE POLICY event_tags_tenant ON event_tags TO strata_app
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT, INSERT ON event_tags TO strata_app;

-- The trigger runs as the inserting role (strata_app under the tenant's
-- setting, as every writer of the log is), so the policy checks its rows.
CREATE FUNCTION event_tags_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO event_tags (tenant_id, tag, tx_id, position)
    SELECT NEW.tenant_id, t, NEW.tx_id, NEW.position FROM jsonb_array_elements_text(NEW.metadata -> 'tags') AS t;
    RETURN NULL;
END $$;
CREATE TRIGGER events_tags AFTER INSERT ON events
    FOR EACH ROW WHEN (NEW.metadata ? 'tags') EXECUTE FUNCTION event_tags_insert();
