DROP TRIGGER events_tags ON events;
DROP FUNCTION event_tags_insert();
DROP TABLE event_tags;
