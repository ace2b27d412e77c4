package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/internal/pgembed"
)

// The connections of strata (ARCHITECTURE decision 11, db
// roles.go): the owner connection (DATABASE_URL, or the embedded
// cluster's superuser) runs migrations and a rebuild's DDL; the serving
// pools log in as logins that cannot escalate: STRATA_APP_DATABASE_URL and
// STRATA_PROJECTOR_DATABASE_URL, or the logins strata provisions from the
// owner connection (db.LoginApp, db.LoginProjector: no password, so they
// log in only where the server trusts the connection, as the embedded and
// the test clusters do on loopback).

// errNoOwnerURL: serving URLs are set but the owner's is not.
var errNoOwnerURL = errors.New("DATABASE_URL is not set: migrations and rebuilds need the owner connection " +
	"(DATABASE_URL: a login that is, or may become, strata_owner, as on the first `strata migrate up`); " +
	"STRATA_APP_DATABASE_URL and STRATA_PROJECTOR_DATABASE_URL are only for serving")

// servingLogin is one serving pool's login and where its URL came from.
type servingLogin struct {
	role   string // db.RoleApp or db.RoleProjector
	url    string
	source string // for messages: the variable, or the provisioned login
	// provisioned: derived from the owner's URL (db.LoginApp or
	// db.LoginProjector), not configured.
	provisioned bool
}

// dbConns are a serve process's database connections.
type dbConns struct {
	owner     string // "" when only serving URLs are set
	app, proj servingLogin
	embedded  *pgembed.Server
	stop      func()
}

// databases resolves the owner connection (DATABASE_URL or the embedded
// PostgreSQL) and the serving logins.
func (e env) databases(ctx context.Context, logger *slog.Logger) (dbConns, error) {
	c := dbConns{stop: func() {}}
	appURL, projURL := e.str("STRATA_APP_DATABASE_URL", ""), e.str("STRATA_PROJECTOR_DATABASE_URL", "")
	owner, embedded, stop, err := e.database(ctx, logger)
	switch {
	case errors.Is(err, errNoOwnerURL):
		if appURL == "" || projURL == "" {
			return c, errors.New("without DATABASE_URL, set both STRATA_APP_DATABASE_URL and STRATA_PROJECTOR_DATABASE_URL (or set DATABASE_URL, the owner's URL, and strata derives the one missing)")
		}
	case err != nil:
		return c, err
	default:
		c.owner, c.embedded, c.stop = owner, embedded, stop
	}
	c.app, err = loginFor(db.RoleApp, appURL, "STRATA_APP_DATABASE_URL", db.LoginApp, c.owner)
	if err != nil {
		c.stop()
		return c, err
	}
	c.proj, err = loginFor(db.RoleProjector, projURL, "STRATA_PROJECTOR_DATABASE_URL", db.LoginProjector, c.owner)
	if err != nil {
		c.stop()
		return c, err
	}
	return c, nil
}

func loginFor(role, configured, variable, login, owner string) (servingLogin, error) {
	if configured != "" {
		return servingLogin{role: role, url: configured, source: variable}, nil
	}
	u, err := db.LoginURL(owner, login)
	if err != nil {
		return servingLogin{}, fmt.Errorf("DATABASE_URL: %w", err)
	}
	return servingLogin{role: role, url: u, source: login + ", provisioned from DATABASE_URL (" + variable + " is unset)", provisioned: true}, nil
}

// servingLogins lists the logins to provision from the environment, for
// `strata migrate up` and an auto-migrating serve.
func (e env) servingLogins(owner string) ([]db.Login, error) {
	var out []db.Login
	for _, l := range []struct{ role, variable, login string }{
		{db.RoleApp, "STRATA_APP_DATABASE_URL", db.LoginApp},
		{db.RoleProjector, "STRATA_PROJECTOR_DATABASE_URL", db.LoginProjector},
	} {
		sl, err := loginFor(l.role, e.str(l.variable, ""), l.variable, l.login, owner)
		if err != nil {
			return nil, err
		}
		out = append(out, db.Login{Role: sl.role, URL: sl.url})
	}
	return markPooled(e, out)
}

// whatToSet is the advice of every refusal to serve.
const whatToSet = "set STRATA_APP_DATABASE_URL and STRATA_PROJECTOR_DATABASE_URL to logins that are members of strata_app and strata_projector only " +
	"and nothing else (`strata migrate up`, with DATABASE_URL the owner's URL, creates them with the URLs' passwords), " +
	"or, for development only, STRATA_ALLOW_PRIVILEGED_LOGIN=true"

