package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/db"
)

// Connection poolers between strata and PostgreSQL (docs/pgbouncer.md,
// db pooler.go).
//
// STRATA_APP_DATABASE_POOLER says what STRATA_APP_DATABASE_URL points at:
// none (PostgreSQL, the default), session (a session-mode pool: the same)
// or transaction (a transaction-mode pooler such as PgBouncer with
// pool_mode = transaction). It is a setting, not a guess: a transaction
// pooler changes how the pool talks (no named prepared statements) and
// needs the login's role defaults, which `strata migrate up` sets when it
// is told. What strata does detect, at start, is a serving URL that goes
// through a transaction-mode pooler it was not told about: the app's is
// refused with the setting to change, the projector's always (its leases
// are session advisory locks and its runners LISTEN).

const appPoolerVar = "STRATA_APP_DATABASE_POOLER"

// appPooler reads STRATA_APP_DATABASE_POOLER.
func (e env) appPooler() (string, error) {
	switch v := e.str(appPoolerVar, db.PoolerNone); v {
	case db.PoolerNone, db.PoolerSession, db.PoolerTransaction:
		return v, nil
	default:
		return "", fmt.Errorf("%s=%q: want none, session or transaction", appPoolerVar, v)
	}
}

// poolerFor is the pooler of a serving login's URL: only the app's may be
// a transaction-mode pooler.
func poolerFor(e env, role string) (string, error) {
	p, err := e.appPooler()
	if err != nil || role != db.RoleApp {
		return db.PoolerNone, err
	}
	return p, nil
}

// markPooled sets Pooled on the app's login when its URL is a
// transaction-mode pooler, so that provisioning gives it the session
// defaults it needs there.
func markPooled(e env, logins []db.Login) ([]db.Login, error) {
	p, err := e.appPooler()
	if err != nil {
		return nil, err
	}
	for i := range logins {
		logins[i].Pooled = p == db.PoolerTransaction && logins[i].Role == db.RoleApp
	}
	return logins, nil
}

// projectorNeedsDirect is the advice of a refused projector URL.
const projectorNeedsDirect = "the projector role's leases are session advisory locks and its runners LISTEN, which a transaction-mode pooler does not keep: " +
	"point STRATA_PROJECTOR_DATABASE_URL at PostgreSQL itself or at a session-mode pool (PgBouncer pool_mode = session); docs/pgbouncer.md"

// checkPooler checks, when a serving pool is opened, that its URL is what
// the settings say. probeErr is the error (or nil) of the login check that
// just ran on the pool. A pooled app login whose sessions do not start as
// strata_app is refused; a pool for PostgreSQL that turns out to be a
// transaction-mode pooler (PgBouncer refused its startup parameters, or
// two sessions shared a backend) is refused with what to set. A database
// that does not answer yet is left to /readyz.
func checkPooler(ctx context.Context, l *servingLogin, pool *pgxpool.Pool, pooler string, probeErr error, logger *slog.Logger) error {
	var pse *db.PooledSessionError
	if errors.As(probeErr, &pse) {
		return fmt.Errorf("refusing to serve: %s (%s)", pse.Error(), l.source)
	}
	if pooler == db.PoolerTransaction {
		return nil // AfterConnect checked the session
	}
	evidence := ""
	switch {
	case db.IsPoolerRefusal(probeErr):
		evidence = "the server refused a PostgreSQL startup parameter (" + db.ServerMessage(probeErr) + "), as PgBouncer does"
	case db.IsUnavailable(probeErr):
		return nil
	default:
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		pooled, err := db.DetectTransactionPooling(dctx, pool)
		cancel()
		switch {
		case db.IsPoolerRefusal(err):
			evidence = "the server refused a PostgreSQL startup parameter (" + db.ServerMessage(err) + "), as PgBouncer does"
		case err != nil:
			logger.Warn("cannot tell whether the serving URL goes through a connection pooler", "login", l.source, "error", pgMessage(err))
			return nil
		case pooled:
			evidence = "two of its sessions were served by one PostgreSQL backend"
		}
	}
	if evidence == "" {
		return nil
	}
	if l.role == db.RoleProjector {
		return fmt.Errorf("refusing to serve: the projector login (%s) goes through a transaction-mode connection pooler (%s); %s", l.source, evidence, projectorNeedsDirect)
	}
	return fmt.Errorf("refusing to serve: the app login (%s) goes through a transaction-mode connection pooler (%s): set %s=transaction "+
		"(and run `strata migrate up` with it, which gives the login the role defaults it needs there), or point STRATA_APP_DATABASE_URL at PostgreSQL or a session-mode pool; docs/pgbouncer.md",
		l.source, evidence, appPoolerVar)
}
