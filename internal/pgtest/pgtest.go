// Package pgtest gives tests a real PostgreSQL: never a mock, never a skip.
//
// By default each test binary starts one private cluster (pgembed Child mode:
// it dies with the test binary) in a temporary directory
// os.TempDir()/strata-pgtest-*, with durability switched off for speed. When
// $TEST_DATABASE_URL is set (a superuser URL), that server is used instead.
// If PostgreSQL cannot be started or reached the test fails with the reason.
//
// Use Main from TestMain so that the cluster is stopped and its directory
// removed when the tests end; directories left behind by killed runs are
// swept by the next run (their owner pid is recorded in a file inside).
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		url := pgtest.NewDatabase(t, pgtest.WithTemplate("tpl_schema_v3", migrate))
//		...
//	}
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/strata-es/strata/internal/pgembed"
)

// EnvURL names the environment variable holding a superuser URL to an
// existing PostgreSQL server to use instead of a private cluster.
const EnvURL = "TEST_DATABASE_URL"

// dirPrefix is the prefix of the temporary directories holding clusters.
const dirPrefix = "strata-pgtest-"

// ownerFile inside a cluster directory holds the pid of the test binary.
const ownerFile = "owner.pid"

// sharedSettings trade durability for speed: the shared test cluster is
// disposable. With synchronous_commit=off a commit is acknowledged before its
// WAL is written, so a crash (StopImmediate) may lose the last ~200 ms of
// acknowledged commits.
var sharedSettings = map[string]string{
	"fsync":              "off",
	"synchronous_commit": "off",
	"full_page_writes":   "off",
	"max_connections":    "300",
}

// privateSettings are for clusters that tests crash and restart: fsync=off
// and full_page_writes=off only matter when the OS crashes, so a
// StopImmediate still loses nothing that was acknowledged.
var privateSettings = map[string]string{
	"fsync":              "off",
	"synchronous_commit": "on",
	"full_page_writes":   "off",
	"max_connections":    "300",
}

var cluster struct {
	mu   sync.Mutex
	done bool
	url  string
	srv  *pgembed.Server
	dir  string
	err  error
}

// AdminURL returns a superuser URL to the cluster this test binary uses:
// $TEST_DATABASE_URL if set, otherwise a private cluster started once per
// test binary. If PostgreSQL cannot be started the test fails.
func AdminURL(t testing.TB) string {
	t.Helper()
	u, err := adminURL(t)
	if err != nil {
		t.Fatalf("pgtest: no PostgreSQL for tests: %v", err)
	}
	return u
}

func adminURL(t testing.TB) (string, error) {
	cluster.mu.Lock()
	defer cluster.mu.Unlock()
	if cluster.done {
		return cluster.url, cluster.err
	}
	cluster.done = true
	began := time.Now()
	if env := os.Getenv(EnvURL); env != "" {
		version, err := serverVersion(env)
		if err != nil {
			cluster.err = fmt.Errorf("$%s is set but unusable: %w", EnvURL, err)
			return "", cluster.err
		}
		cluster.url = env
		t.Logf("pgtest: using PostgreSQL %s from $%s (%s)", version, EnvURL, redact(env))
		return cluster.url, nil
	}
	srv, dir, err := startCluster(sharedSettings, "")
	if err != nil {
		cluster.err = err
		return "", err
	}
	cluster.srv, cluster.dir, cluster.url = srv, dir, srv.URL()
	version, _ := serverVersion(cluster.url)
	t.Logf("pgtest: using a private PostgreSQL %s on 127.0.0.1:%d (data %s, log %s), started in %s; set $%s to use another server",
		version, srv.Port(), srv.DataDir(), srv.LogPath(), time.Since(began).Round(time.Millisecond), EnvURL)
	return cluster.url, nil
}

