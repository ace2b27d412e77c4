UPDATE projection_checkpoints SET status = 'error' WHERE status = 'ahead_of_log';
ALTER TABLE projection_checkpoints DROP CONSTRAINT projection_checkpoints_status_check;
ALTER TABLE projection_checkpoints ADD CONSTRAINT projection_checkpoints_status_check
    CHECK (status IN ('running', 'error', 'stopped'));
