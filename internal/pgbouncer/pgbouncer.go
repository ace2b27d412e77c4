// Package pgbouncer runs a private PgBouncer in front of a PostgreSQL
// server, for the tests and the bench that prove strata's command and
// query roles through a transaction-mode pooler (docs/pgbouncer.md), as
// pgembed runs PostgreSQL itself.
//
// The binary is Debian's pgbouncer package (`make deps` installs it):
// $PGBOUNCER, else pgbouncer on PATH, else /usr/sbin/pgbouncer. Start
// fails with what to install when there is none; the tests that need it
// fail with that message, they never skip.
//
// Each Server lives in a temporary directory of its own (its ini, its
// userlist, its log) and listens on a free loopback port; authentication
// is `trust` for the users it is given (they must exist in PostgreSQL,
// which the test clusters trust on loopback too). PgBouncer refuses to run
// as root: when this process is root it runs as the postgres OS user, like
// PostgreSQL under pgembed. It is started in the foreground and gets
// SIGTERM (immediate shutdown) when this process dies.
package pgbouncer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// EnvBinary names the variable that points at a pgbouncer binary.
const EnvBinary = "PGBOUNCER"

// ErrNotInstalled is returned when no pgbouncer binary is found.
var ErrNotInstalled = errors.New("pgbouncer is not installed (looked at $" + EnvBinary + ", PATH and /usr/sbin/pgbouncer): run `make deps`, which runs `apt-get install -y pgbouncer` as root, or set $" + EnvBinary)

// Config describes a PgBouncer to start.
type Config struct {
	// Host and Port of the PostgreSQL server every database is forwarded
	// to (Host defaults to 127.0.0.1).
	Host string
	Port int
	// PoolMode is transaction (the default), session or statement.
	PoolMode string
	// PoolSize is default_pool_size: server connections per user and
	// database (default 2).
	PoolSize int
	// MaxClientConn defaults to 1000.
	MaxClientConn int
	// Users may log in (auth_type = trust; PgBouncer logs in to PostgreSQL
	// as the same user, without a password). The first is also an admin
	// of the console (database "pgbouncer": SHOW POOLS, SHOW SERVERS).
	Users []string
	// Settings are extra [pgbouncer] settings (they win over the above).
	Settings map[string]string
	// Binary overrides the lookup of the pgbouncer binary.
	Binary string
}

// Server is a running PgBouncer.
type Server struct {
	cfg  Config
	dir  string
	port int
	cmd  *exec.Cmd
	done chan struct{}
	err  error // Wait's, valid after done

	stopOnce sync.Once
	stopErr  error
}

// Binary returns the pgbouncer binary to run, or ErrNotInstalled.
func Binary() (string, error) {
	if p := strings.TrimSpace(os.Getenv(EnvBinary)); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("$%s=%s: %w", EnvBinary, p, err)
		}
		return p, nil
	}
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
		return "/usr/sbin/pgbouncer", nil
	}
	return "", ErrNotInstalled
}

// Start writes the configuration and starts PgBouncer, returning once it
// accepts connections.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	bin := cfg.Binary
	if bin == "" {
		var err error
		if bin, err = Binary(); err != nil {
			return nil, err
		}
	}
	if cfg.Port == 0 {
		return nil, errors.New("pgbouncer: Config.Port (PostgreSQL's) is required")
	}
	if len(cfg.Users) == 0 {
		return nil, errors.New("pgbouncer: Config.Users is empty: nobody could log in")
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.PoolMode == "" {
		cfg.PoolMode = "transaction"
	}
	if cfg.PoolSize == 0 {
		cfg.PoolSize = 2
	}
	if cfg.MaxClientConn == 0 {
		cfg.MaxClientConn = 1000
	}
	owner, err := osOwner()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "strata-pgbouncer-")
	if err != nil {
		return nil, err
	}
	// MkdirTemp makes 0700 directories; the postgres OS user (when we are
	// root) reads the ini and writes the log here.
	if err := os.Chmod(dir, 0o777); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	s := &Server{cfg: cfg, dir: dir, port: port, done: make(chan struct{})}
	if err := s.writeFiles(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	log, err := os.OpenFile(s.LogPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o666)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	cmd := exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if owner != nil {
		cmd.SysProcAttr.Credential = owner
	}
	err = spawn(cmd)
	_ = log.Close()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("pgbouncer: start %s: %w", bin, err)
	}
	s.cmd = cmd
	go func() { s.err = cmd.Wait(); close(s.done) }()
	if err := s.waitReady(ctx); err != nil {
		_ = s.Stop()
		return nil, err
	}
	return s, nil
}

