// Package testdb gives tests a real, migrated strata database and pools that
// run as the application and projector roles, cloned from a template so
// each test pays milliseconds, not a migration run.
package testdb

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/internal/db"
	"github.com/strata-es/strata/internal/pgembed"
	"github.com/strata-es/strata/internal/pgtest"
)

// DB is a fresh migrated database.
type DB struct {
	// AdminURL connects as a superuser (for test setup and fault
	// injection only; never give it to code under test as its own pool).
	AdminURL  string
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
