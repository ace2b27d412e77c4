package pgembed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// reuseRunning adopts a server already running on DataDir (Daemon mode).
// It returns false when there is none: no postmaster.pid, or a stale one
// whose pid is dead (pg_ctl start copes with that).
func (s *Server) reuseRunning(ctx context.Context) (bool, error) {
	pf, err := readPidFile(s.cfg.DataDir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		// Half-written pid file: the postmaster is creating it right now,
		// or it is garbage; let pg_ctl decide.
		return false, nil
	}
	if !processAlive(pf.pid) || !looksLikePostgres(pf.pid) {
		s.cfg.Logf("pgembed: ignoring stale postmaster.pid in %s (pid %d is not running)", s.cfg.DataDir, pf.pid)
		return false, nil
	}
	timeout := timeoutFor(ctx, daemonReadyTimeout)
	if pf.status == "stopping" {
		// Shutting down: wait for it to finish, then start afresh.
		s.cfg.Logf("pgembed: PostgreSQL on %s is shutting down, waiting", s.cfg.DataDir)
		wctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		if err := waitGone(wctx, pf.pid); err != nil {
			return false, err
		}
		return false, nil
	}
	offset := max(fileSize(s.logPath)-8<<10, 0)
	if pf.port == 0 {
		// postmaster.pid is written in stages; wait for the port line.
		deadline := time.Now().Add(timeout)
		for pf.port == 0 && time.Now().Before(deadline) {
			if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
				return false, err
			}
			if pf, err = readPidFile(s.cfg.DataDir); err != nil {
				return false, nil
			}
		}
		if pf.port == 0 {
			return false, fmt.Errorf("pgembed: PostgreSQL pid %d owns %s but did not publish its port", pf.pid, s.cfg.DataDir)
		}
	}
	if err := s.waitReady(ctx, pf.port, timeout, nil); err != nil {
		return false, s.errWithLog(fmt.Errorf("PostgreSQL already running on %s (pid %d, port %d) does not accept connections: %w", s.cfg.DataDir, pf.pid, pf.port, err), offset)
	}
	if err := s.checkDataDirectory(ctx, pf.port); err != nil {
		return false, err
	}
	s.port.Store(int32(pf.port))
	s.pid = pf.pid
	if s.cfg.Port != 0 && s.cfg.Port != pf.port {
		s.cfg.Logf("pgembed: note: requested port %d but the running server uses port %d", s.cfg.Port, pf.port)
	}
	s.cfg.Logf("pgembed: reusing PostgreSQL already running on port %d (pid %d, data %s, log %s)", pf.port, pf.pid, s.cfg.DataDir, s.logPath)
	return true, nil
}

// checkDataDirectory verifies that the server on port serves our DataDir
// (guards against a recycled pid/port).
func (s *Server) checkDataDirectory(ctx context.Context, port int) error {
	u := url.URL{Scheme: "postgres", User: url.User(superuser), Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Path: "/postgres", RawQuery: "sslmode=disable"}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, u.String())
	if err != nil {
		return fmt.Errorf("pgembed: connecting to the running server on port %d: %w", port, err)
	}
	defer conn.Close(context.Background())
	var dir string
	if err := conn.QueryRow(cctx, "SELECT current_setting('data_directory')").Scan(&dir); err != nil {
		return fmt.Errorf("pgembed: asking the running server on port %d for its data directory: %w", port, err)
	}
	a, err1 := os.Stat(dir)
	b, err2 := os.Stat(s.cfg.DataDir)
	if err1 != nil || err2 != nil || !os.SameFile(a, b) {
		return fmt.Errorf("pgembed: postmaster.pid in %s names port %d, but the server there uses data directory %s", s.cfg.DataDir, port, dir)
	}
	return nil
}

func (s *Server) startDaemon(ctx context.Context, port int, logOffset int64) error {
	timeout := timeoutFor(ctx, daemonReadyTimeout)
	out, err := s.pgctl(ctx, timeout, "start",
		"-D", s.cfg.DataDir,
		"-l", s.logPath,
		"-w", "-t", strconv.Itoa(int(timeout.Seconds())),
		"-o", shellJoin(s.serverArgs(port)))
	if err != nil {
		return s.errWithLog(fmt.Errorf("pg_ctl start failed: %w: %s", err, out), logOffset)
	}
	pf, err := readPidFile(s.cfg.DataDir)
	if err != nil {
		return s.errWithLog(fmt.Errorf("reading postmaster.pid after pg_ctl start: %w", err), logOffset)
	}
	s.pid = pf.pid
	if err := s.waitReady(ctx, port, timeout, nil); err != nil {
		return s.errWithLog(err, logOffset)
	}
	return nil
}

func (s *Server) stopDaemon(ctx context.Context, mode string) error {
	pf, err := readPidFile(s.cfg.DataDir)
	if errors.Is(err, os.ErrNotExist) || (err == nil && !processAlive(pf.pid)) {
		s.pid = 0
		return nil // not running
	}
	timeout := timeoutFor(ctx, stopTimeout)
	offset := fileSize(s.logPath)
	s.cfg.Logf("pgembed: stopping PostgreSQL on port %d (%s)", s.Port(), mode)
	out, err := s.pgctl(ctx, timeout, "stop", "-D", s.cfg.DataDir, "-m", mode, "-w", "-t", strconv.Itoa(int(timeout.Seconds())))
	if err != nil {
		if _, perr := readPidFile(s.cfg.DataDir); errors.Is(perr, os.ErrNotExist) {
			s.pid = 0
			return nil // stopped meanwhile
		}
		return s.errWithLog(fmt.Errorf("pg_ctl stop -m %s failed: %w: %s", mode, err, out), offset)
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := waitGone(wctx, pf.pid); err != nil {
		return err
	}
	s.pid = 0
	return nil
}

// pgctl runs pg_ctl (as the postgres OS user when we are root) in its own
// session, so that a Ctrl-C on our terminal does not reach the daemon.
func (s *Server) pgctl(ctx context.Context, timeout time.Duration, args ...string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, timeout+10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, s.bin.path("pg_ctl"), args...)
	cmd.Env = serverEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	s.owner.apply(cmd)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	// The postmaster must not keep our pipe open; pg_ctl redirects its
	// output to the log, but never hang on it.
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	return strings.TrimSpace(buf.String()), err
}

// serverEnv is our environment without libpq/PostgreSQL variables that
// could change what the PostgreSQL programs do.
func serverEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") {
			continue
		}
		env = append(env, kv)
	}
	return env
}