func (s *Server) writeFiles() error {
	users := make([]string, len(s.cfg.Users))
	for i, u := range s.cfg.Users {
		if strings.ContainsAny(u, "\"\n") {
			return fmt.Errorf("pgbouncer: user name %q cannot go in a userlist", u)
		}
		users[i] = `"` + u + `" ""`
	}
	if err := os.WriteFile(filepath.Join(s.dir, "userlist.txt"), []byte(strings.Join(users, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	settings := map[string]string{
		"listen_addr":        "127.0.0.1",
		"listen_port":        strconv.Itoa(s.port),
		"unix_socket_dir":    "",
		"auth_type":          "trust",
		"auth_file":          filepath.Join(s.dir, "userlist.txt"),
		"admin_users":        s.cfg.Users[0],
		"stats_users":        s.cfg.Users[0],
		"pool_mode":          s.cfg.PoolMode,
		"default_pool_size":  strconv.Itoa(s.cfg.PoolSize),
		"min_pool_size":      "0",
		"reserve_pool_size":  "0",
		"max_client_conn":    strconv.Itoa(s.cfg.MaxClientConn),
		"max_db_connections": "0",
		// pgx sends none of these on its own; PostgreSQL drivers that do
		// (JDBC's extra_float_digits) are told apart from the settings
		// strata must not send through a pooler (search_path).
		"ignore_startup_parameters": "extra_float_digits",
		"server_lifetime":           "3600",
		"server_idle_timeout":       "600",
		"log_connections":           "0",
		"log_disconnections":        "0",
		"pidfile":                   filepath.Join(s.dir, "pgbouncer.pid"),
	}
	for k, v := range s.cfg.Settings {
		settings[k] = v
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "[databases]\n* = host=%s port=%d\n\n[pgbouncer]\n", s.cfg.Host, s.cfg.Port)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s = %s\n", k, settings[k])
	}
	return os.WriteFile(filepath.Join(s.dir, "pgbouncer.ini"), []byte(b.String()), 0o644)
}

func (s *Server) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)), time.Second)
		if err == nil {
			_ = c.Close()
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("pgbouncer exited at start (%v): %s", s.err, s.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgbouncer does not listen on port %d after 15s: %s", s.port, s.logTail())
		}
	}
}

func (s *Server) logTail() string {
	raw, _ := os.ReadFile(s.LogPath())
	if len(raw) > 2000 {
		raw = raw[len(raw)-2000:]
	}
	if len(raw) == 0 {
		return "(its log is empty)"
	}
	return strings.TrimSpace(string(raw))
}

// Port is the port PgBouncer listens on (127.0.0.1).
func (s *Server) Port() int { return s.port }

// Dir is the server's directory (ini, userlist, log).
func (s *Server) Dir() string { return s.dir }

// LogPath is PgBouncer's log.
func (s *Server) LogPath() string { return filepath.Join(s.dir, "pgbouncer.log") }

// URL returns a URL that logs in through PgBouncer as user to database,
// with an explicit empty password (trust), like db.LoginURL.
func (s *Server) URL(user, database string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(user, ""), Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)), Path: "/" + database, RawQuery: "sslmode=disable"}
	return u.String()
}

// AdminURL is the URL of PgBouncer's console (database "pgbouncer") as the
// first user; it answers only the simple protocol.
func (s *Server) AdminURL() string { return s.URL(s.cfg.Users[0], "pgbouncer") }

// Stop shuts PgBouncer down (SIGINT: safe shutdown would wait for clients;
// SIGTERM closes them at once) and removes its directory.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		if s.cmd != nil && s.cmd.Process != nil {
			_ = s.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-s.done:
			case <-time.After(10 * time.Second):
				_ = s.cmd.Process.Kill()
				<-s.done
			}
		}
		s.stopErr = os.RemoveAll(s.dir)
	})
	return s.stopErr
}

// osOwner is the credential PgBouncer runs with: nil unless this process
// is root, then the postgres OS user's.
func osOwner() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: this process is root, which PgBouncer refuses, and there is no postgres OS user to run it as (%v)", err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil || uid == 0 {
		return nil, fmt.Errorf("pgbouncer: unusable postgres OS user (uid %q, gid %q)", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgbouncer: choosing a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// The parent-death signal is sent when the thread that forked the child
// exits, not the process: fork from one thread that never exits.
var (
	spawnOnce sync.Once
	spawnCh   chan spawnReq
)

type spawnReq struct {
	cmd *exec.Cmd
	res chan error
}

func spawn(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnCh = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for req := range spawnCh {
				req.res <- req.cmd.Start()
			}
		}()
	})
	req := spawnReq{cmd: cmd, res: make(chan error, 1)}
	spawnCh <- req
	return <-req.res
}

// Version is the installed PgBouncer's version ("1.18.0").
func Version() (string, error) {
	bin, err := Binary()
	if err != nil {
		return "", err
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "", err
	}
	f := strings.Fields(strings.SplitN(string(out), "\n", 2)[0])
	if len(f) < 2 {
		return "", fmt.Errorf("pgbouncer --version: %q", out)
	}
	return f[len(f)-1], nil
}
