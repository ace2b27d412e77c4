// Package pgsession holds what the workers that own a PostgreSQL session
// for a long time (projection runners, the relay, the notification
// listener) share: leases held as session advisory locks, closing a
// session for good, and waiting that gives way to cancellation.
package pgsession

import (
	"context"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/jackc/pgx/v5"
)

// Lease is a family of leases: the session advisory locks
// pg_try_advisory_lock(Class, Key(name)). The session that holds one is
// the only worker for that name; losing the session loses the lease. Each
// family has its own Class, so families never collide, and hashes names
// under its own Namespace.
type Lease struct {
	Class     int32
	Namespace string
}

// Key maps a name onto the lock's second key (pg_locks shows it as objid).
func (l Lease) Key(name string) int32 {
	h := fnv.New32a()
	h.Write([]byte(l.Namespace + "\x00" + name))
	return int32(h.Sum32())
}

// Try takes the lease of name on conn's session without waiting and
// reports whether it got it.
func (l Lease) Try(ctx context.Context, conn *pgx.Conn, name string) (bool, error) {
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1, $2)`, l.Class, l.Key(name)).Scan(&ok); err != nil {
		return false, fmt.Errorf("take lease of %s: %w", name, err)
	}
	return ok, nil
}

// Release gives the lease back before the session ends, so that the next
// worker need not wait for the server to notice the closed connection.
// Best effort: ending the session releases it anyway.
func (l Lease) Release(conn *pgx.Conn, name string) {
	if conn == nil || conn.IsClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _ = conn.Exec(ctx, `SELECT pg_advisory_unlock($1, $2)`, l.Class, l.Key(name))
}

// Close ends a session taken out of its pool for good (pgxpool's Hijack),
// waiting at most 5 s for the server to say goodbye.
func Close(conn *pgx.Conn) {
	if conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

// Sleep waits for d or ctx; it reports whether the full d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Backoff spaces the reconnections of a worker whose session ended: the
// first after 100 ms, doubling while sessions keep failing right away (say,
// the schema is not migrated yet) up to 30 s, and back to 100 ms after a
// session that lasted more than 10 s.
type Backoff struct{ failures int }

// After returns the pause before the next session, given how long the one
// that just ended lasted.
func (b *Backoff) After(lasted time.Duration) time.Duration {
	if lasted > 10*time.Second {
		b.failures = 0
	}
	d := min(100*time.Millisecond<<min(b.failures, 9), 30*time.Second)
	b.failures++
	return d
}
