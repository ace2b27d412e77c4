// Package toolbuild finds and builds the test tools strata builds from the
// Go module proxy into bin/ (Ory Hydra, SeaweedFS, local-kms): the module's root, and
// a build under a file lock so that test binaries starting at once build a
// tool once.
package toolbuild

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
)

// ModuleRoot finds the directory of strata's go.mod above the working
// directory (a test's is its package's).
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.HasPrefix(b, []byte("module github.com/strata-es/strata\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("strata's go.mod not found above the working directory")
		}
		dir = parent
	}
}

// Locked runs build unless bin exists, holding bin+".lock": a test binary
// that waited for another's build finds bin there and builds nothing.
func Locked(bin string, build func() error) error {
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return err
	}
	lock, err := os.OpenFile(bin+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // closing the file releases it too
	if _, err := os.Stat(bin); err == nil {
		return nil // built by another test binary meanwhile
	}
	return build()
}

// Binary returns a tool's binary: the file $env names when it is set, else
// bin/<name> at the module's root, built there by build (under Locked)
// when it is missing.
func Binary(env, name string, build func(root, bin string) error) (string, error) {
	if p := strings.TrimSpace(os.Getenv(env)); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("$%s=%s: %w", env, p, err)
		}
		return p, nil
	}
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(root, "bin", name)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	return bin, Locked(bin, func() error { return build(root, bin) })
}

// GoBuild builds pkg into bin from the tool module in root/dir (a module
// of its own that pins the tool's version), with the go command on PATH or
// the one of the running Go.
func GoBuild(root, dir, pkg, bin string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, err := os.Stat(goBin); err != nil {
			return fmt.Errorf("no go command to build %s: run `make deps`", pkg)
		}
	}
	tmp := bin + ".building"
	cmd := exec.Command(goBin, "build", "-o", tmp, pkg)
	cmd.Dir = filepath.Join(root, dir)
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s from %s: %v\n%s", pkg, dir, err, out)
	}
	return os.Rename(tmp, bin)
}
