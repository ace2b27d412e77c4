DROP INDEX events_tags;
