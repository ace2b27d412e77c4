package projections

import (
	"context"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/jackc/pgx/v5"
)

// Leases are session-level advisory locks in the two-key form
// pg_try_advisory_lock(leaseClass, key(name)). The session that holds one
// is the projection's only active runner; the lock goes away with the
// session (shutdown, crash, lost connection), and the runner applies its
// batches on that same session, so it cannot go on writing after losing
// the lease. pg_locks shows the lock as classid = leaseClass, objid =
// key(name), objsubid = 2, which is how Monitor tells whether some process
// runs a projection.
const leaseClass int32 = 0x53545250 // "STRP"

// leaseKey maps a projection name onto the lock's second key.
func leaseKey(name string) int32 {
	h := fnv.New32a()
	h.Write([]byte("strata-projection\x00" + name))
	return int32(h.Sum32())
}

func tryLease(ctx context.Context, conn *pgx.Conn, name string) (bool, error) {
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1, $2)`, leaseClass, leaseKey(name)).Scan(&ok); err != nil {
		return false, fmt.Errorf("take lease of %s: %w", name, err)
	}
	return ok, nil
}

// releaseLease gives the lease back before the session ends, so that the
// next runner need not wait for the server to notice the closed
// connection. Best effort: ending the session releases it anyway.
func releaseLease(conn *pgx.Conn, name string) {
	if conn == nil || conn.IsClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _ = conn.Exec(ctx, `SELECT pg_advisory_unlock($1, $2)`, leaseClass, leaseKey(name))
}

// heldLeases returns the lease keys held in the current database, by any
// session of any role (pg_locks is readable by everyone).
func heldLeases(ctx context.Context, q Querier) (map[uint32]bool, error) {
	rows, err := q.Query(ctx, `SELECT objid::bigint FROM pg_locks
WHERE locktype = 'advisory' AND granted AND objsubid = 2 AND classid = $1::int::oid
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, leaseClass)
	if err != nil {
		return nil, fmt.Errorf("read leases: %w", err)
	}
	defer rows.Close()
	out := map[uint32]bool{}
	for rows.Next() {
		var objid int64
		if err := rows.Scan(&objid); err != nil {
			return nil, fmt.Errorf("read leases: %w", err)
		}
		out[uint32(objid)] = true
	}
	return out, rows.Err()
}
