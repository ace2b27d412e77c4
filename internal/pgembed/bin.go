package pgembed

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// binaries describes one PostgreSQL server installation.
type binaries struct {
	dir     string // absolute
	version string // e.g. "15.20"
	major   string // e.g. "15" (as written in PG_VERSION)
	full    string // `postgres --version` output
}

func (b *binaries) path(name string) string { return filepath.Join(b.dir, name) }

var (
	binCacheMu sync.Mutex
	binCache   = map[string]*binaries{}
)

var serverBinaries = []string{"initdb", "pg_ctl", "postgres"}

// findBinaries resolves the server binary directory: explicit, else
// $STRATA_PG_BIN, else `pg_config --bindir`, else the highest
// /usr/lib/postgresql/*/bin with initdb.
func findBinaries(explicit string) (*binaries, error) {
	var tried []string
	try := func(dir, source string) (*binaries, error) {
		if dir == "" {
			return nil, nil
		}
		tried = append(tried, dir+" ("+source+")")
		if !hasServerBinaries(dir) {
			return nil, nil
		}
		return loadBinaries(dir)
	}
	notFound := func() error {
		return fmt.Errorf("pgembed: PostgreSQL server binaries not found: install postgresql-15 or set STRATA_PG_BIN to the directory holding initdb, pg_ctl and postgres (looked in: %s)",
			strings.Join(tried, ", "))
	}

	if explicit != "" {
		b, err := try(explicit, "Config.BinDir")
		if b == nil && err == nil {
			err = notFound()
		}
		return b, err
	}
	if env := os.Getenv("STRATA_PG_BIN"); env != "" {
		// An explicit environment setting must not be silently ignored.
		b, err := try(env, "$STRATA_PG_BIN")
		if b == nil && err == nil {
			err = notFound()
		}
		return b, err
	}
	if pgConfig, err := exec.LookPath("pg_config"); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := exec.CommandContext(ctx, pgConfig, "--bindir").Output()
		cancel()
		if err == nil {
			// On Debian, pg_config may come from libpq-dev and point at a
			// directory without server binaries: then keep looking.
			if b, err := try(strings.TrimSpace(string(out)), "pg_config --bindir"); b != nil || err != nil {
				return b, err
			}
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { // highest version first
		return versionOf(dirs[i]) > versionOf(dirs[j])
	})
	for _, d := range dirs {
		if b, err := try(d, "/usr/lib/postgresql"); b != nil || err != nil {
			return b, err
		}
	}
	return nil, notFound()
}

func versionOf(binDir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	return v
}

func hasServerBinaries(dir string) bool {
	for _, name := range serverBinaries {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

var versionRE = regexp.MustCompile(`\(PostgreSQL\) (\d+)(?:\.(\d+))?`)

func loadBinaries(dir string) (*binaries, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("pgembed: %w", err)
	}
	binCacheMu.Lock()
	defer binCacheMu.Unlock()
	if b, ok := binCache[abs]; ok {
		return b, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(abs, "postgres"), "--version").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("pgembed: running %s --version: %v: %s", filepath.Join(abs, "postgres"), err, strings.TrimSpace(string(out)))
	}
	m := versionRE.FindStringSubmatch(string(out))
	if m == nil {
		return nil, fmt.Errorf("pgembed: cannot parse PostgreSQL version from %q", strings.TrimSpace(string(out)))
	}
	major, _ := strconv.Atoi(m[1])
	if major < 13 {
		return nil, fmt.Errorf("pgembed: PostgreSQL %s in %s is too old: version 13 or later is required", m[1], abs)
	}
	b := &binaries{dir: abs, major: m[1], version: m[1], full: strings.TrimSpace(string(out))}
	if m[2] != "" {
		b.version += "." + m[2]
	}
	binCache[abs] = b
	return b, nil
}
