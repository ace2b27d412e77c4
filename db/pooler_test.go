package db

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/internal/pgbouncer"
)

// startBouncer starts a PgBouncer in front of the database of dbURL for
// users (the first is the console's admin and need not exist in
// PostgreSQL). It fails the test when PgBouncer is not installed.
func startBouncer(t *testing.T, dbURL, mode string, poolSize int, settings map[string]string, users ...string) (*pgbouncer.Server, string) {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(u.Port())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := pgbouncer.Start(ctx, pgbouncer.Config{Port: port, PoolMode: mode, PoolSize: poolSize, Users: users, Settings: settings})
	if err != nil {
		t.Fatalf("start PgBouncer: %v", err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	return srv, strings.TrimPrefix(u.Path, "/")
}

// TestPoolThroughPgBouncerTransactionMode: the application's pool, opened
// for a transaction-mode pooler, works through PgBouncer with one server
// connection for many client sessions (no prepared statement, role or
// search_path of a session is needed), its login cannot escalate there
// (decision 11), a login without the role defaults is refused with what
// to run, and the detection tells PgBouncer in transaction mode from
// PostgreSQL and from a session-mode pool.
func TestPoolThroughPgBouncerTransactionMode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dbURL := migrated(t)
	admin, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	login, bare := uniqueRole(t, admin, "t_pgb_app"), uniqueRole(t, admin, "t_pgb_bare")
	loginURL, _ := LoginURL(dbURL, login)
	bareURL, _ := LoginURL(dbURL, bare)
	if err := EnsureLogins(ctx, dbURL, []Login{{Role: RoleApp, URL: loginURL, Pooled: true}, {Role: RoleApp, URL: bareURL}}, nil); err != nil {
		t.Fatal(err)
	}
	bouncer, dbName := startBouncer(t, dbURL, "transaction", 1, nil, "t_pgb_console", login, bare)

	pool, err := OpenPool(ctx, bouncer.URL(login, dbName), PoolConfig{Role: RoleApp, Pooler: PoolerTransaction, MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := CheckServing(ctx, pool, RoleApp); err != nil {
		t.Fatalf("the pooled login's check: %v", err)
	}

	// 8 client sessions, 1 server connection, statements with arguments
	// of several types (described once, then unnamed per execution).
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				var who, echoed string
				var n int64
				err := pool.QueryRow(ctx, `SELECT current_user::text, $1::text, $2::bigint + 1`, fmt.Sprint(w), int64(i)).Scan(&who, &echoed, &n)
				if err == nil && (who != RoleApp || echoed != fmt.Sprint(w) || n != int64(i)+1) {
					err = fmt.Errorf("session %d: got %s %s %d", w, who, echoed, n)
				}
				if err == nil {
					err = pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
						if err := SetTenant(ctx, tx, fmt.Sprintf("t%d", w)); err != nil {
							return err
						}
						var tenant string
						if err := tx.QueryRow(ctx, `SELECT current_setting('`+TenantSetting+`')`).Scan(&tenant); err != nil {
							return err
						}
						if tenant != fmt.Sprintf("t%d", w) {
							return fmt.Errorf("session %d sees tenant %q", w, tenant)
						}
						return nil
					})
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var servers int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE usename = $1`, login).Scan(&servers); err != nil {
		t.Fatal(err)
	}
	if servers != 1 {
		t.Errorf("%d server connections of %s, want PgBouncer's 1", servers, login)
	}
	// A session outside a transaction sees no tenant: the last
	// transaction's set_config did not stay on the shared connection.
	var leftover *string
	if err := pool.QueryRow(ctx, `SELECT nullif(current_setting('`+TenantSetting+`', true), '')`).Scan(&leftover); err != nil || leftover != nil {
		t.Errorf("outside a transaction the tenant is %v (%v), want none", leftover, err)
	}

	detect := func(p *pgxpool.Pool) bool {
		t.Helper()
		got, err := DetectTransactionPooling(ctx, p)
		if err != nil {
			t.Fatalf("detect: %v", err)
		}
		return got
	}
	if !detect(pool) {
		t.Error("PgBouncer in transaction mode (pool of 1) not detected")
	}
	big, _ := startBouncer(t, dbURL, "transaction", 4, nil, "t_pgb_console", login)
	direct4, err := OpenPool(ctx, big.URL(login, dbName), PoolConfig{Role: RoleApp})
	if err != nil {
		t.Fatal(err)
	}
	defer direct4.Close()
	if !detect(direct4) {
		t.Error("PgBouncer in transaction mode (pool of 4) not detected by a pool opened for PostgreSQL")
	}
	direct, err := OpenPool(ctx, loginURL, PoolConfig{Role: RoleApp})
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	if detect(direct) {
		t.Error("PostgreSQL itself detected as a transaction-mode pooler")
	}
	session, _ := startBouncer(t, dbURL, "session", 2, nil, "t_pgb_console", login)
	sessionPool, err := OpenPool(ctx, session.URL(login, dbName), PoolConfig{Role: RoleApp, Pooler: PoolerSession})
	if err != nil {
		t.Fatal(err)
	}
	defer sessionPool.Close()
	if detect(sessionPool) {
		t.Error("PgBouncer in session mode detected as a transaction-mode pooler")
	}
	if err := CheckServing(ctx, sessionPool, RoleApp); err != nil {
		t.Errorf("through a session-mode pool: %v", err)
	}
	// A pool opened for PostgreSQL through the pool of one.
	wrong, err := OpenPool(ctx, bouncer.URL(login, dbName), PoolConfig{Role: RoleApp})
	if err != nil {
		t.Fatal(err)
	}
	defer wrong.Close()
	if !detect(wrong) {
		t.Error("PgBouncer in transaction mode (pool of 1) not detected by a pool opened for PostgreSQL")
	}

	// A login without the role defaults is refused, with what to run.
	barePool, err := OpenPool(ctx, bouncer.URL(bare, dbName), PoolConfig{Role: RoleApp, Pooler: PoolerTransaction})
	if err != nil {
		t.Fatal(err)
	}
	defer barePool.Close()
	var pse *PooledSessionError
	if err := barePool.Ping(ctx); !errors.As(err, &pse) || !strings.Contains(err.Error(), "ALTER ROLE "+pgx.Identifier{bare}.Sanitize()+" SET role = "+RoleApp) {
		t.Errorf("a pooled login without role defaults: %v", err)
	}

	// Decision 11 through the pooler: every way out fails or lands on
	// the bare login, which reads nothing, on the shared server
	// connection too; RESET ROLE returns to strata_app (the default).
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, attempt := range []string{"SET ROLE " + RoleOwner, "SET ROLE " + RoleProjector, "SET SESSION AUTHORIZATION postgres", "SET ROLE postgres"} {
		if _, err := conn.Exec(ctx, attempt); err == nil {
			t.Errorf("%s through PgBouncer succeeded", attempt)
		}
	}
	if _, err := conn.Exec(ctx, "SET ROLE NONE"); err != nil {
		t.Fatal(err)
	}
	other, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	err = other.QueryRow(ctx, `SELECT count(*) FROM strata.events`).Scan(&n)
	other.Release()
	if SQLState(err) != "42501" {
		t.Errorf("after SET ROLE NONE on the shared server connection, another session reads events: %v (want permission denied)", err)
	}
	if _, err := conn.Exec(ctx, "RESET ROLE"); err != nil {
		t.Fatal(err)
	}
	if err := CheckPooledSession(ctx, conn, RoleApp); err != nil {
		t.Errorf("after RESET ROLE: %v", err)
	}
	if err := CheckServing(ctx, conn, RoleApp); err != nil {
		t.Errorf("after the attempts: %v", err)
	}
}
