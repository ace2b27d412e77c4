package projections

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Leases for workers that keep a checkpoint row of their own without being
// a Runner (the process managers of commands/process). They share the
// projections' lease and pause locks, keyed by the checkpoint key, so that
// AcquireExclusive, LeaseHeld and Monitor treat them like any runner: a
// tool that needs the key to itself takes its pause lock, and the worker
// gives its lease back when it sees PauseRequested.

// TryLease takes the lease of key on conn's session without waiting and
// reports whether it got it. The lease lasts as long as the session (or
// until ReleaseLease).
func TryLease(ctx context.Context, conn *pgx.Conn, key string) (bool, error) {
	return lease.Try(ctx, conn, key)
}

// ReleaseLease gives the lease of key back before conn's session ends
// (best effort: ending the session releases it anyway).
func ReleaseLease(conn *pgx.Conn, key string) { lease.Release(conn, key) }

// PauseRequested reports whether a tool holds key's pause lock
// (AcquireExclusive), in a statement of its own that never gets in the
// tool's way. A worker holding the lease finishes what it is doing and
// releases it.
func PauseRequested(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, key string) (bool, error) {
	return pauseRequested(ctx, q, key)
}
