package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The Makefile pins the apidiff it installs; the tests use the same one.
func pinnedVersion(t *testing.T) string {
	t.Helper()
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^APIDIFF_VERSION := (v\S+)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("the Makefile pins no APIDIFF_VERSION := v...")
	}
	return string(m[1])
}

// installApidiff installs the pinned apidiff from the Go module proxy (or
// the module cache) into a directory of the test. It never skips: make
// test has the network the Makefile's own install needs.
func installApidiff(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	cmd := exec.Command("go", "install", "golang.org/x/exp/cmd/apidiff@"+pinnedVersion(t))
	cmd.Env = append(os.Environ(), "GOBIN="+bin, "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("install apidiff: %v\n%s", err, out)
	}
	return filepath.Join(bin, "apidiff")
}

// A small module with two commits of API change, compared by the real
// apidiff: the changes per package with their verdicts, the commands and
// internal packages left out, the CHANGELOG.md reminder, and the cache.
func TestCompareTwoCommits(t *testing.T) {
	t.Parallel()
	apidiff := installApidiff(t)
	r := newRepo(t, "main")
	c1 := r.commit("one", map[string]string{
		"go.mod":            "module example.com/lib\n\ngo 1.22\n",
		"CHANGELOG.md":      "# Changelog\n",
		"lib.go":            "package lib\n\nfunc A() {}\n\nfunc B() {}\n",
		"sub/sub.go":        "package sub\n\ntype T struct{ X int }\n",
		"cmd/tool/main.go":  "package main\n\nfunc Exported() {}\n\nfunc main() {}\n",
		"internal/x/x.go":   "package x\n\nfunc Gone() {}\n",
		"unchanged/same.go": "package unchanged\n\nfunc Same() {}\n",
	})
	r.commit("two", map[string]string{
		"lib.go":           "package lib\n\nfunc B() {}\n\nfunc C() {}\n",
		"sub/sub.go":       "package sub\n\ntype T struct{ X, Y int }\n",
		"cmd/tool/main.go": "package main\n\nfunc main() {}\n",
		"internal/x/x.go":  "package x\n",
		"added/added.go":   "package added\n\nfunc New() {}\n",
	})
	cache := t.TempDir()
	compare := func() string {
		t.Helper()
		var out, errs bytes.Buffer
		if code := run(context.Background(), []string{"-apidiff", apidiff, "-C", r.dir, "-cache", cache}, &out, &errs); code != 0 {
			t.Fatalf("exit %d: %s", code, errs.String())
		}
		return out.String()
	}

	out := compare()
	for _, want := range []string{
		"reading the API of " + short(c1),
		"example.com/lib, the working tree against " + short(c1) + " (HEAD~1: the previous commit of main)",
		"example.com/lib (the root package)\n  INCOMPATIBLE  A: removed\n  compatible    C: added\n",
		"example.com/lib/sub\n  compatible    T.Y: added\n",
		"example.com/lib/added: package added\n",
		"apidiff: 1 incompatible and 3 compatible change(s) in 3 package(s)\n",
		"REMINDER: 1 incompatible change(s) and CHANGELOG.md is the same as in " + short(c1),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
	for _, unwanted := range []string{"cmd/tool", "Exported", "internal", "Gone", "unchanged"} {
		if strings.Contains(out, unwanted) {
			t.Errorf("the report names %q (a command, an internal package or an unchanged one):\n%s", unwanted, out)
		}
	}

	// The break is recorded (not committed yet): no reminder, and the
	// base's API comes from the cache this time.
	if err := os.WriteFile(filepath.Join(r.dir, "CHANGELOG.md"), []byte("# Changelog\n\n- lib.A is gone\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out = compare()
	if strings.Contains(out, "REMINDER") || !strings.Contains(out, "CHANGELOG.md changed since "+short(c1)) {
		t.Errorf("with CHANGELOG.md edited, the report says:\n%s", out)
	}
	if strings.Contains(out, "reading the API of") {
		t.Errorf("the second run compiled the base again instead of reading the cache:\n%s", out)
	}

	// A range of commits, working tree aside: the first commit against
	// itself changes nothing.
	var same bytes.Buffer
	run(context.Background(), []string{"-apidiff", apidiff, "-C", r.dir, "-cache", cache, "-base", c1, "-head", c1}, &same, &same)
	if !strings.Contains(same.String(), "no change to the exported API") {
		t.Errorf("a commit against itself:\n%s", same.String())
	}
}

// A first commit has nothing to compare against: said, exit 0.
func TestNothingToCompareIsNotAFailure(t *testing.T) {
	t.Parallel()
	r := newRepo(t, "main")
	r.commit("one", map[string]string{"go.mod": "module example.com/lib\n"})
	fake := filepath.Join(t.TempDir(), "apidiff")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	code := run(context.Background(), []string{"-apidiff", fake, "-C", r.dir, "-cache", t.TempDir()}, &out, &out)
	if code != 0 || !strings.Contains(out.String(), "apidiff: nothing to compare: HEAD is the repository's first commit") {
		t.Fatalf("exit %d: %s", code, out.String())
	}
	if code := run(context.Background(), []string{"-C", r.dir}, &out, &out); code != 2 {
		t.Fatalf("without -apidiff: exit %d, want 2 (usage)", code)
	}
}

// make test runs make apidiff, and make apidiff without the network and
// with an empty module cache says it cannot install apidiff and succeeds.
func TestMakeTarget(t *testing.T) {
	t.Parallel()
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	test := regexp.MustCompile(`(?ms)^test: .*?\n\n`).Find(mk)
	if !bytes.Contains(test, []byte("$(MAKE) --no-print-directory apidiff")) {
		t.Errorf("make test does not run make apidiff:\n%s", test)
	}
	pinnedVersion(t)

	bin := filepath.Join(t.TempDir(), "tools", "apidiff")
	cmd := exec.Command("make", "--no-print-directory", "-C", "../..", "apidiff", "APIDIFF_BIN="+bin)
	// Outside make test's own make: no jobserver or flags of the outer one.
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "MAKEFLAGS=") || strings.HasPrefix(kv, "MFLAGS=") || strings.HasPrefix(kv, "MAKELEVEL=")
	})
	cmd.Env = append(env, "GOPROXY=off", "GOMODCACHE="+t.TempDir(), "GOTOOLCHAIN=local", "GOFLAGS=-modcacherw")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make apidiff offline: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "apidiff: not compared: cannot install golang.org/x/exp/cmd/apidiff@") {
		t.Fatalf("make apidiff offline said:\n%s", out)
	}
}
