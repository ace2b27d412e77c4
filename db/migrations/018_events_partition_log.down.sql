UPDATE projection_checkpoints SET status = 'error' WHERE status = 'split';
ALTER TABLE projection_checkpoints DROP CONSTRAINT projection_checkpoints_status_check;
ALTER TABLE projection_checkpoints ADD CONSTRAINT projection_checkpoints_status_check
    CHECK (status IN ('running', 'error', 'stopped', 'ahead_of_log'));
REVOKE INSERT ON projection_ledger_since FROM strata_projector;
ALTER TABLE projection_checkpoints DROP COLUMN IF EXISTS partition;
DROP INDEX IF EXISTS events_partition_log;
ALTER TABLE events DROP COLUMN IF EXISTS bucket;
DROP FUNCTION IF EXISTS stream_bucket(text, text);
