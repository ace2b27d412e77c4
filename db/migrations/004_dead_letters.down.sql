DROP TABLE parked_streams;
DROP TABLE dead_letters;
ALTER TABLE projection_checkpoints
    DROP COLUMN rebuild,
    DROP COLUMN parked_letters,
    DROP COLUMN parked_streams,
    DROP COLUMN generation;
