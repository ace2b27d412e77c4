DROP TABLE admin_audit;
DROP TABLE projection_checkpoints;
