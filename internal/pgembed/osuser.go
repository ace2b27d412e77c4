package pgembed

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// serverOSUser is the OS account PostgreSQL runs as when this process is
// root (initdb, pg_ctl and postgres all refuse to run as root).
const serverOSUser = "postgres"

// osOwner is the unprivileged OS user the PostgreSQL programs run as.
type osOwner struct {
	name   string
	uid    int
	gid    int
	groups map[int]bool
}

// currentOwner returns nil when this process is not root (the programs then
// run as the current user), else the postgres OS user.
func currentOwner() (*osOwner, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(serverOSUser)
	if err != nil {
		return nil, fmt.Errorf("pgembed: this process runs as root, which PostgreSQL refuses, and the OS user %q to run it as cannot be found (%v): create it (e.g. `useradd --system --user-group %s`, installing the postgresql package does this) or run strata as an unprivileged user",
			serverOSUser, err, serverOSUser)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("pgembed: OS user %q has a non-numeric uid/gid %q/%q", serverOSUser, u.Uid, u.Gid)
	}
	if uid == 0 {
		return nil, fmt.Errorf("pgembed: OS user %q has uid 0; PostgreSQL refuses to run as root", serverOSUser)
	}
	o := &osOwner{name: u.Username, uid: uid, gid: gid, groups: map[int]bool{gid: true}}
	if ids, err := u.GroupIds(); err == nil {
		for _, s := range ids {
			if g, err := strconv.Atoi(s); err == nil {
				o.groups[g] = true
			}
		}
	}
	return o, nil
}

// apply makes cmd run as the owner (nil owner: unchanged). The working
// directory is set to "/" because the caller's (e.g. /root/...) may not be
// accessible to the postgres user, and PostgreSQL programs resolve it.
func (o *osOwner) apply(cmd *exec.Cmd) {
	cmd.Dir = "/"
	if o == nil {
		return
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	groups := make([]uint32, 0, len(o.groups))
	for g := range o.groups {
		groups = append(groups, uint32(g))
	}
	cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(o.uid), Gid: uint32(o.gid), Groups: groups}
}

// checkTraverse verifies that the owner can reach path: every existing
// directory from / down to path (inclusive) must be searchable by it.
// what names the thing being reached (with its path), for the error message.
func (o *osOwner) checkTraverse(path, what string) error {
	if o == nil {
		return nil
	}
	// Resolve symlinks in the part that exists; missing directories will be
	// created by us with mode 0755.
	existing := filepath.Clean(path)
	for {
		if _, err := os.Stat(existing); err == nil {
			break
		}
		parent := filepath.Dir(existing)
		if parent == existing {
			break
		}
		existing = parent
	}
	resolved, err := filepath.EvalSymlinks(existing)
	if err != nil {
		return fmt.Errorf("pgembed: %w", err)
	}
	var chain []string
	for d := resolved; ; d = filepath.Dir(d) {
		chain = append(chain, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	for i := len(chain) - 1; i >= 0; i-- {
		d := chain[i]
		fi, err := os.Stat(d)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return fmt.Errorf("pgembed: %w", err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("pgembed: %s is not a directory", d)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || o.canSearch(st) {
			continue
		}
		return fmt.Errorf("pgembed: PostgreSQL runs as OS user %q (uid %d) because this process is root, and that user cannot traverse %s (mode %s, owner uid %d), which leads to %s: put it outside %s (for example under /var/lib/strata or /tmp), or allow traversal with `chmod o+x %s`",
			o.name, o.uid, d, fi.Mode(), st.Uid, what, d, shellQuote(d))
	}
	return nil
}

func (o *osOwner) canSearch(st *syscall.Stat_t) bool {
	mode := st.Mode
	switch {
	case int(st.Uid) == o.uid:
		return mode&0o100 != 0
	case o.groups[int(st.Gid)]:
		return mode&0o010 != 0
	default:
		return mode&0o001 != 0
	}
}

// shellQuote quotes s for /bin/sh.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}
