package db

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// The partition log (issue 35 §5): events.bucket, the stream's bucket
// (stream_bucket, migration 018) as a stored column, and the index
// events_partition_log (bucket, tx_id, position) through which a
// partitioned projection's partition reads its own events only.
//
// The bucket is a stored column, not only an index expression: the
// projector reads the log under row-level security, and PostgreSQL uses
// an index condition there only when every function in it is leakproof,
// which stream_bucket's parts are not (declaring it so takes a
// superuser); a condition on a column, bucket = b, is. A partition's read
// through an expression index sorted its buckets' rows: 20-38 µs per event
// read, against 3.1.
//
// It is not a migration: adding the column rewrites the events table
// under an exclusive lock (appends wait), and the column and its index
// cost every append about 4-5 µs, which a deployment that partitions
// nothing should not pay. A deployment that partitions runs `strata
// migrate partition-log` once, when it chooses.

// EnablePartitionLog adds the partition log to the database at url (an
// owner's URL) if it is not there yet, and reports whether it added it.
func EnablePartitionLog(ctx context.Context, url string) (bool, error) {
	var added bool
	err := withMigrationConn(ctx, url, func(conn *pgx.Conn) error {
		has, err := HasPartitionLog(ctx, conn)
		if err != nil || has {
			return err
		}
		var fn bool
		if err := conn.QueryRow(ctx, `SELECT to_regprocedure($1) IS NOT NULL`, Schema+".stream_bucket(text, text)").Scan(&fn); err != nil {
			return err
		}
		if !fn {
			return fmt.Errorf("%w: the partition log needs migration 018 of the engine: run `strata migrate up` first", ErrSchemaBehind)
		}
		added = true
		return OwnerTx(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL search_path = "+Schema); err != nil {
				return err
			}
			for _, q := range []string{
				`ALTER TABLE events ADD COLUMN IF NOT EXISTS bucket smallint GENERATED ALWAYS AS (stream_bucket(tenant_id, stream_id)) STORED`,
				`CREATE INDEX IF NOT EXISTS events_partition_log ON events (bucket, tx_id, position)`,
			} {
				if _, err := tx.Exec(ctx, q); err != nil {
					return fmt.Errorf("add the partition log: %w", err)
				}
			}
			return nil
		})
	})
	return added, err
}

// HasPartitionLog reports whether the database's events table has the
// partition log (its bucket column and index).
func HasPartitionLog(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) (bool, error) {
	var has bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = 'bucket' AND NOT attisdropped)
   AND to_regclass($2) IS NOT NULL`, Schema+".events", Schema+".events_partition_log").Scan(&has)
	if err != nil {
		return false, fmt.Errorf("look for the partition log: %w", err)
	}
	return has, nil
}
