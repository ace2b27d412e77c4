-- Broker-fed consumers (relay.Consumer) park into the shared dead-letter
-- store of 004 (dead_letters, parked_streams) like projection runners, so
-- that `strata replay dlq` and /v1/admin/dead-letters handle their letters
-- (docs/relay.md, docs/replay.md).
--
-- A consumer has a row in projection_checkpoints under its name: its
-- generation is the one its letters and parked streams belong to (no
-- rebuild ever replaces it), and its parked_streams / parked_letters
-- counters are kept in the transactions that park, retry and discard, as a
-- projection's are. Its position stays at zero: a consumer reads no log
-- (its progress is relay_applied, per stream).
--
-- consumer: on a consumer's row, what it applies, so that the tooling can
-- retry its letters with the same projection into the same tables:
-- {"projection": "order_list", "tables": ["billing_order_list"]} (the
-- projection's name and its tables in the order Projection.Tables lists
-- them). Written by the consumer when it starts; NULL on the rows of
-- projections, rebuilds and relays, which a consumer refuses to take over.
ALTER TABLE projection_checkpoints ADD COLUMN consumer jsonb;

-- relay_dead_letters (003) stood in for the shared store and never
-- shipped. Its rows are not moved: it is dropped.
DROP TABLE relay_dead_letters;