// servingPools are the pools of a serve process.
type servingPools struct {
	app, proj *pgxpool.Pool
	// owner is the owner connection of the query role (HTTP rebuilds): nil
	// for other roles and without DATABASE_URL.
	owner *pgxpool.Pool
	// checked is set when the serving logins are checked on every /readyz
	// (not when STRATA_ALLOW_PRIVILEGED_LOGIN lets them be privileged).
	checked bool
	// warnings are shown by /readyz.
	warnings []string
}

func (p *servingPools) close() {
	for _, pool := range []*pgxpool.Pool{p.app, p.proj, p.owner} {
		if pool != nil {
			pool.Close()
		}
	}
}

// openServing opens the serving pools and checks, once now if the
// database answers, that their logins cannot escalate (db.CheckServing):
// a login that can is refused with what to set, unless
// STRATA_ALLOW_PRIVILEGED_LOGIN is set, which is logged as a warning on
// every start. A provisioned login the server does not let in without a
// password is refused the same way; with the opt-out, that pool logs in
// as DATABASE_URL's login instead and switches with SET ROLE, as strata
// did before it had serving logins.
func openServing(ctx context.Context, e env, c dbConns, ownerPool bool, base db.PoolConfig, logger *slog.Logger) (*servingPools, error) {
	allow, err := e.boolean("STRATA_ALLOW_PRIVILEGED_LOGIN", false)
	if err != nil {
		return nil, err
	}
	p := &servingPools{checked: !allow}
	fail := func(err error) (*servingPools, error) {
		p.close()
		return nil, err
	}
	if allow {
		msg := "STRATA_ALLOW_PRIVILEGED_LOGIN=true: serving sessions may be able to escalate (RESET ROLE to a superuser, SET ROLE strata_owner) and read every tenant; development only, never in production"
		logger.Warn(msg)
		p.warnings = append(p.warnings, msg)
	}
	for _, l := range []struct {
		login *servingLogin
		pool  **pgxpool.Pool
		name  string
	}{{&c.app, &p.app, "strata"}, {&c.proj, &p.proj, "strata-projector"}} {
		cfg := base
		cfg.Role, cfg.AppName = l.login.role, l.name
		if cfg.Pooler, err = poolerFor(e, l.login.role); err != nil {
			return fail(err)
		}
		pool, err := db.OpenPool(ctx, l.login.url, cfg)
		if err != nil {
			return fail(fmt.Errorf("%s: %w", l.login.source, err))
		}
		*l.pool = pool
		err = probeServing(ctx, pool, l.login.role)
		if perr := checkPooler(ctx, l.login, pool, cfg.Pooler, err, logger); perr != nil { // proxy.go
			return fail(perr)
		}
		var esc *db.EscalationError
		switch {
		case err == nil:
		case errors.As(err, &esc) && allow:
			msg := fmt.Sprintf("%s (%s); STRATA_ALLOW_PRIVILEGED_LOGIN=true serves through it anyway", esc.Error(), l.login.source)
			logger.Warn(msg)
			p.warnings = append(p.warnings, msg)
		case errors.As(err, &esc):
			return fail(fmt.Errorf("refusing to serve: %s (%s); serving sessions must not be able to leave their role: %s", esc.Error(), l.login.source, whatToSet))
		case db.IsUnavailable(err):
			// serve starts while its database comes up; /readyz checks the
			// logins as soon as it answers.
			logger.Warn("cannot check the serving login yet (the database does not answer); /readyz checks it", "login", l.login.source)
		case isLoginRefused(err) && allow && l.login.provisioned && c.owner != "":
			pool.Close()
			cfg.Role = l.login.role
			if *l.pool, err = db.OpenPool(ctx, c.owner, cfg); err != nil {
				return fail(err)
			}
			msg := fmt.Sprintf("the %s login cannot log in here (%v); STRATA_ALLOW_PRIVILEGED_LOGIN=true serves through DATABASE_URL's login with SET ROLE %s instead: its sessions can RESET ROLE to that login", l.login.source, pgMessage(err), l.login.role)
			logger.Warn(msg)
			p.warnings = append(p.warnings, msg)
		case isLoginRefused(err):
			return fail(fmt.Errorf("refusing to serve: cannot log in as the %s login %s (%v): %s", l.login.role, l.login.source, pgMessage(err), whatToSet))
		default:
			return fail(fmt.Errorf("check the %s login (%s): %w", l.login.role, l.login.source, err))
		}
	}
	if ownerPool {
		if c.owner == "" {
			msg := "no owner connection (DATABASE_URL is unset): rebuilds over HTTP are refused; run `strata replay rebuild` with the owner's DATABASE_URL, or set it for the query role"
			logger.Warn(msg)
			p.warnings = append(p.warnings, msg)
		} else {
			// Sessions of the owner connection run as the projector, as the
			// rebuild's live runner and tenant swap need, and switch to
			// strata_owner per DDL transaction.
			cfg := base
			cfg.Role, cfg.AppName, cfg.MaxConns = db.RoleProjector, "strata-owner", 4
			if p.owner, err = db.OpenPool(ctx, c.owner, cfg); err != nil {
				return fail(fmt.Errorf("DATABASE_URL: %w", err))
			}
		}
	}
	logger.Info("database connections", "app_login", userOf(c.app.url), "projector_login", userOf(c.proj.url), "owner_login", userOf(c.owner))
	return p, nil
}

