REVOKE UPDATE (erased_as) ON process_instances FROM strata_eraser;
ALTER TABLE process_instances DROP COLUMN erased_as;
