package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// base is the old side of a comparison: a commit, and in words why it is
// the one.
type base struct {
	commit string
	why    string
}

// chooseBase picks the commit to compare against, so that what a change
// does to the API is shown where it lands:
//
//   - on main (HEAD is main's tip, as in CI's clone of main, or there is no
//     main branch at all): HEAD's first parent, the previous commit of main.
//     After a merge that is main before the merge, so the whole merged
//     branch's change is listed, not only its last commit's;
//   - on a branch: its merge base with main, i.e. what the branch changes
//     when it lands (HEAD~1 would show only the last commit);
//   - an explicit rev (APIDIFF_BASE) wins over both.
//
// A history without that commit (the first commit, a shallow clone) is
// errNothingToCompare.
func chooseBase(ctx context.Context, dir, rev, mainRef string) (base, error) {
	if _, err := git(ctx, dir, "rev-parse", "--git-dir"); err != nil {
		return base{}, errNothingToCompare{"not a git checkout (" + firstLine(err.Error()) + ")"}
	}
	if rev != "" {
		c, err := commitOf(ctx, dir, rev)
		if err != nil {
			return base{}, fmt.Errorf("base %s: not a commit here: %w", rev, err)
		}
		return base{c, rev + ", as asked"}, nil
	}
	head, err := commitOf(ctx, dir, "HEAD")
	if err != nil {
		return base{}, errNothingToCompare{"the repository has no commit yet"}
	}
	mainCommit, mainName := "", ""
	for _, ref := range []string{"refs/heads/" + mainRef, "refs/remotes/origin/" + mainRef} {
		if c, err := commitOf(ctx, dir, ref); err == nil {
			mainCommit, mainName = c, strings.TrimPrefix(strings.TrimPrefix(ref, "refs/heads/"), "refs/remotes/")
			break
		}
	}
	if mainCommit != "" && mainCommit != head {
		mb, err := git(ctx, dir, "merge-base", "HEAD", mainCommit)
		if mb = strings.TrimSpace(mb); err == nil && mb != head {
			return base{mb, "the merge base with " + mainName + ": what this branch changes when it lands"}, nil
		}
		// HEAD is an older commit of main (or unrelated to it): its own
		// previous commit, as on main.
	}
	parent, err := commitOf(ctx, dir, "HEAD^1")
	if err != nil {
		if shallow, _ := git(ctx, dir, "rev-parse", "--is-shallow-repository"); strings.TrimSpace(shallow) == "true" {
			return base{}, errNothingToCompare{"this is a shallow clone and HEAD's parent is not in it; " +
				"fetch it (git fetch --deepen=1) or name a base (make apidiff APIDIFF_BASE=<rev>)"}
		}
		return base{}, errNothingToCompare{"HEAD is the repository's first commit: there is no previous API to compare with"}
	}
	why := "HEAD~1: the previous commit of " + mainName
	if mainCommit == "" {
		why = "HEAD~1: the previous commit (no " + mainRef + " branch here)"
	}
	return base{parent, why}, nil
}

// commitOf resolves rev to a full commit hash.
func commitOf(ctx context.Context, dir, rev string) (string, error) {
	out, err := git(ctx, dir, "rev-parse", "--verify", "--quiet", rev+"^{commit}")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(out), nil
}

// changelogChanged reports whether CHANGELOG.md differs between base and
// head ("" : the working tree).
func changelogChanged(ctx context.Context, dir, baseCommit, head string) (bool, error) {
	args := []string{"diff", "--quiet", baseCommit}
	if head != "" {
		args = append(args, head)
	}
	_, err := git(ctx, dir, append(args, "--", "CHANGELOG.md")...)
	if err == nil {
		return false, nil
	}
	if ge := (*gitError)(nil); errors.As(err, &ge) && ge.code == 1 {
		return true, nil
	}
	return false, err
}

// gitError is a failed git command with what it said.
type gitError struct {
	args   []string
	code   int
	stderr string
}

func (e *gitError) Error() string {
	return fmt.Sprintf("git %s: exit %d: %s", strings.Join(e.args, " "), e.code, strings.TrimSpace(e.stderr))
}

// git runs git in dir and returns its standard output.
func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			return stdout.String(), &gitError{args: args, code: ee.ExitCode(), stderr: stderr.String()}
		}
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return stdout.String(), nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}
