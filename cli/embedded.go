package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/internal/pgembed"
)

// relocatedRoots are where the embedded cluster goes, in order of
// preference, when strata runs as root and the postgres OS user (which
// PostgreSQL runs as, since it refuses root) cannot reach STRATA_DATA_DIR:
// `git clone ... ~/strata && make run` as root puts the data under /root,
// mode 0700. /var/lib survives reboots; the temporary directory is the
// fallback for a read-only /var.
var relocatedRoots = []string{"/var/lib/strata", filepath.Join(os.TempDir(), "strata-pg")}

// embeddedDir is where the embedded cluster of a data directory lives.
type embeddedDir struct {
	path string // the cluster's data directory
	// moved says why path is not dataDir/pg ("" when it is): the reason
	// the postgres OS user cannot reach the data directory.
	moved string
}

// embeddedDataDir chooses the cluster directory for dataDir (absolute):
// dataDir/pg when PostgreSQL can use it, else a directory under one of
// relocatedRoots named after dataDir's absolute path, so that the same
// checkout finds its data again on every run. The JWT secret stays in
// dataDir (root reads it). A cluster that already exists wins: one in
// dataDir/pg, then a relocated one (so that a later `chmod o+x /root` does
// not silently start an empty database).
func embeddedDataDir(dataDir string) (embeddedDir, error) {
	local := filepath.Join(dataDir, "pg")
	if os.Geteuid() != 0 || hasCluster(local) {
		return embeddedDir{path: local}, nil
	}
	for _, dir := range relocatedDirs(dataDir) {
		if hasCluster(dir) {
			return embeddedDir{path: dir, moved: "an earlier run put it there"}, nil
		}
	}
	why := pgembed.Reachable(local)
	if why == nil {
		return embeddedDir{path: local}, nil
	}
	var refused []string
	for _, root := range relocatedRoots {
		dir := filepath.Join(root, relocatedName(dataDir))
		if err := trustedRoot(root); err != nil {
			refused = append(refused, err.Error())
			continue
		}
		if err := pgembed.Reachable(dir); err != nil {
			refused = append(refused, err.Error())
			continue
		}
		return embeddedDir{path: dir, moved: why.Error()}, nil
	}
	return embeddedDir{}, fmt.Errorf("%w; and no place the postgres OS user can reach was usable (%s): set STRATA_DATA_DIR to a directory it can reach, or DATABASE_URL",
		why, strings.Join(refused, "; "))
}

// relocatedName is the cluster's directory name under a relocated root: the
// checkout's name for people and a hash of the data directory's absolute
// path for uniqueness, e.g. strata-1f0c5e6a9b2d4c83 for /root/strata/.strata.
func relocatedName(dataDir string) string {
	sum := sha256.Sum256([]byte(dataDir))
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, filepath.Base(filepath.Dir(dataDir)))
	if len(name) > 32 {
		name = name[:32]
	}
	return name + "-" + hex.EncodeToString(sum[:8])
}

func relocatedDirs(dataDir string) []string {
	dirs := make([]string, len(relocatedRoots))
	for i, root := range relocatedRoots {
		dirs[i] = filepath.Join(root, relocatedName(dataDir))
	}
	return dirs
}

func hasCluster(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "PG_VERSION"))
	return err == nil
}

// trustedRoot creates root (mode 0755) if needed and accepts it only if it
// is a real directory owned by this process's user that nobody else may
// write to: a root under the shared temporary directory could otherwise be
// planted by another user, and what is in a cluster directory gets run.
func trustedRoot(root string) error {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	fi, err := os.Lstat(root)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s must be a directory owned by uid %d and writable by nobody else (it is %s)", root, os.Geteuid(), fi.Mode())
	}
	if fi.Mode().Perm()&0o005 != 0o005 {
		// The postgres user must be able to traverse it; a restrictive
		// umask may have created it 0700.
		if err := os.Chmod(root, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// cmdDB is `strata db reset`: what `make db/reset` runs. It stops the
// embedded PostgreSQL of STRATA_DATA_DIR and deletes its cluster, wherever
// embeddedDataDir put it, the development JWT secret and the data directory
// if nothing else is left in it. DATABASE_URL's database is never touched.
func cmdDB(ctx context.Context, args []string, e env, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("db", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() != 1 || fs.Arg(0) != "reset" {
		fmt.Fprintln(stderr, "usage: strata db reset   stop the embedded PostgreSQL and delete its data and the development JWT secret")
		return exitUsage
	}
	dataDir, err := e.dataDir()
	if err != nil {
		fmt.Fprintln(stderr, "strata db reset:", err)
		return exitFailure
	}
	if err := resetEmbedded(ctx, dataDir, stdout); err != nil {
		fmt.Fprintln(stderr, "strata db reset:", err)
		return exitFailure
	}
	return exitOK
}

func resetEmbedded(ctx context.Context, dataDir string, stdout io.Writer) error {
	clusters := []string{filepath.Join(dataDir, "pg")}
	if os.Geteuid() == 0 {
		clusters = append(clusters, relocatedDirs(dataDir)...)
	}
	for _, dir := range clusters {
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, "postmaster.pid")); err == nil {
			sctx, cancel := context.WithTimeout(ctx, time.Minute)
			err := pgembed.StopDaemon(sctx, pgembed.Config{DataDir: dir})
			cancel()
			if err != nil {
				return fmt.Errorf("stop the embedded PostgreSQL on %s: %w", dir, err)
			}
			fmt.Fprintf(stdout, "stopped the embedded PostgreSQL on %s\n", dir)
		}
		for _, d := range []string{dir, dir + ".pgembed-init"} {
			if err := os.RemoveAll(d); err != nil {
				return err
			}
		}
		fmt.Fprintf(stdout, "deleted %s\n", dir)
	}
	secret := filepath.Join(dataDir, auth.SecretFile)
	if err := os.Remove(secret); err == nil {
		fmt.Fprintf(stdout, "deleted %s\n", secret)
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	// Only an empty data directory goes: STRATA_DATA_DIR may name a
	// directory that holds more than strata's files.
	if err := os.Remove(dataDir); err == nil {
		fmt.Fprintf(stdout, "deleted %s\n", dataDir)
	} else if entries, rerr := os.ReadDir(dataDir); rerr == nil && len(entries) > 0 {
		fmt.Fprintf(stdout, "kept %s: it holds files strata did not create\n", dataDir)
	}
	return nil
}
