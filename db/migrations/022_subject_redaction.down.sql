REVOKE UPDATE (error) ON dead_letters FROM strata_eraser;
REVOKE UPDATE (note, summary) ON process_history FROM strata_eraser;
REVOKE UPDATE (payload, result, last_error) ON process_steps FROM strata_eraser;
REVOKE UPDATE (state) ON process_instances FROM strata_eraser;
