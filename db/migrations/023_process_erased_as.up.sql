-- An instance a subject's erasure redacted records the subject's pseudonym
-- (issue 30): the process runtime redacts what it writes of the instance
-- from then on the same way (commands/process/erased.go), so that a step
-- in flight or a decision committed after the erasure keeps no plaintext.
ALTER TABLE process_instances ADD COLUMN erased_as text;
GRANT UPDATE (erased_as) ON process_instances TO strata_eraser;
