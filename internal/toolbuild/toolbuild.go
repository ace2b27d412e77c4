// Package toolbuild finds and builds the test tools strata builds from the
// Go module proxy into bin/ (Ory Hydra, SeaweedFS): the module's root, and
// a build under a file lock so that test binaries starting at once build a
// tool once.
package toolbuild

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
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