// Server returns the cluster started by this test binary, for tests that
// stop or restart PostgreSQL; nil when $TEST_DATABASE_URL is used. Stopping
// it affects every test of the binary, and it runs with
// synchronous_commit=off (a crash loses recent acknowledged commits): prefer
// StartPrivate.
func Server(t testing.TB) *pgembed.Server {
	t.Helper()
	AdminURL(t)
	cluster.mu.Lock()
	defer cluster.mu.Unlock()
	return cluster.srv
}

// StartPrivate starts a dedicated cluster (Child mode) for tests that stop,
// crash or restart PostgreSQL. Its settings are fsync=off,
// full_page_writes=off, max_connections=300 and synchronous_commit=on (so
// StopImmediate loses no acknowledged commit), overridden by settings. It is stopped
// and its directory removed in t.Cleanup. It needs local PostgreSQL binaries
// even when $TEST_DATABASE_URL is set.
func StartPrivate(t testing.TB, settings map[string]string) *pgembed.Server {
	t.Helper()
	began := time.Now()
	merged := make(map[string]string, len(privateSettings)+len(settings))
	for k, v := range privateSettings {
		merged[k] = v
	}
	for k, v := range settings {
		merged[k] = v
	}
	srv, dir, err := startCluster(merged, "")
	if err != nil {
		t.Fatalf("pgtest: starting a private PostgreSQL: %v", err)
	}
	t.Logf("pgtest: private PostgreSQL on 127.0.0.1:%d (data %s) started in %s", srv.Port(), srv.DataDir(), time.Since(began).Round(time.Millisecond))
	t.Cleanup(func() {
		if err := stopCluster(srv, dir); err != nil {
			t.Errorf("pgtest: stopping the private PostgreSQL: %v", err)
		}
	})
	return srv
}

// StartReplica starts a streaming replica of primary (a cluster of this
// machine, such as StartPrivate's) in Child mode: pg_basebackup copies it
// and the copy starts as a hot standby following it over streaming
// replication. Its settings are StartPrivate's, overridden by settings. It
// is stopped and its directory removed in t.Cleanup, before primary (a
// cleanup registered later runs first).
func StartReplica(t testing.TB, primary *pgembed.Server, settings map[string]string) *pgembed.Server {
	t.Helper()
	began := time.Now()
	merged := make(map[string]string, len(privateSettings)+len(settings))
	for k, v := range privateSettings {
		merged[k] = v
	}
	for k, v := range settings {
		merged[k] = v
	}
	srv, dir, err := startCluster(merged, fmt.Sprintf("host=127.0.0.1 port=%d user=postgres application_name=pgtest_replica", primary.Port()))
	if err != nil {
		t.Fatalf("pgtest: starting a replica of 127.0.0.1:%d: %v", primary.Port(), err)
	}
	t.Logf("pgtest: replica of 127.0.0.1:%d on 127.0.0.1:%d (data %s) started in %s", primary.Port(), srv.Port(), srv.DataDir(), time.Since(began).Round(time.Millisecond))
	t.Cleanup(func() {
		if err := stopCluster(srv, dir); err != nil {
			t.Errorf("pgtest: stopping the replica: %v", err)
		}
	})
	return srv
}

// Main runs the tests, stops the cluster started by this binary, removes its
// directory and exits with the tests' status. Call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	cluster.mu.Lock()
	srv, dir := cluster.srv, cluster.dir
	cluster.srv, cluster.dir = nil, ""
	cluster.mu.Unlock()
	if srv != nil {
		if err := stopCluster(srv, dir); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: stopping PostgreSQL: %v\n", err)
		}
	}
	os.Exit(code)
}

var sweepOnce sync.Once

// startCluster starts a Child-mode cluster in a new temporary directory.
// standbyOf, when not empty, makes it a streaming replica of that server
// (pgembed.Config.StandbyOf).
func startCluster(settings map[string]string, standbyOf string) (*pgembed.Server, string, error) {
	sweepOnce.Do(sweepStale)
	dir, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		return nil, "", err
	}
	// MkdirTemp makes 0700 directories; the postgres OS user (used when we
	// are root) must be able to traverse it.
	if err := os.Chmod(dir, 0o755); err != nil {
		_ = os.RemoveAll(dir)
		return nil, "", err
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		_ = os.RemoveAll(dir)
		return nil, "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	srv, err := pgembed.Start(ctx, pgembed.Config{
		DataDir:   filepath.Join(dir, "data"),
		Mode:      pgembed.Child,
		Settings:  settings,
		StandbyOf: standbyOf,
	})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, "", err
	}
	return srv, dir, nil
}

