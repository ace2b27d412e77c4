package projections

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/internal/pgsession"
)

// Leases are session-level advisory locks in the two-key form
// pg_try_advisory_lock(leaseClass, key(name)). The session that holds one
// is the projection's only active runner; the lock goes away with the
// session (shutdown, crash, lost connection), and the runner applies its
// batches on that same session, so it cannot go on writing after losing
// the lease. pg_locks shows the lock as classid = leaseClass, objid =
// key(name), objsubid = 2, which is how Monitor tells whether some process
// runs a projection. The family is declared in pgsession among every
// runner's (pgsession.RunnerLeases), which a tenant's erasure waits for.
const leaseClass = pgsession.ProjectionLeaseClass // "STRP"

// pauseClass is the class of the pause lock: a session advisory lock
// (pauseClass, key(name)) held by a tool (`strata replay`, the admin API)
// that needs the projection to itself for a moment: a rebuild's swap, a
// dead-letter retry or discard. A runner that sees it held finishes its
// batch, gives its lease back and does not take it again until the pause
// lock is gone; the tool meanwhile waits for the lease and works under it
// (see AcquireExclusive). The lock lives as long as the tool's session, so
// a tool that dies never leaves a projection paused.
const pauseClass int32 = 0x53545251 // "STRQ"

// lease is the family of the runners' leases.
var lease = pgsession.ProjectionLease

// leaseKey maps a projection name onto the lock's second key.
func leaseKey(name string) int32 { return lease.Key(name) }

// heldLeases returns the lease keys held in the current database, by any
// session of any role (pg_locks is readable by everyone), and the keys
// whose pause lock is held.
func heldLeases(ctx context.Context, q Querier) (leases, paused map[uint32]bool, err error) {
	rows, err := q.Query(ctx, `SELECT classid::bigint, objid::bigint FROM pg_locks
WHERE locktype = 'advisory' AND granted AND objsubid = 2 AND classid IN ($1::int::oid, $2::int::oid)
  AND mode = 'ExclusiveLock' -- runners probe the pause lock in share mode
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, leaseClass, pauseClass)
	if err != nil {
		return nil, nil, fmt.Errorf("read leases: %w", err)
	}
	defer rows.Close()
	leases, paused = map[uint32]bool{}, map[uint32]bool{}
	for rows.Next() {
		var class, objid int64
		if err := rows.Scan(&class, &objid); err != nil {
			return nil, nil, fmt.Errorf("read leases: %w", err)
		}
		if int32(class) == pauseClass {
			paused[uint32(objid)] = true
		} else {
			leases[uint32(objid)] = true
		}
	}
	return leases, paused, rows.Err()
}

// queryRower is a pool, a connection or a transaction.
type queryRower interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// pauseRequested reports whether a tool holds the projection's pause lock.
// The probe is a shared transaction-level lock of a statement of its own
// (released when the statement ends), so it never gets in the tool's way.
func pauseRequested(ctx context.Context, q queryRower, key string) (bool, error) {
	var paused bool
	if err := q.QueryRow(ctx, `SELECT NOT pg_try_advisory_xact_lock_shared($1::int, $2::int)`, pauseClass, leaseKey(key)).Scan(&paused); err != nil {
		return false, fmt.Errorf("check pause of %s: %w", key, err)
	}
	return paused, nil
}

// pauseWait is how long AcquireExclusive waits for the pause lock before
// it concludes that another tool holds it.
const pauseWait = 3 * time.Second

// Errors of AcquireExclusive.
var (
	// ErrBusy: another tool holds the projection (a rebuild swapping, a
	// dead-letter retry or discard). Retry when it is done.
	ErrBusy = errors.New("another operation holds the projection")
	// ErrNoYield: the projection's active runner did not give its lease
	// back in time (a batch longer than the wait, or a runner of a strata
	// version that does not know about pauses).
	ErrNoYield = errors.New("the projection's runner did not yield its lease")
)

// Exclusive is a projection's lease held by a tool, together with its
// pause lock, on a session of its own: while it is held no runner (in any
// process) applies the projection. Work that must not interleave with the
// runner (re-applying dead letters, a rebuild's swap) runs on Conn.
type Exclusive struct {
	conn *pgx.Conn
	key  string
}

// AcquireExclusive takes the projection's pause lock, so that its active
// runner (in any process) finishes its batch and yields, then waits up to
// wait for the lease. key is the projection's checkpoint key (its name, or
// a rebuild's <name>__rebuild). pool runs as db.RoleProjector; one of its
// connections is held until Release. Errors: ErrBusy, ErrNoYield, and
// database errors.
func AcquireExclusive(ctx context.Context, pool *pgxpool.Pool, key string, wait time.Duration) (*Exclusive, error) {
	c, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	conn := c.Hijack()
	fail := func(err error) (*Exclusive, error) {
		pgsession.Close(conn)
		return nil, err
	}
	// Runners probe the pause lock with shared tries that last a statement
	// or a batch; another tool holds it for as long as it works. A short
	// wait tells the two apart.
	if _, err := conn.Exec(ctx, fmt.Sprintf("SET lock_timeout = %d", pauseWait.Milliseconds())); err != nil {
		return fail(fmt.Errorf("take pause lock of %s: %w", key, err))
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1, $2)`, pauseClass, leaseKey(key)); err != nil {
		if db.SQLState(err) == "55P03" {
			return fail(fmt.Errorf("%s: %w", key, ErrBusy))
		}
		return fail(fmt.Errorf("take pause lock of %s: %w", key, err))
	}
	// A waiting pg_advisory_lock is first in line when the runner lets go,
	// ahead of any standby runner's try. lock_timeout bounds the wait.
	if _, err := conn.Exec(ctx, fmt.Sprintf("SET lock_timeout = %d", max(wait.Milliseconds(), 1))); err != nil {
		return fail(fmt.Errorf("take lease of %s: %w", key, err))
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1, $2)`, leaseClass, leaseKey(key)); err != nil {
		if db.SQLState(err) == "55P03" {
			return fail(fmt.Errorf("%s: %w within %s", key, ErrNoYield, wait))
		}
		return fail(fmt.Errorf("take lease of %s: %w", key, err))
	}
	if _, err := conn.Exec(ctx, "RESET lock_timeout"); err != nil {
		return fail(fmt.Errorf("take lease of %s: %w", key, err))
	}
	return &Exclusive{conn: conn, key: key}, nil
}

// Conn is the session holding the lease; use it for the work that needs
// the projection to itself.
func (x *Exclusive) Conn() *pgx.Conn { return x.conn }

// Key is the checkpoint key the lease is for.
func (x *Exclusive) Key() string { return x.key }

// Release ends the session, which releases the lease and the pause lock;
// the runner resumes within its lease retry.
func (x *Exclusive) Release() {
	if x == nil || x.conn == nil {
		return
	}
	lease.Release(x.conn, x.key)
	pgsession.Close(x.conn)
	x.conn = nil
}

// LeaseHeld reports whether some session holds the lease of key (a
// checkpoint key): a runner, or a tool working on the projection.
func LeaseHeld(ctx context.Context, q Querier, key string) (bool, error) {
	leases, _, err := heldLeases(ctx, q)
	if err != nil {
		return false, err
	}
	return leases[uint32(leaseKey(key))], nil
}
