package db

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// CheckWritable commits a transaction that writes one WAL record and
// nothing else (a transactional logical message, prefix "strata.ready",
// which logical decoding consumers may see and ignore). PostgreSQL then
// flushes its commit and, as for every write, waits for the synchronous
// standbys it is configured with (synchronous_commit,
// synchronous_standby_names) before COMMIT returns: it returns nil only
// when a command's commit would succeed now. It fails on a hot standby,
// and it does not return (until ctx ends) on a primary whose synchronous
// standby is gone: one orphaned by a failover, or one just promoted whose
// standbys have not connected yet. Reads alone tell neither from a healthy
// primary, and neither does a transaction that only takes a transaction ID
// (it writes no WAL before its commit record, and PostgreSQL commits it
// without waiting for a standby).
//
// It costs a transaction ID and two small WAL records: a readiness check,
// not a per-request call.
func CheckWritable(ctx context.Context, pool Beginner) error {
	return pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "SELECT pg_logical_emit_message(true, 'strata.ready', '')")
		return err
	})
}
