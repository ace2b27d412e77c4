package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// oldAPI returns the export data file of the module at commit, and the
// import paths of its main packages, from the cache or made now. The
// cache is keyed by the commit, the Go version (export data is the
// compiler's format) and the apidiff binary, so a stale file is never read.
func oldAPI(ctx context.Context, c config, commit string, log io.Writer) (file string, mains map[string]bool, err error) {
	goVersion, err := output(ctx, c.dir, "go", "env", "GOVERSION")
	if err != nil {
		return "", nil, err
	}
	tool, err := fileHash(c.apidiff)
	if err != nil {
		return "", nil, fmt.Errorf("apidiff binary: %w", err)
	}
	key := hash(commit, strings.TrimSpace(goVersion), tool)
	file = filepath.Join(c.cacheDir, key+".zip")
	mainsFile := filepath.Join(c.cacheDir, key+".main")
	if list, err := os.ReadFile(mainsFile); err == nil {
		if _, err := os.Stat(file); err == nil {
			now := time.Now()
			os.Chtimes(file, now, now) // used: the last to be pruned
			return file, lines(string(list)), nil
		}
	}

	fmt.Fprintf(log, "apidiff: reading the API of %s (once per base commit: it compiles that version)\n", short(commit))
	dir, unlock, err := tree(ctx, c, commit, "base")
	if err != nil {
		return "", nil, err
	}
	defer unlock()
	module, err := modulePath(dir)
	if err != nil {
		return "", nil, err
	}
	list, err := mainPackages(ctx, dir)
	if err != nil {
		return "", nil, err
	}
	tmp := file + ".tmp"
	if _, err := output(ctx, dir, c.apidiff, "-m", "-w", tmp, module); err != nil {
		return "", nil, fmt.Errorf("export data of %s: %w", short(commit), err)
	}
	if err := os.WriteFile(mainsFile, []byte(strings.Join(slices.Sorted(maps.Keys(list)), "\n")), 0o644); err != nil {
		return "", nil, err
	}
	if err := os.Rename(tmp, file); err != nil {
		return "", nil, err
	}
	prune(c.cacheDir, keep)
	return file, list, nil
}

// keep is how many bases' export data the cache holds (about 2 MB each
// for strata): the bases of the last merges to main and of the branches in
// flight.
const keep = 20

// prune deletes all but the newest n export data files of dir, with their
// lists of commands.
func prune(dir string, n int) {
	files, _ := filepath.Glob(filepath.Join(dir, "*.zip"))
	if len(files) <= n {
		return
	}
	mtime := map[string]int64{}
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil {
			mtime[f] = fi.ModTime().UnixNano()
		}
	}
	slices.SortFunc(files, func(a, b string) int { return cmp.Compare(mtime[b], mtime[a]) })
	for _, f := range files[n:] {
		os.Remove(f)
		os.Remove(strings.TrimSuffix(f, ".zip") + ".main")
	}
}

// tree writes commit's files into the cache's directory for side (base,
// head), emptied first, and locks it until unlock. The directory is the
// same from run to run and from checkout to checkout on purpose: the go
// command's build cache keys a package's compilation by its directory, so
// the packages that did not change since the last base compile only once,
// whichever clone asks (CI clones main afresh into a new folder each time).
func tree(ctx context.Context, c config, commit, side string) (dir string, unlock func(), err error) {
	dir = filepath.Join(c.cacheDir, "tree-"+side)
	lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", nil, err
	}
	// Another run (two make test at once) waits here rather than writing
	// into the tree this one is compiling.
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		lock.Close()
		return "", nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	unlock = func() { lock.Close() }
	if err := os.RemoveAll(dir); err != nil {
		unlock()
		return "", nil, err
	}
	if err := extract(ctx, c.dir, commit, dir); err != nil {
		unlock()
		return "", nil, fmt.Errorf("write %s into %s: %w", short(commit), dir, err)
	}
	return dir, unlock, nil
}

// extract writes the files of commit into dst, as git archive gives them
// (no .git, nothing untracked).
func extract(ctx context.Context, repo, commit, dst string) error {
	cmd := exec.CommandContext(ctx, "git", "-C", repo, "archive", "--format=tar", commit)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	werr := untar(out, dst)
	io.Copy(io.Discard, out) // let git finish if untar stopped early
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("git archive %s: %w: %s", short(commit), err, strings.TrimSpace(stderr.String()))
	}
	return werr
}

func untar(r io.Reader, dst string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if !filepath.IsLocal(h.Name) {
			return fmt.Errorf("archive entry %q is outside the tree", h.Name)
		}
		path := filepath.Join(dst, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(path, 0o755)
		case tar.TypeReg:
			err = writeFile(path, tr, h.FileInfo().Mode().Perm())
		case tar.TypeSymlink:
			if err = os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
				err = os.Symlink(h.Linkname, path)
			}
		default: // git archive's pax header holding the commit ID
			continue
		}
		if err != nil {
			return err
		}
	}
}

func writeFile(path string, r io.Reader, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm|0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// newAPI runs apidiff on the module in dir against the old export data
// and returns its report.
func newAPI(ctx context.Context, c config, dir, oldFile string) (report string, mains map[string]bool, err error) {
	module, err := modulePath(dir)
	if err != nil {
		return "", nil, err
	}
	if mains, err = mainPackages(ctx, dir); err != nil {
		return "", nil, err
	}
	report, err = output(ctx, dir, c.apidiff, "-m", oldFile, module)
	if err != nil {
		return "", nil, fmt.Errorf("compare: %w", err)
	}
	return report, mains, nil
}

// modulePath reads the module line of dir/go.mod.
func modulePath(dir string) (string, error) {
	f, err := os.Open(filepath.Join(dir, "go.mod"))
	if err != nil {
		return "", fmt.Errorf("the module's root: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	return "", fmt.Errorf("%s/go.mod: no module line", dir)
}

// mainPackages lists the module's commands: apidiff reports their exported
// names too, which nothing can import.
func mainPackages(ctx context.Context, dir string) (map[string]bool, error) {
	out, err := output(ctx, dir, "go", "list", "-e", "-f", `{{if eq .Name "main"}}{{.ImportPath}}{{end}}`, "./...")
	if err != nil {
		return nil, fmt.Errorf("list the commands: %w", err)
	}
	return lines(out), nil
}

// output runs name in dir outside any go.work and returns its standard
// output; a failure carries what it said on standard error, less
// apidiff's notes on the internal packages it leaves out.
func output(ctx context.Context, dir, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		var said []string
		for _, l := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
			if !strings.HasPrefix(l, "Ignoring internal package ") {
				said = append(said, l)
			}
		}
		if len(said) > 8 {
			said = append(said[:8], "...")
		}
		return "", fmt.Errorf("%s %s: %w: %s", filepath.Base(name), strings.Join(args, " "), err, strings.Join(said, "\n"))
	}
	return stdout.String(), nil
}

func fileHash(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func hash(parts ...string) string {
	h := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(h[:])[:32]
}

func lines(s string) map[string]bool {
	out := map[string]bool{}
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out[l] = true
		}
	}
	return out
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}
