package db

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Connection poolers between strata and PostgreSQL (docs/pgbouncer.md).
//
// A transaction-mode pooler (PgBouncer pool_mode = transaction) hands each
// transaction, or each statement outside one, to whichever server
// connection is free: nothing a session sets survives to the next
// transaction. What strata's pools set per session then has to come from
// elsewhere:
//
//   - Prepared statements: pgx's default caches named prepared statements
//     per connection, which another server connection does not have
//     (PgBouncer 1.18 does not track them). A pooled pool uses
//     QueryExecModeCacheDescribe: unnamed statements, parsed with each
//     execution in the same round trip, their argument and result types
//     cached client-side. Every execution is self-contained (Parse, Bind,
//     Execute, Sync), so it may run on any server connection.
//   - SET ROLE, search_path: the login's own defaults (ALTER ROLE login
//     SET role = ..., SET search_path = strata, pg_temp), applied by
//     PostgreSQL when the pooler opens a server connection as that login.
//     EnsureLogins sets them for a Login with Pooled; the pool checks them
//     on every new client connection (PooledSessionError) and sends
//     neither as a startup parameter (PgBouncer refuses unknown ones:
//     "unsupported startup parameter: search_path"). The guarantee of
//     ARCHITECTURE decision 11 is unchanged: the login is still a NOINHERIT
//     member of its serving role only; RESET ROLE returns to that role (the
//     default), SET ROLE NONE to the bare login, which reads nothing.
//   - plan_cache_mode: only the projector's pool sets it, and the
//     projector's pool may not be pooled (it holds session advisory locks
//     and LISTENs).
//
// The application role's transactions need nothing else of the session:
// the tenant is a transaction-local set_config (decision 3), append locks
// are transaction advisory locks, NOTIFY is sent in its own transaction,
// and a query's consistency wait polls the checkpoints table. Session
// advisory locks (projection and relay leases) and LISTEN are the
// projector's, on its own connection.

// Pooler modes of a serving URL.
const (
	PoolerNone        = "none"        // PostgreSQL itself
	PoolerSession     = "session"     // a session-mode pool: as PostgreSQL
	PoolerTransaction = "transaction" // a transaction-mode pool
)

// SessionSearchPath is the search_path every serving session runs with
// (pool.go says why pg_temp is last).
const SessionSearchPath = Schema + ", pg_temp"

// PooledSessionError says that a session through a transaction-mode
// pooler does not start as its serving role: the login's defaults are
// missing.
type PooledSessionError struct {
	Login, Role             string
	CurrentUser, SearchPath string
}

func (e *PooledSessionError) Error() string {
	return fmt.Sprintf("through a transaction-mode pooler the %s login %s must start its sessions as %s with search_path %q (its role defaults), but a session runs as %s with search_path %q: "+
		"run `strata migrate up` with STRATA_APP_DATABASE_POOLER=transaction, or as the owner: ALTER ROLE %s SET role = %s; ALTER ROLE %s SET search_path = %s",
		e.Role, e.Login, e.Role, SessionSearchPath, e.CurrentUser, e.SearchPath,
		pgx.Identifier{e.Login}.Sanitize(), e.Role, pgx.Identifier{e.Login}.Sanitize(), SessionSearchPath)
}

// CheckPooledSession verifies that a session (of a transaction-mode
// pooler: one server connection, whichever) runs as role in strata's
// search_path without having been told to.
func CheckPooledSession(ctx context.Context, q Querier, role string) error {
	var login, current, path string
	err := q.QueryRow(ctx, `SELECT session_user::text, current_user::text, current_setting('search_path')`, pgx.QueryExecModeSimpleProtocol).
		Scan(&login, &current, &path)
	if err != nil {
		return fmt.Errorf("inspect a pooled session: %w", err)
	}
	if current != role || path != SessionSearchPath {
		return &PooledSessionError{Login: login, Role: role, CurrentUser: current, SearchPath: path}
	}
	return nil
}

// setLoginDefaults makes every session of login start as role in strata's
// search_path (what a transaction-mode pooler needs, and harmless on a
// direct connection, where the pool sets both again).
func setLoginDefaults(ctx context.Context, conn *pgx.Conn, login, role string) error {
	name := pgx.Identifier{login}.Sanitize()
	for _, q := range []string{
		"ALTER ROLE " + name + " SET role = " + pgx.Identifier{role}.Sanitize(),
		"ALTER ROLE " + name + " SET search_path = " + Schema + ", pg_temp",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("set the session defaults of login %s (%s): %w", login, q, err)
		}
	}
	return nil
}

// IsPoolerRefusal reports the error of a pooler that refused the
// connection's startup parameters (PgBouncer: "unsupported startup
// parameter: search_path"): what a pool opened for PostgreSQL itself
// meets when its URL points at PgBouncer.
func IsPoolerRefusal(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "08P01" && strings.HasPrefix(pe.Message, "unsupported startup parameter")
}

// DetectTransactionPooling reports whether pool's URL goes through a
// transaction-mode (or statement-mode) pooler, by looking at which
// PostgreSQL backend serves two of its sessions. On PostgreSQL itself or
// a session-mode pool each session has a backend of its own for as long
// as it lives. A transaction-mode pooler gives a statement outside a
// transaction whichever server connection is free: session A's backend,
// idle again after A's statement, serves session B's transaction (PgBouncer
// reuses the most recently used server connection), or A, while B holds
// its backend, gets another one or none (a pool of one). Either is proof;
// three rounds that show neither are taken as no pooling.
//
// It holds two connections of pool for a few milliseconds and uses the
// simple protocol, so that it works whatever the pool's exec mode.
func DetectTransactionPooling(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	a, err := pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	defer a.Release()
	b, err := pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	defer b.Release()
	pid := func(ctx context.Context, q Querier) (int32, error) {
		var p int32
		err := q.QueryRow(ctx, `SELECT pg_backend_pid()`, pgx.QueryExecModeSimpleProtocol).Scan(&p)
		return p, err
	}
	for range 3 {
		pa, err := pid(ctx, a)
		if err != nil {
			return false, err
		}
		tx, err := b.Begin(ctx)
		if err != nil {
			return false, err
		}
		pb, err := pid(ctx, tx)
		if err != nil {
			_ = tx.Rollback(ctx)
			return false, err
		}
		if pb == pa {
			_ = tx.Rollback(ctx)
			return true, nil
		}
		// B holds its backend; A asks again, briefly: a pooler with no
		// other server connection keeps it waiting.
		actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		pa2, err := pid(actx, a)
		cancel()
		_ = tx.Rollback(ctx)
		switch {
		case err != nil && actx.Err() != nil && ctx.Err() == nil:
			return true, nil
		case err != nil:
			return false, err
		case pa2 != pa:
			return true, nil
		}
	}
	return false, nil
}
