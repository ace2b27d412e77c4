-- The log by partition (issue 35 §5, partitioned projections): a projection
-- split into partitions has each partition read only its own streams'
-- events, in log order, under the same horizon as the global log's readers,
-- so that N partitions do not each read the whole log (partition_log.go).
--
-- stream_bucket maps a stream onto one of 16 buckets: the first byte of
-- md5(tenant || '/' || stream), low four bits (eventstore.BucketOf computes
-- the same in Go). A partition p of n (n a power of two up to 16) holds the
-- buckets b with b % n = p, so a stream stays in one partition and a split
-- from n to 2n divides each partition in two.
CREATE FUNCTION stream_bucket(tenant text, stream text) RETURNS smallint
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN (get_byte(decode(md5(tenant || '/' || stream), 'hex'), 0) & 15)::smallint;

-- The bucket column and its index, events.bucket and events_partition_log,
-- are not added here: adding a stored column rewrites the events table, and
-- both cost every append, which a deployment that partitions nothing should
-- not pay. `strata migrate partition-log` adds them (db.EnablePartitionLog).

-- A partition's checkpoint row (<projection>__part_<p>_of_<n>) says which
-- projection and partition it is and, when it was split off an earlier
-- layout's row, that row and the position it started from.
ALTER TABLE projection_checkpoints ADD COLUMN partition jsonb;

-- A partition split off at a position has a ledger that counts from there
-- (the rows it was split off keep theirs up to it): the runner that splits
-- records where, as an upgrade did for the first ledgers.
GRANT INSERT ON projection_ledger_since TO strata_projector;

-- The row of a layout that partitions were split off stays, with status
-- 'split', where the split left it: no runner applies it again.
ALTER TABLE projection_checkpoints DROP CONSTRAINT projection_checkpoints_status_check;
ALTER TABLE projection_checkpoints ADD CONSTRAINT projection_checkpoints_status_check
    CHECK (status IN ('running', 'error', 'stopped', 'ahead_of_log', 'split'));
