package pgtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { Main(m) }

func query[T any](t testing.TB, url, sql string, args ...any) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(context.Background())
	var v T
	if err := conn.QueryRow(ctx, sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

func execSQL(t testing.TB, url, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := execAdmin(ctx, url, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func dbExists(t testing.TB, name string) bool {
	return query[bool](t, AdminURL(t), "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", name)
}

func TestNewDatabaseIsolated(t *testing.T) {
	a := NewDatabase(t)
	b := NewDatabase(t)
	nameA := query[string](t, a, "SELECT current_database()")
	nameB := query[string](t, b, "SELECT current_database()")
	if nameA == nameB {
		t.Fatalf("both URLs lead to %s", nameA)
	}
	for _, n := range []string{nameA, nameB} {
		if !strings.HasPrefix(n, "t_testnewdatabaseisolated_") || len(n) > 63 {
			t.Errorf("unexpected database name %q", n)
		}
	}
	execSQL(t, a, "CREATE TABLE only_in_a (id int)")
	if query[bool](t, b, "SELECT to_regclass('only_in_a') IS NOT NULL") {
		t.Fatal("table created in A is visible in B")
	}
	if !query[bool](t, a, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user") {
		t.Fatal("NewDatabase URL is not a superuser URL")
	}

	// The database is dropped at the end of the (sub)test, even with an
	// open connection.
	var inner string
	t.Run("dropped in cleanup", func(t *testing.T) {
		u := NewDatabase(t)
		inner = query[string](t, u, "SELECT current_database()")
		conn, err := pgx.Connect(context.Background(), u)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn // left open on purpose: DROP ... WITH (FORCE)
	})
	if dbExists(t, inner) {
		t.Fatalf("database %s still exists after its test ended", inner)
	}
}

func TestDatabaseName(t *testing.T) {
	long := strings.Repeat("VeryLong/Sub test-name ", 10)
	n := databaseName(long)
	if len(n) > 63 || !strings.HasPrefix(n, "t_verylong_sub_test_name_") {
		t.Fatalf("databaseName = %q (%d bytes)", n, len(n))
	}
	if databaseName(long) == n {
		t.Fatal("names are not unique")
	}
	if n := databaseName("///"); !strings.HasPrefix(n, "t_") || strings.Contains(n, "__") {
		t.Fatalf("databaseName = %q", n)
	}
}

func uniqueTemplate(t *testing.T) string {
	name := "tpl_pgtest_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = execAdmin(ctx, AdminURL(t), "DROP DATABASE IF EXISTS "+ident(name)+" WITH (FORCE)")
	})
	return name
}

// seedTemplate creates table seed(v) holding 42, slowly, and counts calls.
func seedTemplate(calls *atomic.Int32) func(ctx context.Context, url string) error {
	return func(ctx context.Context, url string) error {
		calls.Add(1)
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		time.Sleep(300 * time.Millisecond) // widen the race window
		_, err = conn.Exec(ctx, "CREATE TABLE seed (v int); INSERT INTO seed VALUES (42)")
		return err
	}
}

func TestWithTemplateParallel(t *testing.T) {
	name := uniqueTemplate(t)
	var calls atomic.Int32
	setup := seedTemplate(&calls)
	var mu sync.Mutex
	seen := map[string]bool{}
	t.Run("clones", func(t *testing.T) {
		for i := range 8 {
			t.Run(strconv.Itoa(i), func(t *testing.T) {
				t.Parallel()
				began := time.Now()
				u := NewDatabase(t, WithTemplate(name, setup))
				t.Logf("NewDatabase with template took %s", time.Since(began).Round(time.Millisecond))
				if v := query[int](t, u, "SELECT v FROM seed"); v != 42 {
					t.Fatalf("seed = %d", v)
				}
				execSQL(t, u, "INSERT INTO seed VALUES (1)") // clones are independent
				mu.Lock()
				seen[query[string](t, u, "SELECT current_database()")] = true
				mu.Unlock()
			})
		}
	})
	if n := calls.Load(); n != 1 {
		t.Fatalf("setup ran %d times, want 1", n)
	}
	if len(seen) != 8 {
		t.Fatalf("%d distinct databases, want 8", len(seen))
	}
	if n := query[int](t, urlForDatabase(AdminURL(t), name), "SELECT count(*) FROM seed"); n != 1 {
		t.Fatalf("template has %d rows, clones leaked into it", n)
	}
	// Timing of a clone once the template exists.
	began := time.Now()
	NewDatabase(t, WithTemplate(name, setup))
	t.Logf("NewDatabase from an existing template: %s", time.Since(began).Round(time.Millisecond))
	began = time.Now()
	NewDatabase(t)
	t.Logf("NewDatabase without template: %s", time.Since(began).Round(time.Millisecond))
}

func TestWithTemplateRebuildsHalfBuilt(t *testing.T) {
	name := uniqueTemplate(t)
	admin := AdminURL(t)
	// What a run killed during setup leaves behind: no completion marker.
	execSQL(t, admin, "CREATE DATABASE "+ident(name))
	execSQL(t, urlForDatabase(admin, name), "CREATE TABLE junk (id int)")
	var calls atomic.Int32
	u := NewDatabase(t, WithTemplate(name, seedTemplate(&calls)))
	if calls.Load() != 1 {
		t.Fatalf("setup ran %d times, want 1", calls.Load())
	}
	if query[bool](t, u, "SELECT to_regclass('junk') IS NOT NULL") {
		t.Fatal("clone has the half-built template's table")
	}
	if query[int](t, u, "SELECT v FROM seed") != 42 {
		t.Fatal("clone lacks the template's table")
	}
}

func TestWithTemplateSetupFailure(t *testing.T) {
	name := uniqueTemplate(t)
	var calls atomic.Int32
	failing := func(ctx context.Context, url string) error {
		calls.Add(1)
		return fmt.Errorf("boom")
	}
	ok := t.Run("fails", func(t *testing.T) {
		// Run in a helper TB so the expected failure does not fail us.
		ft := &fatalCatcher{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			NewDatabase(ft, WithTemplate(name, failing))
		}()
		<-done
		if !ft.failed || !strings.Contains(ft.msg, "boom") {
			t.Fatalf("expected a failure mentioning the setup error, got %q", ft.msg)
		}
	})
	if !ok {
		return
	}
	if dbExists(t, name) {
		t.Fatal("failed template was not dropped")
	}
	var good atomic.Int32
	u := NewDatabase(t, WithTemplate(name, seedTemplate(&good)))
	if good.Load() != 1 || query[int](t, u, "SELECT v FROM seed") != 42 {
		t.Fatal("template not rebuilt after a failed setup")
	}
}

// fatalCatcher records Fatalf instead of failing; Fatalf ends the calling
// goroutine like the real one.
type fatalCatcher struct {
	testing.TB
	failed bool
	msg    string
}

func (f *fatalCatcher) Fatalf(format string, args ...any) {
	f.failed, f.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

const helperTemplateEnv = "PGTEST_HELPER_TEMPLATE"

// TestHelperTemplateProcess is run in sub-processes by
// TestWithTemplateAcrossProcesses; it does nothing otherwise.
func TestHelperTemplateProcess(t *testing.T) {
	name := os.Getenv(helperTemplateEnv)
	if name == "" {
		return
	}
	u := NewDatabase(t, WithTemplate(name, func(ctx context.Context, url string) error {
		var calls atomic.Int32
		if err := seedTemplate(&calls)(ctx, url); err != nil {
			return err
		}
		return execAdmin(ctx, AdminURL(t), "INSERT INTO pgtest_setup_calls VALUES ("+strconv.Itoa(os.Getpid())+")")
	}))
	if query[int](t, u, "SELECT v FROM seed") != 42 {
		t.Fatal("clone lacks seed")
	}
}

func TestWithTemplateAcrossProcesses(t *testing.T) {
	admin := AdminURL(t)
	name := uniqueTemplate(t)
	execSQL(t, admin, "DROP TABLE IF EXISTS pgtest_setup_calls; CREATE TABLE pgtest_setup_calls (pid int)")
	t.Cleanup(func() { execSQL(t, admin, "DROP TABLE IF EXISTS pgtest_setup_calls") })
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const n = 3
	errs := make(chan error, n)
	for range n {
		go func() {
			cmd := exec.Command(self, "-test.run=^TestHelperTemplateProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), EnvURL+"="+admin, helperTemplateEnv+"="+name)
			out, err := cmd.CombinedOutput()
			if err != nil {
				err = fmt.Errorf("helper: %v\n%s", err, out)
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if calls := query[int](t, admin, "SELECT count(*) FROM pgtest_setup_calls"); calls != 1 {
		t.Fatalf("setup ran %d times across %d processes, want 1", calls, n)
	}
}

func TestServerAndStartPrivate(t *testing.T) {
	srv := Server(t)
	if (os.Getenv(EnvURL) != "") != (srv == nil) {
		t.Fatalf("Server() = %v with $%s=%q", srv, EnvURL, os.Getenv(EnvURL))
	}
	if srv != nil && srv.URL() != AdminURL(t) {
		t.Fatalf("Server().URL() = %s, AdminURL = %s", srv.URL(), AdminURL(t))
	}

	var dir string
	t.Run("private", func(t *testing.T) {
		p := StartPrivate(t, map[string]string{"max_connections": "50"})
		dir = filepath.Dir(p.DataDir())
		if srv != nil && p.Port() == srv.Port() {
			t.Fatal("private cluster shares the port of the shared one")
		}
		if got := query[string](t, p.URL(), "SHOW max_connections"); got != "50" {
			t.Fatalf("max_connections = %s", got)
		}
		if got := query[string](t, p.URL(), "SHOW fsync"); got != "off" {
			t.Fatalf("fsync = %s", got)
		}
		if got := query[string](t, p.URL(), "SHOW synchronous_commit"); got != "on" {
			t.Fatalf("synchronous_commit = %s (crash tests need it on)", got)
		}
		execSQL(t, p.URL(), "CREATE TABLE outage (id int); INSERT INTO outage VALUES (1)")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := p.StopImmediate(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := pgx.Connect(ctx, p.URL()); err == nil {
			t.Fatal("connected to a stopped server")
		}
		if err := p.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		if query[int](t, p.URL(), "SELECT count(*) FROM outage") != 1 {
			t.Fatal("data lost across crash + restart")
		}
	})
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("private cluster directory %s not removed: %v", dir, err)
	}
}

func TestSweepStale(t *testing.T) {
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	mk := func(pid int) string {
		dir, err := os.MkdirTemp("", dirPrefix)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	stale, live := mk(dead.Process.Pid), mk(os.Getppid())
	sweepStale()
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale directory %s survived the sweep", stale)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("directory of a live owner was removed: %v", err)
	}
	if d := cluster.dir; d != "" {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("our own cluster directory was removed: %v", err)
		}
	}
}

// TestStartReplica: a replica started from a private primary follows it
// (a row written on the primary is replayed), is read-only, and stops
// replaying while paused.
func TestStartReplica(t *testing.T) {
	primary := StartPrivate(t, nil)
	execSQL(t, primary.URL(), `CREATE TABLE marks (n int)`)
	replica := StartReplica(t, primary, nil)
	if !query[bool](t, replica.URL(), `SELECT pg_is_in_recovery()`) {
		t.Fatal("the replica is not in recovery")
	}
	waitRows := func(want int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for query[int64](t, replica.URL(), `SELECT count(*) FROM marks`) != int64(want) {
			if time.Now().After(deadline) {
				t.Fatalf("the replica did not replay %d rows within 30s", want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	execSQL(t, primary.URL(), `INSERT INTO marks VALUES (1)`)
	waitRows(1)

	execSQL(t, replica.URL(), `SELECT pg_wal_replay_pause()`)
	for !query[bool](t, replica.URL(), `SELECT pg_get_wal_replay_pause_state() = 'paused'`) {
		time.Sleep(5 * time.Millisecond)
	}
	execSQL(t, primary.URL(), `INSERT INTO marks VALUES (2)`)
	// The primary flushed the row and the replica received it (streaming
	// goes on while paused), but has not replayed it.
	deadline := time.Now().Add(30 * time.Second)
	for query[bool](t, replica.URL(), `SELECT pg_last_wal_receive_lsn() < `+"'"+query[string](t, primary.URL(), `SELECT pg_current_wal_lsn()::text`)+"'"+`::pg_lsn`) {
		if time.Now().After(deadline) {
			t.Fatal("the paused replica did not receive the WAL within 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := query[int64](t, replica.URL(), `SELECT count(*) FROM marks`); n != 1 {
		t.Fatalf("the paused replica shows %d rows, want 1", n)
	}
	execSQL(t, replica.URL(), `SELECT pg_wal_replay_resume()`)
	waitRows(2)

	conn, err := pgx.Connect(context.Background(), replica.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `INSERT INTO marks VALUES (3)`); err == nil {
		t.Fatal("the replica accepted a write")
	}
}
