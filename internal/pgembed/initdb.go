package pgembed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// initCluster fills the empty directory dir (owned by the server's OS user)
// with a new cluster: a copy of the template cache when it is valid, else
// initdb (whose result then refreshes the cache).
func (s *Server) initCluster(ctx context.Context, dir string) error {
	tc := s.templateCache()
	if tc != nil {
		unlock, err := tc.lock(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("pgembed: waiting for the template cache lock: %w", ctx.Err())
			}
			s.cfg.Logf("pgembed: not using the template cache: %v", err)
			tc = nil
		} else {
			defer unlock()
		}
	}
	if tc != nil && tc.valid() {
		began := time.Now()
		err := copyTree(ctx, tc.dataDir(), dir)
		if err == nil {
			s.cfg.Logf("pgembed: created PostgreSQL %s cluster in %s from the template cache %s in %s",
				s.bin.version, s.cfg.DataDir, tc.dataDir(), time.Since(began).Round(time.Millisecond))
			return nil
		}
		s.cfg.Logf("pgembed: copying the template cache failed, running initdb instead: %v", err)
		if err := s.resetDir(dir); err != nil {
			return err
		}
	}
	began := time.Now()
	s.cfg.Logf("pgembed: initialising PostgreSQL %s cluster in %s (initdb)", s.bin.version, s.cfg.DataDir)
	if err := s.runInitdb(ctx, dir); err != nil {
		return err
	}
	s.cfg.Logf("pgembed: initdb done in %s", time.Since(began).Round(time.Millisecond))
	if tc != nil {
		if err := tc.store(ctx, dir); err != nil {
			s.cfg.Logf("pgembed: not caching the new cluster as a template: %v", err)
		}
	}
	return nil
}

// resetDir empties dir, recreating it owned by the server's OS user.
func (s *Server) resetDir(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("pgembed: %w", err)
	}
	return s.mkdirOwned(dir)
}

func (s *Server) runInitdb(ctx context.Context, dir string) error {
	locales := []string{"C.UTF-8", "C"} // C.UTF-8 is missing on some systems
	for i, locale := range locales {
		cmd := exec.CommandContext(ctx, s.bin.path("initdb"),
			"-D", dir, "-U", superuser, "-A", "trust", "-E", "UTF8", "--locale="+locale, "--no-sync")
		cmd.Env = serverEnv()
		s.owner.apply(cmd)
		cmd.WaitDelay = 5 * time.Second
		out, err := cmd.CombinedOutput()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("pgembed: initdb: %w", ctx.Err())
		}
		if i+1 < len(locales) && strings.Contains(string(out), "locale") {
			s.cfg.Logf("pgembed: initdb with locale %s failed, retrying with %s", locale, locales[i+1])
			if err := s.resetDir(dir); err != nil {
				return err
			}
			continue
		}
		return fmt.Errorf("pgembed: initdb failed: %v\n%s", err, lastLines(string(out), 20))
	}
	panic("unreachable")
}

