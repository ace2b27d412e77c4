// Package testdb gives tests a real, migrated strata database and pools that
// run as the application and projector roles, cloned from a template so
// each test pays milliseconds, not a migration run.
package testdb

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/internal/pgembed"
	"github.com/strata-es/strata/internal/pgtest"
)

// DB is a fresh migrated database.
type DB struct {
	// AdminURL connects as a superuser (for test setup and fault
	// injection only; never give it to code under test as its own pool).
	AdminURL string
	// App and Projector log in as the superuser and SET ROLE (so a test may
	// also use Projector as a replay tool's owner connection); ServingPools
	// logs in as the serving logins, as strata serve does.
	App       *pgxpool.Pool // runs as db.RoleApp
	Projector *pgxpool.Pool // runs as db.RoleProjector
}

// TemplateName names the template database for the current migrations of
// the engine and lines, so a changed migration builds a new template
// instead of reusing a stale one.
func TemplateName(lines ...db.Line) string {
	return "strata_tmpl_" + db.Fingerprint(lines...)[:12]
}

// New returns a fresh database with open pools, closed in cleanup,
// migrated with the engine's line and the given modules' lines (a test of
// a module passes its own; tests that run every module pass them all).
func New(t testing.TB, lines ...db.Line) *DB {
	t.Helper()
	url := pgtest.NewDatabase(t, pgtest.WithTemplate(TemplateName(lines...), func(ctx context.Context, adminURL string) error {
		return db.Up(ctx, adminURL, nil, lines...)
	}))
	ctx := context.Background()
	// The serving logins are cluster-wide: made once per cluster, also when
	// a template of an earlier run is reused ($TEST_DATABASE_URL).
	loginsOnce.Do(func() { loginsErr = ensureLogins(ctx, url) })
	if loginsErr != nil {
		t.Fatalf("provision the serving logins: %v", loginsErr)
	}
	app, err := db.OpenPool(ctx, url, db.PoolConfig{Role: db.RoleApp, MaxConns: 16})
	if err != nil {
		t.Fatalf("open app pool: %v", err)
	}
	proj, err := db.OpenPool(ctx, url, db.PoolConfig{Role: db.RoleProjector, MaxConns: 8})
	if err != nil {
		t.Fatalf("open projector pool: %v", err)
	}
	t.Cleanup(func() { app.Close(); proj.Close() })
	return &DB{AdminURL: url, App: app, Projector: proj}
}

// Private is a migrated database on a cluster of its own.
type Private struct {
	*DB
	Server *pgembed.Server
}

// NewPrivate starts a dedicated PostgreSQL cluster, migrates it and opens
// pools. Use it for tests that must not share the cluster-wide transaction
// horizon with other tests (a transaction held open anywhere in a cluster
// pauses every global-log reader of that cluster, by design), or that stop
// and restart PostgreSQL.
func NewPrivate(t testing.TB, settings map[string]string, lines ...db.Line) *Private {
	t.Helper()
	srv := pgtest.StartPrivate(t, settings)
	url := srv.URL()
	ctx := context.Background()
	if err := db.Up(ctx, url, nil, lines...); err != nil {
		t.Fatalf("migrate private cluster: %v", err)
	}
	if err := ensureLogins(ctx, url); err != nil {
		t.Fatalf("provision the serving logins: %v", err)
	}
	app, err := db.OpenPool(ctx, url, db.PoolConfig{Role: db.RoleApp, MaxConns: 16})
	if err != nil {
		t.Fatalf("open app pool: %v", err)
	}
	proj, err := db.OpenPool(ctx, url, db.PoolConfig{Role: db.RoleProjector, MaxConns: 8})
	if err != nil {
		t.Fatalf("open projector pool: %v", err)
	}
	t.Cleanup(func() { app.Close(); proj.Close() })
	return &Private{DB: &DB{AdminURL: url, App: app, Projector: proj}, Server: srv}
}

var (
	loginsOnce sync.Once
	loginsErr  error
)

// ensureLogins provisions db.LoginApp and db.LoginProjector, as `strata
// migrate up` does with no serving URL configured.
func ensureLogins(ctx context.Context, adminURL string) error {
	var logins []db.Login
	for role, login := range map[string]string{db.RoleApp: db.LoginApp, db.RoleProjector: db.LoginProjector} {
		u, err := db.LoginURL(adminURL, login)
		if err != nil {
			return err
		}
		logins = append(logins, db.Login{Role: role, URL: u})
	}
	return db.EnsureLogins(ctx, adminURL, logins, nil)
}

// ServingPools opens pools that log in as the serving logins strata serve
// derives from a superuser DATABASE_URL (db.LoginApp, db.LoginProjector,
// no password: the test clusters trust loopback), running as db.RoleApp
// and db.RoleProjector. Unlike App and Projector, whose sessions log in as
// the superuser, they cannot escalate. Closed in cleanup.
func (d *DB) ServingPools(t testing.TB) (app, projector *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	for _, p := range []struct {
		pool        **pgxpool.Pool
		login, role string
	}{{&app, db.LoginApp, db.RoleApp}, {&projector, db.LoginProjector, db.RoleProjector}} {
		u, err := db.LoginURL(d.AdminURL, p.login)
		if err != nil {
			t.Fatal(err)
		}
		pool, err := db.OpenPool(ctx, u, db.PoolConfig{Role: p.role, MaxConns: 8})
		if err != nil {
			t.Fatalf("open %s pool: %v", p.login, err)
		}
		t.Cleanup(pool.Close)
		*p.pool = pool
	}
	return app, projector
}
