// Package pgembed runs a private PostgreSQL server from the PostgreSQL server
// binaries installed on the machine (initdb, pg_ctl, postgres).
//
// It is used by `strata serve` (embedded database by default), by the test
// harness (internal/pgtest) and by the fault-injection harness.
//
// Two modes exist:
//
//   - Daemon: the server is started with `pg_ctl start` in its own session and
//     outlives this process. A later Start on the same data directory reuses
//     the running server (its port is read from postmaster.pid).
//   - Child: `postgres` runs as a child process of this one and receives
//     SIGQUIT (immediate shutdown) when this process dies, however it dies.
//
// Layout: the cluster lives in Config.DataDir; the server's output goes to
// DataDir/server.log (rotated once to server.log.1 when it exceeds 16 MiB at
// start); the unix-domain socket is created in DataDir itself (or disabled when
// that path would be too long for a socket). The server listens on 127.0.0.1
// only and trusts every local connection: the superuser is "postgres", without
// password.
//
// PostgreSQL refuses to run as root. When this process is root, initdb,
// pg_ctl and postgres are run as the OS user "postgres", the directories that
// pgembed creates are chowned to it, and every parent of the data directory
// must be traversable by it (checked up front, with a clear error; a caller
// that chooses the directory can ask Reachable first and choose another).
//
// A freshly initialised cluster is cached (initdb output only, never a cluster
// that has been started) in $XDG_CACHE_HOME/strata-pg-template-<major>, or
// os.TempDir()/strata-pg-template-<major> when XDG_CACHE_HOME is unset, so
// that later clusters are created with `cp -a` (~0.2 s) instead of initdb
// (~1.5 s). Set STRATA_PG_NO_TEMPLATE_CACHE=1 to disable the cache.
package pgembed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Mode selects how the server process relates to this process.
type Mode int

const (
	// Daemon starts the server with pg_ctl; it outlives this process and is
	// reused by a later Start on the same data directory.
	Daemon Mode = iota
	// Child runs postgres as a child process that is shut down (SIGQUIT,
	// immediate) when this process dies.
	Child
)

func (m Mode) String() string {
	switch m {
	case Daemon:
		return "daemon"
	case Child:
		return "child"
	default:
		return "Mode(" + strconv.Itoa(int(m)) + ")"
	}
}

// Config describes the server to start.
type Config struct {
	// DataDir is required. The cluster lives in DataDir; it is created with
	// initdb (or copied from the template cache) when DataDir has no PG_VERSION.
	DataDir string
	// Port is the TCP port on 127.0.0.1; 0 chooses a free port.
	Port int
	// BinDir holds the PostgreSQL server binaries. "" finds them:
	// $STRATA_PG_BIN, else `pg_config --bindir`, else the highest
	// /usr/lib/postgresql/*/bin that has initdb.
	BinDir string
	// Settings are extra server settings passed as -c key=value (they are
	// applied after pgembed's own listen_addresses, so they may override it;
	// "port" is not allowed, use Port).
	Settings map[string]string
	// Mode is Daemon (the default) or Child.
	Mode Mode
	// Logf receives progress lines; nil is silent.
	Logf func(format string, args ...any)
	// StandbyOf, when set, makes a new cluster a streaming replica of the
	// server at this libpq connection string (a superuser or replication
	// login, e.g. "host=127.0.0.1 port=5432 user=postgres") instead of an
	// initdb'd one: pg_basebackup --write-recovery-conf copies the primary
	// and records it in primary_conninfo, so the server starts as a hot
	// standby. Ignored when DataDir already holds a cluster.
	StandbyOf string
	// RecoverFrom, when set, makes a new cluster a copy of this base backup
	// (a directory written by Server.BaseBackup) started in targeted
	// recovery (recovery.signal): Settings give its restore_command and
	// recovery_target_*. Ignored when DataDir already holds a cluster.
	RecoverFrom string
}

const (
	// superuser created by initdb and used in URLs.
	superuser = "postgres"
	// logName is the server log inside the data directory.
	logName = "server.log"
	// maxLogSize triggers a one-step rotation of server.log at start.
	maxLogSize = 16 << 20
	// childReadyTimeout / daemonReadyTimeout bound startup when ctx has no
	// earlier deadline.
	childReadyTimeout  = 30 * time.Second
	daemonReadyTimeout = 60 * time.Second
	stopTimeout        = 60 * time.Second
	// maxSocketPath is sizeof(sockaddr_un.sun_path) minus the NUL byte.
	maxSocketPath = 107
)

