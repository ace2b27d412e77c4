DROP TABLE aggregate_snapshots;
