package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// repo is a throwaway git repository for one test.
type repo struct {
	t   *testing.T
	dir string
}

// newRepo makes an empty repository on branch.
func newRepo(t *testing.T, branch string) *repo {
	t.Helper()
	r := &repo{t: t, dir: t.TempDir()}
	r.git("init", "-q", "-b", branch)
	return r
}

// git runs git in the repository with a fixed identity and no user or
// system configuration, and returns its output.
func (r *repo) git(args ...string) string {
	r.t.Helper()
	return runGit(r.t, r.dir, args...)
}

func runGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// commit writes files (path -> content; "" deletes) and commits them,
// returning the commit's hash.
func (r *repo) commit(msg string, files map[string]string) string {
	r.t.Helper()
	for path, content := range files {
		full := filepath.Join(r.dir, path)
		if content == "" {
			if err := os.Remove(full); err != nil {
				r.t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			r.t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			r.t.Fatal(err)
		}
	}
	r.git("add", "-A")
	r.git("commit", "-q", "--allow-empty", "-m", msg)
	return r.git("rev-parse", "HEAD")
}

func wantBase(t *testing.T, r *repo, rev, wantCommit, wantWhy string) {
	t.Helper()
	b, err := chooseBase(context.Background(), r.dir, rev, "main")
	if err != nil {
		t.Fatalf("chooseBase: %v", err)
	}
	if b.commit != wantCommit || !strings.Contains(b.why, wantWhy) {
		t.Fatalf("base = %s (%s), want %s (%q)", short(b.commit), b.why, short(wantCommit), wantWhy)
	}
}

func wantNothing(t *testing.T, dir, wantWhy string) {
	t.Helper()
	b, err := chooseBase(context.Background(), dir, "", "main")
	var none errNothingToCompare
	if !errors.As(err, &none) || !strings.Contains(err.Error(), wantWhy) {
		t.Fatalf("chooseBase = %v, %v; want nothing to compare (%q)", b, err, wantWhy)
	}
}

// On main, the base is the previous commit of main.
func TestBaseOnMain(t *testing.T) {
	t.Parallel()
	r := newRepo(t, "main")
	c1 := r.commit("one", map[string]string{"a": "1"})
	r.commit("two", map[string]string{"a": "2"})
	wantBase(t, r, "", c1, "previous commit of main")
}

// After a merge into main the base is main before the merge (the first
// parent), so the whole branch's change shows, not its last commit's.
func TestBaseAfterMerge(t *testing.T) {
	t.Parallel()
	r := newRepo(t, "main")
	r.commit("one", map[string]string{"a": "1"})
	r.git("checkout", "-q", "-b", "feature")
	r.commit("feature 1", map[string]string{"b": "1"})
	r.commit("feature 2", map[string]string{"b": "2"})
	r.git("checkout", "-q", "main")
	mainBefore := r.commit("main moves", map[string]string{"c": "1"})
	r.git("merge", "-q", "--no-ff", "-m", "merge feature", "feature")
	wantBase(t, r, "", mainBefore, "previous commit of main")
}

// On a branch the base is the merge base with main: what the branch
// changes when it lands, however far main has moved since.
func TestBaseOnBranch(t *testing.T) {
	t.Parallel()
	r := newRepo(t, "main")
	r.commit("one", map[string]string{"a": "1"})
	fork := r.commit("two", map[string]string{"a": "2"})
	r.git("checkout", "-q", "-b", "feature")
	r.commit("feature 1", map[string]string{"b": "1"})
	r.commit("feature 2", map[string]string{"b": "2"})
	r.git("checkout", "-q", "main")
	r.commit("main moves", map[string]string{"c": "1"})
	r.git("checkout", "-q", "feature")
	wantBase(t, r, "", fork, "merge base with main")
}

// A branch just cut from main (HEAD is main's tip) compares like main.
func TestBaseOnFreshBranch(t *testing.T) {
	t.Parallel()
	r := newRepo(t, "main")
	c1 := r.commit("one", map[string]string{"a": "1"})
	r.commit("two", map[string]string{"a": "2"})
	r.git("checkout", "-q", "-b", "feature")
	wantBase(t, r, "", c1, "previous commit of main")
}

// A clone of main from elsewhere has origin/main.
func TestBaseInACloneWithOnlyOriginMain(t *testing.T) {
	t.Parallel()
	r := newRepo(t, "main")
	fork := r.commit("one", map[string]string{"a": "1"})
	clone := &repo{t: t, dir: filepath.Join(t.TempDir(), "clone")}
	runGit(t, r.dir, "clone", "-q", r.dir, clone.dir)
	clone.git("checkout", "-q", "-b", "feature")
	clone.git("branch", "-q", "-D", "main")
	clone.commit("feature 1", map[string]string{"b": "1"})
	wantBase(t, clone, "", fork, "merge base with origin/main")
}

func TestBaseWithoutAMainBranch(t *testing.T) {
	t.Parallel()
	r := newRepo(t, "trunk")
	c1 := r.commit("one", map[string]string{"a": "1"})
	r.commit("two", map[string]string{"a": "2"})
	wantBase(t, r, "", c1, "no main branch here")
}

func TestBaseAsked(t *testing.T) {
	t.Parallel()
	r := newRepo(t, "main")
	c1 := r.commit("one", map[string]string{"a": "1"})
	r.commit("two", map[string]string{"a": "2"})
	r.commit("three", map[string]string{"a": "3"})
	wantBase(t, r, "HEAD~2", c1, "HEAD~2, as asked")
	if _, err := chooseBase(context.Background(), r.dir, "no-such-rev", "main"); err == nil || !strings.Contains(err.Error(), "not a commit") {
		t.Fatalf("an unknown base: error = %v", err)
	}
}

// CI clones main afresh: a history of one commit, or a shallow clone,
// has no base; that is said, not failed on.
func TestNoBaseInASingleCommitOrShallowClone(t *testing.T) {
	t.Parallel()
	r := newRepo(t, "main")
	r.commit("one", map[string]string{"a": "1"})
	wantNothing(t, r.dir, "first commit")

	r.commit("two", map[string]string{"a": "2"})
	r.commit("three", map[string]string{"a": "3"})
	shallow := filepath.Join(t.TempDir(), "shallow")
	runGit(t, r.dir, "clone", "-q", "--depth", "1", "file://"+r.dir, shallow)
	wantNothing(t, shallow, "shallow clone")

	wantNothing(t, t.TempDir(), "not a git checkout")
	wantNothing(t, newRepo(t, "main").dir, "no commit yet")
}

func TestChangelogChanged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRepo(t, "main")
	c1 := r.commit("one", map[string]string{"CHANGELOG.md": "# Changelog\n", "a": "1"})
	c2 := r.commit("two", map[string]string{"a": "2"})
	c3 := r.commit("three", map[string]string{"CHANGELOG.md": "# Changelog\n\n- a break\n"})
	for _, tc := range []struct {
		base, head string
		want       bool
	}{
		{c1, c2, false},
		{c1, c3, true},
		{c2, "", true}, // the working tree is c3's
		{c3, "", false},
	} {
		got, err := changelogChanged(ctx, r.dir, tc.base, tc.head)
		if err != nil || got != tc.want {
			t.Errorf("changelogChanged(%s, %q) = %v, %v; want %v", short(tc.base), tc.head, got, err, tc.want)
		}
	}
	// An edit not yet committed counts: the check runs before the commit.
	if err := os.WriteFile(filepath.Join(r.dir, "CHANGELOG.md"), []byte("edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := changelogChanged(ctx, r.dir, c3, ""); err != nil || !got {
		t.Errorf("an uncommitted CHANGELOG.md edit: changed = %v, %v; want true", got, err)
	}
}
