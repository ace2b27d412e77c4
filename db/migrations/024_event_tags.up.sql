-- Event tags (issue 31, append conditions): an event's tags are the array
-- metadata->'tags' (eventstore/postgres/condition.go). A tagged read
-- ("the events tagged email:… of this tenant") finds them through this
-- index; an untagged event, the common case, is not in it and costs an
-- append nothing. A condition's check does not use it: it scans the
-- tenant's log after the read's position (events_tenant_log).
CREATE INDEX events_tags ON events USING gin ((metadata -> 'tags') jsonb_path_ops)
    WHERE metadata ? 'tags';