func stopCluster(srv *pgembed.Server, dir string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := srv.Stop(ctx)
	if err != nil {
		err = errors.Join(err, srv.StopImmediate(ctx))
	}
	if dir != "" {
		if rerr := os.RemoveAll(dir); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	return err
}

// sweepStale removes cluster directories left by test binaries that died
// without cleaning up (their recorded owner pid is gone).
func sweepStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, dir := range dirs {
		fi, err := os.Lstat(dir)
		if err != nil || !fi.IsDir() {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			// Owner file not written yet, or never: only remove old ones.
			if errors.Is(err, os.ErrNotExist) && time.Since(fi.ModTime()) > time.Hour {
				_ = os.RemoveAll(dir)
			}
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(dir)
		}
	}
}

// Option configures NewDatabase.
type Option func(*options)

type options struct {
	template *template
}

type template struct {
	name  string
	setup func(ctx context.Context, adminURL string) error
}

// WithTemplate makes NewDatabase clone the new database from the template
// database name, which is built once per cluster by calling setup with a
// superuser URL to it. Builds are serialised with an advisory lock, across
// goroutines and test binaries, and a template is marked complete only once
// setup has succeeded (a half-built one is rebuilt). setup must close all its
// connections before returning. Change name whenever setup changes (e.g.
// include a schema version): a completed template is reused as long as the
// cluster lives, which is forever with $TEST_DATABASE_URL.
func WithTemplate(name string, setup func(ctx context.Context, adminURL string) error) Option {
	return func(o *options) { o.template = &template{name: name, setup: setup} }
}

// NewDatabase creates a fresh, uniquely named database (t_<test name>_<random>)
// on the test cluster and returns a superuser URL to it. The database is
// dropped (WITH (FORCE)) in t.Cleanup, best effort.
func NewDatabase(t testing.TB, opts ...Option) string {
	t.Helper()
	admin := AdminURL(t)
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	source := ""
	if o.template != nil {
		if err := ensureTemplate(ctx, admin, o.template); err != nil {
			t.Fatalf("pgtest: template database %q: %v", o.template.name, err)
		}
		source = o.template.name
	}
	name := databaseName(t.Name())
	if err := createDatabase(ctx, admin, name, source); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := execAdmin(ctx, admin, "DROP DATABASE IF EXISTS "+ident(name)+" WITH (FORCE)"); err != nil {
			t.Logf("pgtest: dropping database %s: %v", name, err)
		}
	})
	return urlForDatabase(admin, name)
}

