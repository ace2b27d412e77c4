package db

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// CommitBarrier commits a transaction that writes one WAL record and
// nothing else (a transactional logical message, prefix "strata.barrier",
// which logical decoding consumers may see and ignore). PostgreSQL flushes
// its commit and, as for every write, waits for the synchronous standbys it
// is configured with (synchronous_commit, synchronous_standby_names) before
// COMMIT returns. Commits are flushed and replicated in WAL order, so when
// it returns nil:
//
//   - a command's commit would succeed now: the database is a primary that
//     accepts writes and its synchronous standby answers (it fails on a hot
//     standby, and does not return until ctx ends on a primary orphaned by
//     a failover or one just promoted whose standbys have not connected;
//     reads alone tell neither from a healthy primary);
//   - everything the session could see before it began is as durable as a
//     commit of its own. That is not a given: a commit waiting for its
//     standby becomes visible to every session when the wait is cancelled,
//     and pgx cancels it (a cancel request, then it closes the connection)
//     whenever the context of the COMMIT ends — a client that gave up on
//     its request. PostgreSQL then only warns "the transaction has already
//     committed locally, but might not have been replicated to the
//     standby"; a failover before it is replicated takes it back.
//
// A transaction that only takes a transaction ID is no barrier: it writes
// no WAL before its commit record, and PostgreSQL commits it without
// waiting for a standby.
//
// It costs a transaction ID and two small WAL records: for a readiness
// check, or before answering a client from a row another session wrote
// (an idempotency record replayed), not for every read.
func CommitBarrier(ctx context.Context, pool Beginner) error {
	return pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "SELECT pg_logical_emit_message(true, 'strata.barrier', '')")
		return err
	})
}
