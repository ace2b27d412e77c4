ALTER TABLE projection_checkpoints DROP COLUMN IF EXISTS partition;
DROP INDEX IF EXISTS events_partition_log;
DROP FUNCTION IF EXISTS stream_bucket(text, text);