// createDatabase creates name, cloned from source when not empty, retrying
// while the source is briefly in use (SQLSTATE 55006).
func createDatabase(ctx context.Context, admin, name, source string) error {
	sql := "CREATE DATABASE " + ident(name)
	if source != "" {
		sql += " TEMPLATE " + ident(source)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := execAdmin(ctx, admin, sql)
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" || time.Now().After(deadline) {
			if err != nil && source != "" && pgErr != nil && pgErr.Code == "55006" {
				return fmt.Errorf("%s: %w (template setup must close its connections before returning)", sql, err)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", sql, err)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", sql, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// templateComplete is the database comment marking a finished template.
const templateComplete = "strata pgtest template: complete"

var templates struct {
	mu    sync.Mutex
	built map[string]bool        // adminURL \x00 name
	locks map[string]*sync.Mutex // per key, to serialise goroutines cheaply
}

func ensureTemplate(ctx context.Context, admin string, tpl *template) error {
	if len(tpl.name) == 0 || len(tpl.name) > 63 {
		return fmt.Errorf("template name must be 1 to 63 bytes long")
	}
	key := admin + "\x00" + tpl.name
	templates.mu.Lock()
	if templates.built[key] {
		templates.mu.Unlock()
		return nil
	}
	if templates.locks == nil {
		templates.locks = map[string]*sync.Mutex{}
		templates.built = map[string]bool{}
	}
	l := templates.locks[key]
	if l == nil {
		l = &sync.Mutex{}
		templates.locks[key] = l
	}
	templates.mu.Unlock()

	l.Lock()
	defer l.Unlock()
	templates.mu.Lock()
	done := templates.built[key]
	templates.mu.Unlock()
	if done {
		return nil
	}
	if err := buildTemplate(ctx, admin, tpl); err != nil {
		return err
	}
	templates.mu.Lock()
	templates.built[key] = true
	templates.mu.Unlock()
	return nil
}

// buildTemplate creates the template unless a complete one exists, holding
// a session advisory lock on the admin database (other test binaries
// sharing the server wait on it; it is released if we die).
func buildTemplate(ctx context.Context, admin string, tpl *template) error {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	h := fnv.New64a()
	_, _ = h.Write([]byte("strata-pgtest-template\x00" + tpl.name))
	lockKey := int64(h.Sum64())
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", lockKey); err != nil {
		return fmt.Errorf("taking the template lock: %w", err)
	}
	defer func() { _, _ = conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", lockKey) }()

	var comment *string
	err = conn.QueryRow(ctx, "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = $1", tpl.name).Scan(&comment)
	switch {
	case err == nil && comment != nil && *comment == templateComplete:
		return nil // built by someone else
	case err == nil:
		// Left half-built by a run that crashed or failed: rebuild it.
		if _, err := conn.Exec(ctx, "DROP DATABASE "+ident(tpl.name)+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("dropping the incomplete template: %w", err)
		}
	case !errors.Is(err, pgx.ErrNoRows):
		return err
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident(tpl.name)); err != nil {
		return err
	}
	if err := tpl.setup(ctx, urlForDatabase(admin, tpl.name)); err != nil {
		_, _ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+ident(tpl.name)+" WITH (FORCE)")
		return fmt.Errorf("setup: %w", err)
	}
	if _, err := conn.Exec(ctx, "COMMENT ON DATABASE "+ident(tpl.name)+" IS '"+templateComplete+"'"); err != nil {
		return fmt.Errorf("marking the template complete: %w", err)
	}
	return nil
}

func execAdmin(ctx context.Context, admin, sql string) error {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

func serverVersion(u string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	var v string
	err = conn.QueryRow(ctx, "SHOW server_version").Scan(&v)
	return v, err
}

// databaseName returns t_<sanitised test name prefix>_<random>, at most 53
// bytes (PostgreSQL's limit is 63).
func databaseName(testName string) string {
	var b strings.Builder
	lastUnderscore := true
	for _, r := range strings.ToLower(testName) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			lastUnderscore = false
		} else if !lastUnderscore {
			b.WriteByte('_')
			lastUnderscore = true
		}
		if b.Len() >= 40 {
			break
		}
	}
	prefix := strings.TrimRight(b.String(), "_")
	var rnd [5]byte
	_, _ = rand.Read(rnd[:])
	if prefix == "" {
		return "t_" + hex.EncodeToString(rnd[:])
	}
	return "t_" + prefix + "_" + hex.EncodeToString(rnd[:])
}

// urlForDatabase returns admin with its database replaced by name. admin
// may be a URL or a keyword/value connection string.
func urlForDatabase(admin, name string) string {
	if strings.HasPrefix(admin, "postgres://") || strings.HasPrefix(admin, "postgresql://") {
		if u, err := url.Parse(admin); err == nil {
			u.Path, u.RawPath = "/"+name, ""
			return u.String()
		}
	}
	return admin + " dbname='" + strings.ReplaceAll(name, "'", `\'`) + "'"
}

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

// redact hides a password in a URL for logging.
func redact(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
		return u.String()
	}
	return s
}
