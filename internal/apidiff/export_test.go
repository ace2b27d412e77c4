package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// The cache keeps the newest export data files (by last use), each with
// its list of commands, and drops the rest.
func TestPrune(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base := time.Now().Add(-time.Hour)
	for i, name := range []string{"a", "b", "c", "d", "e"} {
		for _, ext := range []string{".zip", ".main"} {
			f := filepath.Join(dir, name+ext)
			if err := os.WriteFile(f, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			at := base.Add(time.Duration(i) * time.Minute)
			if err := os.Chtimes(f, at, at); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "tree-base"), 0o755); err != nil {
		t.Fatal(err)
	}
	prune(dir, 2)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if want := []string{"d.main", "d.zip", "e.main", "e.zip", "tree-base"}; !slices.Equal(got, want) {
		t.Fatalf("after prune: %v, want %v", got, want)
	}
}

// A commit's files come out of git as they were committed, modes too,
// whatever the working tree holds now.
func TestExtract(t *testing.T) {
	t.Parallel()
	r := newRepo(t, "main")
	c1 := r.commit("one", map[string]string{"go.mod": "module example.com/x\n", "a/b/c.txt": "one\n", "run.sh": "#!/bin/sh\n"})
	r.git("update-index", "--chmod=+x", "run.sh")
	r.git("commit", "-q", "-m", "exec")
	c2 := r.git("rev-parse", "HEAD")
	r.commit("two", map[string]string{"a/b/c.txt": "two\n"})
	if err := os.WriteFile(filepath.Join(r.dir, "untracked"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "tree")
	if err := extract(context.Background(), r.dir, c1, dst); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "a/b/c.txt")); err != nil || !bytes.Equal(b, []byte("one\n")) {
		t.Fatalf("a/b/c.txt = %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dst, "untracked")); !os.IsNotExist(err) {
		t.Fatalf("an untracked file was written: %v", err)
	}
	if m, err := modulePath(dst); err != nil || m != "example.com/x" {
		t.Fatalf("modulePath = %q, %v", m, err)
	}
	dst2 := filepath.Join(t.TempDir(), "tree")
	if err := extract(context.Background(), r.dir, c2, dst2); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dst2, "run.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm()&0o100 == 0 {
		t.Fatalf("run.sh lost its executable bit: %v", fi.Mode())
	}
}
