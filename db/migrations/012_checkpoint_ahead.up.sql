-- A projection whose checkpoint is beyond the end of the event log
-- (docs/operations.md, "Backup and restore"): its read models were
-- restored from a later point than its events, as in a split deployment
-- (events in EventStoreDB, read models in PostgreSQL) whose event store
-- came back from an earlier backup. The runner finds it when it takes its
-- lease, records status 'ahead_of_log' and applies nothing; queries over
-- it answer 503 projection_ahead_of_log. The status stays, even once new
-- appends carry the log past the old checkpoint (those positions are other
-- events), until a full rebuild's swap replaces the checkpoint.
ALTER TABLE projection_checkpoints DROP CONSTRAINT projection_checkpoints_status_check;
ALTER TABLE projection_checkpoints ADD CONSTRAINT projection_checkpoints_status_check
    CHECK (status IN ('running', 'error', 'stopped', 'ahead_of_log'));