func lastLines(text string, n int) string {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// copyTree copies the contents of src into the existing directory dst,
// preserving modes and owners (cp -a).
func copyTree(ctx context.Context, src, dst string) error {
	cmd := exec.CommandContext(ctx, "cp", "-a", src+"/.", dst)
	cmd.WaitDelay = 5 * time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("cp -a %s/. %s: %v: %s", src, dst, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// templateCache is a machine-wide copy of a freshly initdb'd cluster (never
// started), guarded by an exclusive flock on <root>/lock:
//
//	<root>/data   the cluster
//	<root>/stamp  what produced it; written last, so it marks completion
type templateCache struct {
	root  string
	stamp string
}

// templateCache returns nil when the cache is disabled or unusable.
func (s *Server) templateCache() *templateCache {
	if os.Getenv("STRATA_PG_NO_TEMPLATE_CACHE") != "" {
		return nil
	}
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" || !filepath.IsAbs(base) {
		base = os.TempDir()
	}
	root := filepath.Join(base, "strata-pg-template-"+s.bin.major)
	if err := os.MkdirAll(root, 0o755); err != nil {
		s.cfg.Logf("pgembed: not using the template cache: %v", err)
		return nil
	}
	// The cache lives in a shared place (/tmp): only trust a directory that
	// we own and nobody else can write to, since its content is run.
	fi, err := os.Lstat(root)
	if err != nil {
		s.cfg.Logf("pgembed: not using the template cache: %v", err)
		return nil
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o022 != 0 {
		s.cfg.Logf("pgembed: not using the template cache %s: it must be a directory owned by uid %d (not a symlink, not writable by others); it is %s owned by uid %d",
			root, os.Geteuid(), fi.Mode(), statUID(st))
		return nil
	}
	uid := os.Geteuid()
	if s.owner != nil {
		uid = s.owner.uid
	}
	stamp := fmt.Sprintf("pgembed template v1\nbindir=%s\nversion=%s\ncluster-owner-uid=%d\ninitdb=-U %s -A trust -E UTF8 --no-sync\n",
		s.bin.dir, s.bin.full, uid, superuser)
	return &templateCache{root: root, stamp: stamp}
}

func statUID(st *syscall.Stat_t) int {
	if st == nil {
		return -1
	}
	return int(st.Uid)
}

func (tc *templateCache) dataDir() string { return filepath.Join(tc.root, "data") }

// lock takes the exclusive cache lock, polling so that ctx is honoured.
func (tc *templateCache) lock(ctx context.Context) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(tc.root, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	giveUp := time.Now().Add(2 * time.Minute)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil // closing releases the lock
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			_ = f.Close()
			return nil, fmt.Errorf("flock %s: %w", f.Name(), err)
		}
		if time.Now().After(giveUp) {
			_ = f.Close()
			return nil, fmt.Errorf("%s is locked by another process for too long", f.Name())
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			_ = f.Close()
			return nil, err
		}
	}
}

func (tc *templateCache) valid() bool {
	raw, err := os.ReadFile(filepath.Join(tc.root, "stamp"))
	if err != nil || string(raw) != tc.stamp {
		return false
	}
	for _, f := range []string{"PG_VERSION", "global/pg_control", "postgresql.conf"} {
		if _, err := os.Stat(filepath.Join(tc.dataDir(), f)); err != nil {
			return false
		}
	}
	return true
}

// store replaces the cached cluster with a copy of dir. Call with the lock.
func (tc *templateCache) store(ctx context.Context, dir string) error {
	stampPath := filepath.Join(tc.root, "stamp")
	tmp := filepath.Join(tc.root, "data.tmp")
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return err
	}
	if err := copyTree(ctx, dir, tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	if err := os.Remove(stampPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.RemoveAll(tc.dataDir()); err != nil {
		return err
	}
	if err := os.Rename(tmp, tc.dataDir()); err != nil {
		return err
	}
	if err := os.WriteFile(stampPath+".tmp", []byte(tc.stamp), 0o644); err != nil {
		return err
	}
	return os.Rename(stampPath+".tmp", stampPath)
}

// baseBackup fills the empty directory dir with a copy of the primary
// named by Config.StandbyOf, streaming the WAL written during the copy and
// writing standby.signal and primary_conninfo, so that the cluster starts
// as a hot standby that follows the primary.
func (s *Server) baseBackup(ctx context.Context, dir string) error {
	began := time.Now()
	s.cfg.Logf("pgembed: copying the primary (%s) into %s (pg_basebackup)", s.cfg.StandbyOf, s.cfg.DataDir)
	cmd := exec.CommandContext(ctx, s.bin.path("pg_basebackup"),
		"--dbname="+s.cfg.StandbyOf, "--pgdata="+dir, "--write-recovery-conf",
		"--wal-method=stream", "--checkpoint=fast", "--no-sync")
	cmd.Env = serverEnv()
	s.owner.apply(cmd)
	cmd.WaitDelay = 5 * time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("pgembed: pg_basebackup: %w", ctx.Err())
		}
		return fmt.Errorf("pgembed: pg_basebackup failed: %v\n%s", err, lastLines(string(out), 20))
	}
	// The primary's own log came along with the copy: start the standby's
	// log afresh, so that its messages are its own.
	_ = os.Remove(filepath.Join(dir, logName))
	s.cfg.Logf("pgembed: base backup done in %s", time.Since(began).Round(time.Millisecond))
	return nil
}

// BaseBackup copies this running server into dir (absent or empty) with
// pg_basebackup, the WAL written during the copy included, for a
// point-in-time restore from it and an archive of later WAL
// (Config.RecoverFrom).
func (s *Server) BaseBackup(ctx context.Context, dir string) error {
	if err := s.mkdirAllParents(filepath.Dir(dir)); err != nil {
		return err
	}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := s.mkdirOwned(dir); err != nil {
			return err
		}
	}
	cmd := exec.CommandContext(ctx, s.bin.path("pg_basebackup"),
		fmt.Sprintf("--dbname=host=127.0.0.1 port=%d user=%s", s.Port(), superuser), "--pgdata="+dir,
		"--wal-method=stream", "--checkpoint=fast")
	cmd.Env = serverEnv()
	s.owner.apply(cmd)
	cmd.WaitDelay = 5 * time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pgembed: pg_basebackup: %v\n%s", err, lastLines(string(out), 20))
	}
	return nil
}

// recoveryCopy fills dir with a copy of the base backup Config.RecoverFrom
// and the recovery.signal that starts it in targeted recovery.
func (s *Server) recoveryCopy(ctx context.Context, dir string) error {
	if _, err := os.Stat(filepath.Join(s.cfg.RecoverFrom, "PG_VERSION")); err != nil {
		return fmt.Errorf("pgembed: %s is not a base backup (no PG_VERSION): %w", s.cfg.RecoverFrom, err)
	}
	began := time.Now()
	if err := copyTree(ctx, s.cfg.RecoverFrom, dir); err != nil {
		return fmt.Errorf("pgembed: copying the base backup: %w", err)
	}
	_ = os.Remove(filepath.Join(dir, logName))
	signal := filepath.Join(dir, "recovery.signal")
	if err := os.WriteFile(signal, nil, 0o600); err != nil {
		return fmt.Errorf("pgembed: %w", err)
	}
	if s.owner != nil {
		if err := os.Chown(signal, s.owner.uid, s.owner.gid); err != nil {
			return fmt.Errorf("pgembed: %w", err)
		}
	}
	s.cfg.Logf("pgembed: copied the base backup %s in %s; starting in recovery", s.cfg.RecoverFrom, time.Since(began).Round(time.Millisecond))
	return nil
}
