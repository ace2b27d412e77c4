package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/strata-es/strata/internal/pgembed"
)

// TestServeEmbeddedFromPrivateDirectory is `git clone ... && make run` from
// a checkout inside a directory of mode 0700 (like /root or a mktemp -d
// directory), then `make db/reset`. The tests run as root, so PostgreSQL
// runs as the postgres OS user, which cannot traverse that directory: the
// cluster must go where it can reach it, the same place on the next run
// (the data survives), and the reset must stop the server and delete it.
// Run as another user it checks the same story with the cluster in the
// checkout.
func TestServeEmbeddedFromPrivateDirectory(t *testing.T) {
	private, err := os.MkdirTemp("", "strata-private-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(private) })
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(private, "strata", ".strata")
	if err := os.MkdirAll(filepath.Dir(dataDir), 0o700); err != nil {
		t.Fatal(err)
	}
	root := os.Geteuid() == 0
	wantCluster := filepath.Join(dataDir, "pg")
	if root {
		wantCluster = filepath.Join(relocatedRoots[0], relocatedName(dataDir))
	}
	t.Cleanup(func() { // whatever failed, leave no server and no data behind
		_ = resetEmbedded(context.Background(), dataDir, io.Discard)
	})
	vars := map[string]string{"STRATA_DATA_DIR": dataDir, "STRATA_LOG_LEVEL": "warn"}

	serveOnce := func() (base, token string, stop func() int) {
		t.Helper()
		base, banner, stop := startServe(t, vars)
		text := strings.Join(banner, "\n")
		if !strings.Contains(text, "data in "+wantCluster+";") {
			t.Fatalf("the banner does not say the data is in %s:\n%s", wantCluster, text)
		}
		for i, l := range banner {
			if strings.HasPrefix(l, "development token") && i+1 < len(banner) {
				token = strings.TrimSpace(banner[i+1])
			}
		}
		if token == "" {
			t.Fatalf("no development token in the banner:\n%s", text)
		}
		return base, token, stop
	}
	call := func(base, token, method, path, body string, header ...string) (int, []byte) {
		t.Helper()
		status, raw, _ := apiCall(t, nil, base, token, method, path, body, header...)
		return status, raw
	}

	base, token, stop := serveOnce()
	status, raw := call(base, token, http.MethodPost, "/v1/orders", `{"order_id":"o-private","customer_id":"c-1","currency":"EUR"}`)
	if status != http.StatusCreated {
		t.Fatalf("create: %d %s", status, raw)
	}
	var created struct{ Position string }
	if err := json.Unmarshal(raw, &created); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(wantCluster)
	if err != nil {
		t.Fatalf("no cluster in %s: %v", wantCluster, err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("%s has mode %s, want 0700", wantCluster, fi.Mode().Perm())
	}
	if root {
		pg, err := user.Lookup("postgres")
		if err != nil {
			t.Fatal(err)
		}
		if uid := fi.Sys().(*syscall.Stat_t).Uid; strconv.Itoa(int(uid)) != pg.Uid {
			t.Errorf("%s is owned by uid %d, want the postgres OS user (%s)", wantCluster, uid, pg.Uid)
		}
		if _, err := os.Stat(filepath.Join(dataDir, "pg")); !os.IsNotExist(err) {
			t.Errorf("%s/pg exists although the cluster was relocated: %v", dataDir, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dataDir, "jwt-secret")); err != nil {
		t.Errorf("the development JWT secret is not in STRATA_DATA_DIR: %v", err)
	}
	if code := stop(); code != exitOK {
		t.Fatalf("serve exited %d", code)
	}

	// The next run finds the same cluster (and the same secret: the token
	// printed now is accepted, and so is the old one).
	base, _, stop = serveOnce()
	status, raw = call(base, token, http.MethodGet, "/v1/orders/o-private?wait=10s", "", "X-Consistency-Token", created.Position)
	if status != http.StatusOK || !strings.Contains(string(raw), `"order_id":"o-private"`) {
		t.Fatalf("the order did not survive the restart: %d %s", status, raw)
	}
	if code := stop(); code != exitOK {
		t.Fatalf("serve exited %d", code)
	}

	// make db/reset, with the server still running as a `strata serve`
	// killed with -9 leaves it (the daemon outlives its starter).
	srv, err := pgembed.Start(context.Background(), pgembed.Config{DataDir: wantCluster})
	if err != nil {
		t.Fatal(err)
	}
	pidRaw, err := os.ReadFile(filepath.Join(wantCluster, "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.SplitN(string(pidRaw), "\n", 2)[0])
	if !alive(pid) {
		t.Fatalf("no running postmaster in %s (pid %d)", wantCluster, pid)
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"db", "reset"}, testEnv(vars), &out, &errb); code != exitOK {
		t.Fatalf("db reset: %d %s", code, errb.String())
	}
	t.Logf("db reset said:\n%s", out.String())
	if portOpen(srv.Port()) || alive(pid) {
		t.Errorf("postmaster pid %d still runs after db reset", pid)
	}
	for _, gone := range []string{wantCluster, dataDir} {
		if _, err := os.Stat(gone); !os.IsNotExist(err) {
			t.Errorf("%s still exists after db reset (%v)", gone, err)
		}
	}
	if !strings.Contains(out.String(), "deleted "+wantCluster) {
		t.Errorf("db reset does not say it deleted %s:\n%s", wantCluster, out.String())
	}
}

// TestRelocatedName is stable and distinct per data directory, and safe in
// a path.
func TestRelocatedName(t *testing.T) {
	a := relocatedName("/root/strata/.strata")
	if a != relocatedName("/root/strata/.strata") || a == relocatedName("/root/strata2/.strata") || a == relocatedName("/home/x/strata/.strata") {
		t.Fatalf("relocatedName is not a stable function of the path: %s", a)
	}
	if !strings.HasPrefix(a, "strata-") || len(a) != len("strata-")+16 {
		t.Fatalf("relocatedName(/root/strata/.strata) = %q", a)
	}
	if n := relocatedName("/tmp/a b/../é/" + strings.Repeat("x", 100) + "/.strata"); strings.ContainsAny(n, " /.é") || len(n) > 32+17 {
		t.Fatalf("relocatedName gave %q", n)
	}
}

func portOpen(port int) bool {
	c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// alive reports whether pid runs; a zombie (nobody reaps the daemon's
// postmaster when PID 1 does not) is dead.
func alive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if i := bytes.LastIndexByte(raw, ')'); err == nil && i >= 0 && i+2 < len(raw) && raw[i+2] == 'Z' {
		return false
	}
	return true
}
