package pgembed

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// helperEnv makes the test binary act as a helper process that starts a
// Child-mode server in the given data directory, prints its port and blocks.
const (
	helperEnv     = "PGEMBED_TEST_CHILD_HELPER_DIR"
	helperModeEnv = "PGEMBED_TEST_HELPER_MODE" // "daemon" or Child
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(helperEnv); dir != "" {
		mode := Child
		if os.Getenv(helperModeEnv) == "daemon" {
			mode = Daemon
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		s, err := Start(ctx, Config{DataDir: dir, Mode: mode, Settings: map[string]string{"fsync": "off"}})
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			os.Exit(3)
		}
		fmt.Printf("PORT=%d PID=%d\n", s.Port(), s.pid)
		select {} // until killed
	}
	os.Exit(m.Run())
}

// testDir returns a fresh directory that the postgres OS user can traverse
// (t.TempDir() is mode 0700, which it cannot when we run as root).
func testDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pgembed-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func start(t *testing.T, cfg Config) *Server {
	t.Helper()
	if cfg.Logf == nil {
		cfg.Logf = t.Logf
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	began := time.Now()
	s, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Logf("Start (%s) took %s", cfg.Mode, time.Since(began).Round(time.Millisecond))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.StopImmediate(ctx); err != nil {
			t.Errorf("cleanup StopImmediate: %v", err)
		}
	})
	return s
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func exec1(t *testing.T, url, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func countRows(t *testing.T, url, table string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

func portOpen(port int) bool {
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 500*time.Millisecond)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

func waitPortClosed(t *testing.T, port int, within time.Duration) time.Duration {
	t.Helper()
	began := time.Now()
	for portOpen(port) {
		if time.Since(began) > within {
			t.Fatalf("port %d still accepts connections after %s", port, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(began)
}

func TestDaemonStartReuseStop(t *testing.T) {
	dataDir := filepath.Join(testDir(t), "nested", "pgdata")
	s := start(t, Config{DataDir: dataDir, Settings: map[string]string{"fsync": "off", "application_name": "it's pgembed"}})
	if s.Port() == 0 || s.Port() == 5432 {
		t.Fatalf("unexpected port %d", s.Port())
	}
	if want := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.Port()); s.URL() != want {
		t.Fatalf("URL() = %q, want %q", s.URL(), want)
	}
	exec1(t, s.URL(), "CREATE TABLE kept (id int); INSERT INTO kept VALUES (1)")
	var app string
	conn := connect(t, s.URL())
	if err := conn.QueryRow(context.Background(), "SHOW application_name").Scan(&app); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(context.Background())
	if app != "it's pgembed" {
		t.Fatalf("setting with a quote not passed through pg_ctl: got %q", app)
	}
	if _, err := os.Stat(filepath.Join(dataDir, ".s.PGSQL."+strconv.Itoa(s.Port()))); err != nil {
		t.Errorf("unix socket not in the data directory: %v", err)
	}

	// A second Start on the same DataDir adopts the running server.
	s2 := start(t, Config{DataDir: dataDir})
	if s2.Port() != s.Port() || s2.pid != s.pid || s2.pid == 0 {
		t.Fatalf("second Start did not reuse: port %d/%d pid %d/%d", s2.Port(), s.Port(), s2.pid, s.pid)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s2.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if portOpen(s.Port()) || processAlive(s.pid) {
		t.Fatalf("server still up after Stop")
	}
	if err := s2.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}

	// A stale postmaster.pid (dead pid) does not block the next start.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := fmt.Sprintf("%d\n%s\n1700000000\n%d\n%s\n127.0.0.1\n  1234567     65536\nready   \n", dead.Process.Pid, dataDir, s.Port(), dataDir)
	pidPath := filepath.Join(dataDir, "postmaster.pid")
	if err := os.WriteFile(pidPath, []byte(stale), 0o600); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dataDir); err == nil { // as the server's OS user would have left it
		st := fi.Sys().(*syscall.Stat_t)
		_ = os.Chown(pidPath, int(st.Uid), int(st.Gid))
	}
	s3 := start(t, Config{DataDir: dataDir})
	if n := countRows(t, s3.URL(), "kept"); n != 1 {
		t.Fatalf("kept has %d rows", n)
	}

	// Crash and restart on the same port (daemon flavour).
	port := s3.Port()
	if err := s3.StopImmediate(ctx); err != nil {
		t.Fatalf("StopImmediate: %v", err)
	}
	if portOpen(port) {
		t.Fatal("port open after StopImmediate")
	}
	if err := s3.Restart(ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if s3.Port() != port {
		t.Fatalf("Restart changed the port %d -> %d", port, s3.Port())
	}
	if n := countRows(t, s3.URL(), "kept"); n != 1 {
		t.Fatalf("kept has %d rows after crash+restart", n)
	}
	if err := s3.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
}

// The daemon outlives a `strata serve` killed with -9, and the next Start
// adopts it.
func TestDaemonOutlivesKilledProcess(t *testing.T) {
	dataDir := filepath.Join(testDir(t), "data")
	helper, port, pid := startHelper(t, dataDir, "daemon")
	t.Cleanup(func() { // whatever happens, do not leak the daemon
		if processAlive(pid) && looksLikePostgres(pid) {
			_ = syscall.Kill(pid, syscall.SIGQUIT)
		}
	})
	if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = helper.Wait()
	time.Sleep(200 * time.Millisecond)
	if !portOpen(port) || !processAlive(pid) {
		t.Fatal("daemon died with the process that started it")
	}
	s := start(t, Config{DataDir: dataDir})
	if s.Port() != port || s.pid != pid {
		t.Fatalf("Start did not adopt the running daemon: port %d/%d pid %d/%d", s.Port(), port, s.pid, pid)
	}
	exec1(t, s.URL(), "SELECT 1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if processAlive(pid) {
		t.Fatal("daemon still running after Stop")
	}
}

func TestChildCrashRestartKeepsData(t *testing.T) {
	s := start(t, Config{DataDir: filepath.Join(testDir(t), "data"), Mode: Child, Settings: map[string]string{"fsync": "off"}})
	exec1(t, s.URL(), "CREATE TABLE survivor (v text); INSERT INTO survivor VALUES ('x')")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	port, pid := s.Port(), s.pid
	if err := s.StopImmediate(ctx); err != nil {
		t.Fatalf("StopImmediate: %v", err)
	}
	if processAlive(pid) || portOpen(port) {
		t.Fatal("server still up after StopImmediate")
	}
	began := time.Now()
	if err := s.Restart(ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	t.Logf("restart with crash recovery took %s", time.Since(began).Round(time.Millisecond))
	if s.Port() != port {
		t.Fatalf("Restart changed the port %d -> %d", port, s.Port())
	}
	if n := countRows(t, s.URL(), "survivor"); n != 1 {
		t.Fatalf("survivor has %d rows after crash+restart", n)
	}
	if !strings.Contains(readLogSince(s.LogPath(), 0), "database system was interrupted") {
		t.Errorf("server log does not show crash recovery")
	}
	// Restart of a running server: stop + start on the same port.
	if err := s.Restart(ctx); err != nil {
		t.Fatalf("Restart (running): %v", err)
	}
	if s.Port() != port || countRows(t, s.URL(), "survivor") != 1 {
		t.Fatal("second Restart lost the port or the data")
	}
}

// startHelper runs this test binary as a process that starts a server in
// dataDir (mode "daemon" or "child"), and returns it with the server's
// port and postmaster pid.
func startHelper(t *testing.T, dataDir, mode string) (helper *exec.Cmd, port, pid int) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	helper = exec.Command(self, "-test.run=^$")
	helper.Env = append(os.Environ(), helperEnv+"="+dataDir, helperModeEnv+"="+mode)
	helper.Stderr = os.Stderr
	stdout, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = helper.Process.Kill(); _ = helper.Wait() })

	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
	}()
	select {
	case l, ok := <-line:
		if !ok {
			t.Fatal("helper exited without printing its port")
		}
		if _, err := fmt.Sscanf(l, "PORT=%d PID=%d", &port, &pid); err != nil {
			t.Fatalf("helper said %q: %v", l, err)
		}
	case <-time.After(45 * time.Second):
		t.Fatal("helper did not report a port")
	}
	return helper, port, pid
}

func TestChildDiesWithProcess(t *testing.T) {
	helper, port, pid := startHelper(t, filepath.Join(testDir(t), "data"), "child")
	if !portOpen(port) {
		t.Fatalf("helper's server on port %d does not accept connections", port)
	}
	if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = helper.Wait()
	took := waitPortClosed(t, port, 10*time.Second)
	for began := time.Now(); processAlive(pid); time.Sleep(20 * time.Millisecond) {
		if time.Since(began) > 10*time.Second {
			t.Fatalf("postmaster pid %d survived its parent", pid)
		}
	}
	t.Logf("port %d closed %s after kill -9 of the parent", port, took.Round(time.Millisecond))
}

func TestTemplateCache(t *testing.T) {
	cache := testDir(t)
	t.Setenv("XDG_CACHE_HOME", cache)
	root := testDir(t)
	var logs []string
	logf := func(format string, args ...any) {
		logs = append(logs, fmt.Sprintf(format, args...))
		t.Logf(format, args...)
	}
	began := time.Now()
	s1 := start(t, Config{DataDir: filepath.Join(root, "a"), Mode: Child, Logf: logf})
	cold := time.Since(began)
	if !strings.Contains(strings.Join(logs, "\n"), "(initdb)") {
		t.Fatalf("first start did not run initdb: %q", logs)
	}
	if _, err := os.Stat(filepath.Join(cache, "strata-pg-template-"+s1.bin.major, "stamp")); err != nil {
		t.Fatalf("template cache not written: %v", err)
	}
	logs = nil
	began = time.Now()
	s2 := start(t, Config{DataDir: filepath.Join(root, "b"), Mode: Child, Logf: logf})
	warm := time.Since(began)
	if !strings.Contains(strings.Join(logs, "\n"), "from the template cache") {
		t.Fatalf("second start did not use the template cache: %q", logs)
	}
	if s1.Port() == s2.Port() {
		t.Fatal("two servers on one port")
	}
	exec1(t, s2.URL(), "SELECT 1")
	t.Logf("cold start (initdb) %s, template-copy start %s", cold.Round(time.Millisecond), warm.Round(time.Millisecond))
}

func TestStartErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	t.Run("binaries not found", func(t *testing.T) {
		t.Setenv("STRATA_PG_BIN", "/nonexistent/pg/bin")
		_, err := Start(ctx, Config{DataDir: filepath.Join(testDir(t), "d")})
		if err == nil || !strings.Contains(err.Error(), "PostgreSQL server binaries not found") || !strings.Contains(err.Error(), "STRATA_PG_BIN") {
			t.Fatalf("got %v", err)
		}
		t.Logf("error, as expected: %v", err)
	})
	t.Run("not a cluster", func(t *testing.T) {
		dir := testDir(t)
		if err := os.WriteFile(filepath.Join(dir, "junk"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Start(ctx, Config{DataDir: dir})
		if err == nil || !strings.Contains(err.Error(), "not empty") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("untraversable parent", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Log("only meaningful as root; running anyway")
		}
		private := filepath.Join(testDir(t), "private")
		if err := os.Mkdir(private, 0o700); err != nil {
			t.Fatal(err)
		}
		s, err := Start(ctx, Config{DataDir: filepath.Join(private, "x", "data"), Mode: Child})
		if os.Geteuid() != 0 {
			if err != nil {
				t.Fatalf("non-root Start failed: %v", err)
			}
			_ = s.StopImmediate(ctx)
			return
		}
		if err == nil || !strings.Contains(err.Error(), private+" (mode") || !strings.Contains(err.Error(), "chmod o+x") {
			t.Fatalf("got %v", err)
		}
		t.Logf("error, as expected: %v", err)
		// Reachable tells a caller the same before it starts anything.
		if rerr := Reachable(filepath.Join(private, "x", "data")); rerr == nil || rerr.Error() != err.Error() {
			t.Fatalf("Reachable = %v, Start said %v", rerr, err)
		}
		if rerr := Reachable(filepath.Join(testDir(t), "x", "data")); rerr != nil {
			t.Fatalf("Reachable of a traversable directory: %v", rerr)
		}
	})
	t.Run("port setting", func(t *testing.T) {
		_, err := Start(ctx, Config{DataDir: testDir(t), Settings: map[string]string{"port": "1"}})
		if err == nil {
			t.Fatal("no error")
		}
	})
	t.Run("ctx cancelled", func(t *testing.T) {
		cctx, ccancel := context.WithCancel(ctx)
		ccancel()
		_, err := Start(cctx, Config{DataDir: filepath.Join(testDir(t), "d"), Mode: Child})
		if !errors.Is(err, context.Canceled) && (err == nil || !strings.Contains(err.Error(), "context canceled")) {
			t.Fatalf("got %v", err)
		}
	})
}