// probeServing checks a serving pool's login on one of its sessions.
func probeServing(ctx context.Context, pool *pgxpool.Pool, role string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	return db.CheckServing(ctx, conn, role)
}

// checkLogins is the readiness check of the serving logins: a login that
// has become privileged since serve started (a grant, an ALTER ROLE)
// makes the process unready, saying which and why.
func (p *servingPools) checkLogins(ctx context.Context) error {
	if !p.checked {
		return nil
	}
	for _, l := range []struct {
		pool *pgxpool.Pool
		role string
	}{{p.app, db.RoleApp}, {p.proj, db.RoleProjector}} {
		err := probeServing(ctx, l.pool, l.role)
		var esc *db.EscalationError
		switch {
		case errors.As(err, &esc):
			return fmt.Errorf("%s: %s", esc.Error(), whatToSet)
		case err != nil:
			return errors.New("unreachable")
		}
	}
	return nil
}

// isLoginRefused reports an authentication failure or a missing role:
// what a provisioned login without a password meets on a server that
// wants one.
func isLoginRefused(err error) bool {
	switch db.SQLState(err) {
	case "28P01", "28000":
		return true
	}
	return false
}

// pgMessage is the server's message of err without the connection string
// pgx puts around it (it may carry a password).
func pgMessage(err error) string {
	if msg := db.ServerMessage(err); msg != "" {
		return msg
	}
	return "connection refused"
}

// userOf returns the user a URL logs in as ("" for none).
func userOf(u string) string {
	if u == "" {
		return ""
	}
	cfg, err := pgx.ParseConfig(u)
	if err != nil {
		return "?"
	}
	return cfg.User
}

// autoMigrateServe applies pending migrations and provisions the serving
// logins on the owner connection when STRATA_AUTO_MIGRATE allows it.
// Without an owner connection there is nothing to migrate with: that is an
// error only when STRATA_AUTO_MIGRATE=true was asked for.
func autoMigrateServe(ctx context.Context, e env, auto bool, c dbConns, logger *slog.Logger, lines []db.Line) error {
	if !auto {
		return nil
	}
	if c.owner == "" {
		if e.str("STRATA_AUTO_MIGRATE", "") != "" {
			return fmt.Errorf("STRATA_AUTO_MIGRATE=true: %w", errNoOwnerURL)
		}
		logger.Info("no owner connection (DATABASE_URL is unset): migrations are not applied here; run `strata migrate up` with the owner's DATABASE_URL")
		return nil
	}
	logf := func(format string, args ...any) { logger.Info(fmt.Sprintf(format, args...)) }
	if err := db.Up(ctx, c.owner, logf, lines...); err != nil {
		return fmt.Errorf("migrate (set STRATA_AUTO_MIGRATE=false and run `strata migrate up` with an owner's DATABASE_URL if this role may not change the schema): %w", err)
	}
	// A login that cannot be provisioned is reported when the pools are
	// checked, with what to set; here it is only a warning.
	logins, err := markPooled(e, []db.Login{{Role: c.app.role, URL: c.app.url}, {Role: c.proj.role, URL: c.proj.url}})
	if err != nil {
		return err
	}
	if err := db.EnsureLogins(ctx, c.owner, logins, logf); err != nil {
		logger.Warn("provision the serving logins", "error", err.Error())
	}
	return nil
}