// Server is a running (or stopped) PostgreSQL server. Its methods are safe for
// concurrent use.
type Server struct {
	cfg     Config // DataDir absolute, Settings copied
	bin     *binaries
	owner   *osOwner // nil unless this process is root
	logPath string
	sockDir string // "" = no unix socket

	port atomic.Int32 // readable without mu, which start/stop hold for long

	mu     sync.Mutex
	reused bool       // Start adopted an already running daemon
	pid    int        // postmaster pid (0 when stopped)
	child  *childProc // Child mode only
}

// Start starts (or, in Daemon mode, reuses) the server described by cfg and
// returns once it accepts connections.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	s, err := newServer(cfg)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg.Mode == Daemon {
		reused, err := s.reuseRunning(ctx)
		if err != nil {
			return nil, err
		}
		if reused {
			s.reused = true
			return s, nil
		}
	}
	if err := s.ensureCluster(ctx); err != nil {
		return nil, err
	}
	if err := s.startLocked(ctx, s.cfg.Port, s.cfg.Port != 0); err != nil {
		return nil, err
	}
	return s, nil
}

var settingKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*$`)

func newServer(cfg Config) (*Server, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("pgembed: Config.DataDir is required")
	}
	if cfg.Mode != Daemon && cfg.Mode != Child {
		return nil, fmt.Errorf("pgembed: invalid Config.Mode %d", int(cfg.Mode))
	}
	if cfg.Port < 0 || cfg.Port > 65535 {
		return nil, fmt.Errorf("pgembed: invalid Config.Port %d", cfg.Port)
	}
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("pgembed: data directory: %w", err)
	}
	cfg.DataDir = dir
	settings := make(map[string]string, len(cfg.Settings))
	for k, v := range cfg.Settings {
		if !settingKey.MatchString(k) {
			return nil, fmt.Errorf("pgembed: invalid setting name %q", k)
		}
		if strings.EqualFold(k, "port") {
			return nil, errors.New("pgembed: set the port with Config.Port, not Settings[\"port\"]")
		}
		settings[k] = v
	}
	cfg.Settings = settings
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}

	owner, err := currentOwner()
	if err != nil {
		return nil, err
	}
	bin, err := findBinaries(cfg.BinDir)
	if err != nil {
		return nil, err
	}
	if owner != nil {
		if err := owner.checkTraverse(bin.dir, "the PostgreSQL binaries in "+bin.dir); err != nil {
			return nil, err
		}
	}
	s := &Server{
		cfg:     cfg,
		bin:     bin,
		owner:   owner,
		logPath: filepath.Join(dir, logName),
	}
	s.port.Store(int32(cfg.Port))
	if len(dir)+len("/.s.PGSQL.65535.lock") <= maxSocketPath {
		s.sockDir = dir
	}
	return s, nil
}

// Reachable reports whether dir can be the data directory of a server
// started by this process: nil unless this process is root and the postgres
// OS user cannot traverse one of dir's existing parents (a checkout under
// /root, or in any directory of mode 0700), in which case the error is the
// one Start would return.
func Reachable(dir string) error {
	owner, err := currentOwner()
	if err != nil || owner == nil {
		return err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("pgembed: data directory: %w", err)
	}
	return owner.checkTraverse(filepath.Dir(abs), "the data directory "+abs)
}

// StopDaemon stops a Daemon-mode server running on cfg.DataDir (fast
// shutdown) and waits until it is gone; no server there is no error. It
// starts nothing, so it suits a reset that is about to delete the directory.
func StopDaemon(ctx context.Context, cfg Config) error {
	cfg.Mode = Daemon
	s, err := newServer(cfg)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if pf, err := readPidFile(s.cfg.DataDir); err == nil {
		s.port.Store(int32(pf.port)) // for the log line
	}
	return s.stopDaemon(ctx, "fast")
}

// URL returns a superuser URL to the "postgres" database:
// postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable.
func (s *Server) URL() string { return s.URLFor("postgres") }

// URLFor returns a superuser URL to the given database.
func (s *Server) URLFor(database string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(superuser),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port())),
		Path:     "/" + database,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Port returns the TCP port the server listens on (127.0.0.1).
func (s *Server) Port() int { return int(s.port.Load()) }

// Reused reports whether Start adopted a server that was already running
// (Daemon mode); its owner, not this process, should stop it.
func (s *Server) Reused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reused
}

// DataDir returns the absolute data directory.
func (s *Server) DataDir() string { return s.cfg.DataDir }

// LogPath returns the server log file (DataDir/server.log).
func (s *Server) LogPath() string { return s.logPath }

// Stop shuts the server down (fast shutdown: running transactions are
// aborted, a checkpoint is written) and waits until the postmaster is gone.
// Stopping a stopped server is a no-op.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked(ctx, "fast")
}

// StopImmediate stops the server like `pg_ctl stop -m immediate`: no
// checkpoint, the next start performs crash recovery. It waits until the
// postmaster is gone.
func (s *Server) StopImmediate(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked(ctx, "immediate")
}

// Restart stops the server if it is running (fast shutdown) and starts it
// again on the same data directory and the same port.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stopLocked(ctx, "fast"); err != nil {
		return err
	}
	return s.startLocked(ctx, s.Port(), true)
}

// startLocked starts the server process on port (0 = choose). When fixedPort
// is false a bind failure is retried on another free port.
func (s *Server) startLocked(ctx context.Context, port int, fixedPort bool) error {
	s.rotateLog()
	if s.owner != nil {
		// pg_ctl opens the log as the postgres user; Child mode writes it via
		// an inherited descriptor, but keep the ownership uniform.
		if f, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err == nil {
			_ = f.Close()
		}
		_ = os.Lchown(s.logPath, s.owner.uid, s.owner.gid)
	}
	const attempts = 5
	var lastErr error
	for attempt := 0; attempt < attempts; attempt++ {
		p := port
		if !fixedPort || p == 0 {
			var err error
			if p, err = freePort(); err != nil {
				return err
			}
		}
		began := time.Now()
		logOffset := fileSize(s.logPath)
		var err error
		if s.cfg.Mode == Child {
			err = s.startChild(ctx, p, logOffset)
		} else {
			err = s.startDaemon(ctx, p, logOffset)
		}
		if err == nil {
			s.port.Store(int32(p))
			s.cfg.Logf("pgembed: PostgreSQL %s started on port %d in %s (%s mode, pid %d, data %s, log %s)",
				s.bin.version, p, time.Since(began).Round(time.Millisecond), s.cfg.Mode, s.pid, s.cfg.DataDir, s.logPath)
			return nil
		}
		lastErr = err
		if ctx.Err() != nil || !bindFailed(s.logPath, logOffset) {
			return err
		}
		if fixedPort {
			s.cfg.Logf("pgembed: port %d is busy, retrying", p)
			if sleepCtx(ctx, 500*time.Millisecond) != nil {
				return err
			}
		} else {
			s.cfg.Logf("pgembed: port %d was taken meanwhile, trying another one", p)
		}
	}
	return lastErr
}

func (s *Server) stopLocked(ctx context.Context, mode string) error {
	if s.cfg.Mode == Child {
		return s.stopChild(ctx, mode)
	}
	return s.stopDaemon(ctx, mode)
}

// serverArgs are the postgres command-line options (without -D).
func (s *Server) serverArgs(port int) []string {
	args := []string{
		"-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1",
		"-k", s.sockDir,
	}
	keys := make([]string, 0, len(s.cfg.Settings))
	for k := range s.cfg.Settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "-c", k+"="+s.cfg.Settings[k])
	}
	return args
}

// waitReady polls until a connection to the server succeeds, ctx ends,
// timeout passes or exited (may be nil) is closed.
func (s *Server) waitReady(ctx context.Context, port int, timeout time.Duration, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(superuser),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Path:     "/postgres",
		RawQuery: "sslmode=disable&connect_timeout=5",
	}
	var lastErr error
	for {
		select {
		case <-exited:
			return errors.New("postgres exited during startup")
		default:
		}
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		conn, err := pgx.Connect(cctx, u.String())
		if err == nil {
			err = conn.Ping(cctx)
			_ = conn.Close(context.Background())
		}
		ccancel()
		if err == nil {
			return nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("server not ready after %s: %w (last attempt: %v)", timeout, ctx.Err(), lastErr)
		case <-exited:
			return errors.New("postgres exited during startup")
		case <-time.After(40 * time.Millisecond):
		}
	}
}

// ensureCluster makes sure DataDir holds an initialised cluster that the
// server can use.
func (s *Server) ensureCluster(ctx context.Context) error {
	dir := s.cfg.DataDir
	if s.owner != nil {
		if err := s.owner.checkTraverse(filepath.Dir(dir), "the data directory "+dir); err != nil {
			return err
		}
	}
	if raw, err := os.ReadFile(filepath.Join(dir, "PG_VERSION")); err == nil {
		ver := strings.TrimSpace(string(raw))
		if ver != s.bin.major {
			return fmt.Errorf("pgembed: %s was initialised by PostgreSQL %s but the binaries in %s are PostgreSQL %s: use matching binaries (STRATA_PG_BIN) or move the directory away to start afresh",
				dir, ver, s.bin.dir, s.bin.major)
		}
		if s.owner != nil {
			fi, err := os.Stat(dir)
			if err != nil {
				return fmt.Errorf("pgembed: %w", err)
			}
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != s.owner.uid {
				return fmt.Errorf("pgembed: %s is owned by uid %d but PostgreSQL runs as OS user %q (uid %d) because this process is root: run `chown -R %s: %s`",
					dir, st.Uid, s.owner.name, s.owner.uid, s.owner.name, dir)
			}
		}
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("pgembed: %w", err)
	}

	// No cluster yet: DataDir must be absent or empty.
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return fmt.Errorf("pgembed: %s exists, is not empty and holds no PostgreSQL cluster (no PG_VERSION): empty it or choose another data directory", dir)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("pgembed: %w", err)
	}
	if err := s.mkdirAllParents(filepath.Dir(dir)); err != nil {
		return err
	}
	// Build the cluster in a sibling staging directory and rename it into
	// place, so a run killed half-way never leaves a half-initialised DataDir.
	staging := dir + ".pgembed-init"
	if err := os.RemoveAll(staging); err != nil {
		return fmt.Errorf("pgembed: removing leftover %s: %w", staging, err)
	}
	if err := s.mkdirOwned(staging); err != nil {
		return err
	}
	initialise := s.initCluster
	switch {
	case s.cfg.StandbyOf != "":
		initialise = s.baseBackup
	case s.cfg.RecoverFrom != "":
		initialise = s.recoveryCopy
	}
	if err := initialise(ctx, staging); err != nil {
		_ = os.RemoveAll(staging)
		return err
	}
	if err := os.Rename(staging, dir); err != nil { // replaces an empty dir
		// DataDir may be a mount point (e.g. a container volume): copy.
		cerr := copyTree(ctx, staging, dir)
		_ = os.RemoveAll(staging)
		if cerr != nil {
			return fmt.Errorf("pgembed: moving the new cluster into place: %v; copying it: %w", err, cerr)
		}
	}
	return nil
}

// mkdirAllParents creates dir and missing parents, traversable by the
// postgres user when this process is root.
func (s *Server) mkdirAllParents(dir string) error {
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("pgembed: %w", err)
	}
	if s.owner != nil {
		for _, d := range missing {
			_ = os.Chmod(d, 0o755) // defeat a restrictive umask
		}
	}
	return nil
}

// mkdirOwned creates dir (mode 0700) owned by the server's OS user.
func (s *Server) mkdirOwned(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("pgembed: %w", err)
	}
	if s.owner != nil {
		if err := os.Chown(dir, s.owner.uid, s.owner.gid); err != nil {
			return fmt.Errorf("pgembed: %w", err)
		}
	}
	return nil
}

func (s *Server) rotateLog() {
	if fileSize(s.logPath) > maxLogSize {
		_ = os.Rename(s.logPath, s.logPath+".1")
	}
}

// errWithLog decorates err with the tail of the server log written since
// offset.
func (s *Server) errWithLog(err error, offset int64) error {
	tail := logTail(s.logPath, offset, 20)
	if tail == "" {
		return fmt.Errorf("pgembed: %w (server log %s is empty)", err, s.logPath)
	}
	return fmt.Errorf("pgembed: %w\n--- last lines of %s ---\n%s", err, s.logPath, tail)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgembed: choosing a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	return port, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// timeoutFor returns def, shortened to ctx's deadline.
func timeoutFor(ctx context.Context, def time.Duration) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		if d := time.Until(dl); d < def {
			return max(d, time.Second)
		}
	}
	return def
}
