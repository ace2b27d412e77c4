-- A subject's erasure redacts in place what holds its data in plaintext
-- outside the log (issue 30; tenancy/subjects/redact.go): the declared
-- personal fields of process instances' state and steps, and the free text
-- beside them (history notes and reasons, step errors, dead letters'
-- errors). The eraser may update those columns and no other; its row
-- policy (db.EnsureEraserGrants) keeps it to the tenant being erased.
GRANT UPDATE (state) ON process_instances TO strata_eraser;
GRANT UPDATE (payload, result, last_error) ON process_steps TO strata_eraser;
GRANT UPDATE (note, summary) ON process_history TO strata_eraser;
GRANT UPDATE (error) ON dead_letters TO strata_eraser;
