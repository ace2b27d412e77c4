package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// A Patroni cluster of three PostgreSQL members over a private etcd, for
// FAILOVER (scenario_failover.go). Everything listens on 127.0.0.1 and
// lives under one directory of the work directory; every process dies with
// the harness: etcd and Patroni by their parent-death signal, the
// postmasters (which Patroni starts in a session of their own, so that
// they outlive Patroni itself) by a reaper that has one too.

// patroniDeps is the message of a machine without Patroni or etcd.
const patroniDeps = "FAILOVER needs Patroni and etcd (Debian: patroni, etcd-server): run `make deps` (as root) or `sudo apt-get install -y patroni etcd-server`"

// PatroniTimings are the settings of the cluster that decide how fast a
// failover goes (docs/operations.md, "Failover").
type PatroniTimings struct {
	// TTL of the leader key, LoopWait between Patroni's cycles,
	// RetryTimeout of its DCS and PostgreSQL operations (TTL >= LoopWait +
	// 2 x RetryTimeout).
	TTL, LoopWait, RetryTimeout time.Duration
}

type patroniCluster struct {
	dir     string
	bin     string // PostgreSQL server binaries
	logf    func(format string, args ...any)
	cred    *syscall.Credential // the postgres OS user when we are root
	timings PatroniTimings

	etcd     *exec.Cmd
	etcdDone chan struct{}
	etcdPort int
	reaper   *exec.Cmd
	members  []*patroniMember
	client   *http.Client

	mu       sync.Mutex
	stopping bool
	wg       sync.WaitGroup
}

type patroniMember struct {
	name            string
	pgPort, apiPort int
	dataDir         string
	config          string
	log             string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	hold    chan struct{} // non-nil: do not restart Patroni until it is closed
	starts  int
	lastPid int
}

// patroniBinaries finds patroni and etcd, or says how to install them.
func patroniBinaries() (patroni, etcd string, err error) {
	find := func(name string) string {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
		if p := "/usr/bin/" + name; fileExists(p) {
			return p
		}
		return ""
	}
	patroni, etcd = find("patroni"), find("etcd")
	var missing []string
	if patroni == "" {
		missing = append(missing, "patroni")
	}
	if etcd == "" {
		missing = append(missing, "etcd")
	}
	if len(missing) > 0 {
		return "", "", fmt.Errorf("%s not found: %s", strings.Join(missing, " and "), patroniDeps)
	}
	return patroni, etcd, nil
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// postgresBinDir is the PostgreSQL server binaries' directory Patroni is
// given: the harness's own (--pg-bin, STRATA_PG_BIN), else the newest of
// Debian's /usr/lib/postgresql/N/bin.
func postgresBinDir(explicit string) (string, error) {
	for _, d := range []string{explicit, os.Getenv("STRATA_PG_BIN")} {
		if d != "" && fileExists(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	sort.Slice(matches, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(matches[i]))))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(matches[j]))))
		return vi < vj
	})
	if len(matches) == 0 {
		return "", errors.New("FAILOVER: no PostgreSQL server binaries in /usr/lib/postgresql/*/bin (set STRATA_PG_BIN)")
	}
	return filepath.Dir(matches[len(matches)-1]), nil
}

// postgresCredential is the postgres OS user's, when the harness is root
// (PostgreSQL, and so Patroni which runs it, refuse root).
func postgresCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("the harness runs as root and PostgreSQL needs the OS user postgres: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// startPatroniCluster starts etcd and three Patroni members, the first one
// bootstrapping the cluster and the others cloning it, and waits until
// one is the leader and another its synchronous standby.
func startPatroniCluster(ctx context.Context, dir, pgBin string, settings map[string]string, t PatroniTimings, logf func(string, ...any)) (*patroniCluster, error) {
	patroniBin, etcdBin, err := patroniBinaries()
	if err != nil {
		return nil, err
	}
	bin, err := postgresBinDir(pgBin)
	if err != nil {
		return nil, err
	}
	cred, err := postgresCredential()
	if err != nil {
		return nil, err
	}
	if err := mkdirForPostgres(dir); err != nil {
		return nil, err
	}
	c := &patroniCluster{dir: dir, bin: bin, logf: logf, cred: cred, timings: t,
		client: &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}}
	ok := false
	defer func() {
		if !ok {
			c.Stop()
		}
	}()
	if err := c.startEtcd(ctx, etcdBin); err != nil {
		return nil, err
	}
	for i := range 3 {
		m := &patroniMember{name: fmt.Sprintf("m%d", i+1), dataDir: filepath.Join(dir, fmt.Sprintf("m%d", i+1)),
			config: filepath.Join(dir, fmt.Sprintf("m%d.yml", i+1)), log: filepath.Join(dir, fmt.Sprintf("m%d.log", i+1))}
		if m.pgPort, err = freePort(); err != nil {
			return nil, err
		}
		if m.apiPort, err = freePort(); err != nil {
			return nil, err
		}
		c.members = append(c.members, m)
	}
	for _, m := range c.members {
		if err := os.WriteFile(m.config, []byte(c.memberConfig(m, settings)), 0o644); err != nil {
			return nil, err
		}
	}
	if err := c.startReaper(); err != nil {
		return nil, err
	}
	// The first member bootstraps (initdb); the others clone it.
	began := time.Now()
	if err := c.startMember(c.members[0], patroniBin); err != nil {
		return nil, err
	}
	c.wg.Add(1)
	go c.keep(c.members[0], patroniBin)
	if _, err := c.WaitLeader(ctx, -1, 90*time.Second); err != nil {
		return nil, fmt.Errorf("bootstrap: %w (logs: %s)", err, c.members[0].log)
	}
	for _, m := range c.members[1:] {
		if err := c.startMember(m, patroniBin); err != nil {
			return nil, err
		}
		c.wg.Add(1)
		go c.keep(m, patroniBin)
	}
	if err := c.WaitHealthy(ctx, 120*time.Second); err != nil {
		return nil, err
	}
	logf("FAILOVER: Patroni cluster of 3 members ready after %s (etcd on 127.0.0.1:%d; PostgreSQL on %s)",
		time.Since(began).Round(time.Millisecond), c.etcdPort, strings.Join(c.hosts(), ","))
	ok = true
	return c, nil
}

func (c *patroniCluster) startEtcd(ctx context.Context, etcdBin string) error {
	var err error
	if c.etcdPort, err = freePort(); err != nil {
		return err
	}
	peer, err := freePort()
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(c.dir, "etcd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	client := fmt.Sprintf("http://127.0.0.1:%d", c.etcdPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peer)
	cmd := exec.Command(etcdBin, "--name", "chaos", "--data-dir", filepath.Join(c.dir, "etcd"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "chaos="+peerURL, "--initial-cluster-state", "new",
		"--enable-v2=true", "--log-level", "warn")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + c.dir}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setParentDeathSignal(cmd.SysProcAttr)
	if err := spawn(cmd); err != nil {
		return fmt.Errorf("start etcd: %w", err)
	}
	c.etcd, c.etcdDone = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(c.etcdDone) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := c.client.Get(client + "/health")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-c.etcdDone:
			return fmt.Errorf("etcd exited (log: %s)", filepath.Join(c.dir, "etcd.log"))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd not healthy after 30s (log: %s)", filepath.Join(c.dir, "etcd.log"))
		}
	}
}

// startReaper starts a shell that, when the harness dies (its parent-death
// signal) or Stop ends it, kills every postmaster of the cluster: Patroni
// starts PostgreSQL in a session of its own, so nothing else would.
func (c *patroniCluster) startReaper() error {
	var pids []string
	for _, m := range c.members {
		pids = append(pids, filepath.Join(m.dataDir, "postmaster.pid"))
	}
	script := `reap() { for f in "$@"; do [ -f "$f" ] && kill -KILL "$(head -n 1 "$f")" 2>/dev/null; done; exit 0; }
trap 'reap "$@"' TERM INT
while :; do sleep 0.2; done`
	cmd := exec.Command("/bin/sh", append([]string{"-c", script, "chaos-reaper"}, pids...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := spawn(cmd); err != nil {
		return fmt.Errorf("start the reaper: %w", err)
	}
	c.reaper = cmd
	go func() { _ = cmd.Wait() }()
	return nil
}

// memberConfig is one member's Patroni YAML (JSON is YAML).
func (c *patroniCluster) memberConfig(m *patroniMember, settings map[string]string) string {
	params := map[string]any{}
	for k, v := range settings {
		params[k] = v
	}
	// pg_rewind (a demoted primary rejoins without a new base backup)
	// needs hint bits in the WAL.
	params["wal_log_hints"] = "on"
	params["hot_standby"] = "on"
	params["wal_keep_size"] = "256MB"
	secs := func(d time.Duration) int { return int(d / time.Second) }
	cfg := map[string]any{
		"scope":     "strata-chaos",
		"namespace": "/strata-chaos/",
		"name":      m.name,
		"log":       map[string]any{"level": "INFO"},
		"restapi": map[string]any{
			"listen":          fmt.Sprintf("127.0.0.1:%d", m.apiPort),
			"connect_address": fmt.Sprintf("127.0.0.1:%d", m.apiPort),
		},
		"etcd3": map[string]any{"hosts": []string{fmt.Sprintf("127.0.0.1:%d", c.etcdPort)}},
		"bootstrap": map[string]any{
			"dcs": map[string]any{
				"ttl": secs(c.timings.TTL), "loop_wait": secs(c.timings.LoopWait), "retry_timeout": secs(c.timings.RetryTimeout),
				"maximum_lag_on_failover": 1 << 20,
				// A crashed primary fails over at once instead of being
				// restarted in place (Patroni's default waits 300 s).
				"primary_start_timeout": 0,
				"synchronous_mode":      true,
				// Strict: with no synchronous standby, commits wait
				// (synchronous_standby_names '*') instead of going
				// asynchronous. Not only after a failover: a Patroni
				// restarted on an orphaned primary (its Patroni was
				// killed, a standby was promoted meanwhile) writes
				// postgresql.conf before it demotes; non-strict, that
				// drops synchronous_standby_names and releases every
				// commit waiting for the lost standby as acknowledged,
				// commits the demotion then rewinds away (FAILOVER lost
				// 9 acknowledged commands that way, Patroni 3.0.2).
				"synchronous_mode_strict": true,
				"postgresql": map[string]any{
					"use_pg_rewind": true,
					"use_slots":     true,
					"parameters":    params,
				},
			},
			"initdb": []any{map[string]any{"encoding": "UTF8"}, map[string]any{"locale": "C"}},
		},
		"postgresql": map[string]any{
			"listen":          fmt.Sprintf("127.0.0.1:%d", m.pgPort),
			"connect_address": fmt.Sprintf("127.0.0.1:%d", m.pgPort),
			"data_dir":        m.dataDir,
			"bin_dir":         c.bin,
			"pgpass":          filepath.Join(c.dir, m.name+".pgpass"),
			"authentication": map[string]any{
				"superuser":   map[string]any{"username": "postgres", "password": "postgres"},
				"replication": map[string]any{"username": "replicator", "password": "replicator"},
				"rewind":      map[string]any{"username": "postgres", "password": "postgres"},
			},
			"parameters": map[string]any{"unix_socket_directories": c.dir},
			"pg_hba": []string{
				"local all all trust",
				"host all all 127.0.0.1/32 trust",
				"host replication all 127.0.0.1/32 trust",
			},
		},
		"tags": map[string]any{"nofailover": false, "noloadbalance": false, "clonefrom": false, "nosync": false},
	}
	b, _ := json.MarshalIndent(cfg, "", "  ")
	return string(b) + "\n"
}

func (c *patroniCluster) startMember(m *patroniMember, patroniBin string) error {
	logf, err := os.OpenFile(m.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(patroniBin, m.config)
	cmd.Dir = c.dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + c.dir, "LANG=C.UTF-8", "LC_ALL=C.UTF-8", "PYTHONUNBUFFERED=1"}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: c.cred}
	setParentDeathSignal(cmd.SysProcAttr)
	if err := spawn(cmd); err != nil {
		return fmt.Errorf("start patroni %s: %w", m.name, err)
	}
	fmt.Fprintf(logf, "--- chaos: started patroni pid %d at %s\n", cmd.Process.Pid, time.Now().Format(time.RFC3339Nano))
	m.mu.Lock()
	m.cmd, m.exited, m.lastPid = cmd, make(chan struct{}), cmd.Process.Pid
	m.starts++
	m.mu.Unlock()
	return nil
}

// keep restarts a member's Patroni when it exits, as systemd would, after
// a second, or once its hold is released (KillPatroni).
func (c *patroniCluster) keep(m *patroniMember, patroniBin string) {
	defer c.wg.Done()
	for {
		m.mu.Lock()
		cmd, exited := m.cmd, m.exited
		m.mu.Unlock()
		_ = cmd.Wait()
		close(exited)
		for {
			c.mu.Lock()
			stopping := c.stopping
			c.mu.Unlock()
			if stopping {
				return
			}
			m.mu.Lock()
			hold := m.hold
			m.mu.Unlock()
			if hold != nil {
				<-hold
				m.mu.Lock()
				m.hold = nil
				m.mu.Unlock()
				continue
			}
			time.Sleep(time.Second)
			if err := c.startMember(m, patroniBin); err == nil {
				break
			}
		}
	}
}

// hosts are the members' host:port, in order.
func (c *patroniCluster) hosts() []string {
	var out []string
	for _, m := range c.members {
		out = append(out, fmt.Sprintf("127.0.0.1:%d", m.pgPort))
	}
	return out
}

// URLFor is a superuser URL naming every member, of which libpq and pgx
// take the first that accepts writes (target_session_attrs=read-write):
// what an application is given in front of Patroni without a proxy.
func (c *patroniCluster) URLFor(database string) string {
	return "postgres://postgres@" + strings.Join(c.hosts(), ",") + "/" + url.PathEscape(database) +
		"?sslmode=disable&target_session_attrs=read-write&connect_timeout=5"
}

// URL is URLFor("postgres").
func (c *patroniCluster) URL() string { return c.URLFor("postgres") }

// memberURL connects to member i alone.
func (c *patroniCluster) memberURL(i int, database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable&connect_timeout=2", c.members[i].pgPort, url.PathEscape(database))
}

// clusterMember is one member of Patroni's GET /cluster.
type clusterMember struct {
	Name     string `json:"name"`
	Role     string `json:"role"`
	State    string `json:"state"`
	Timeline int    `json:"timeline"`
	Lag      any    `json:"lag"`
}

// view asks every member's REST API for the cluster and returns the first
// answer.
func (c *patroniCluster) view(ctx context.Context) ([]clusterMember, error) {
	var lastErr error
	for _, m := range c.members {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/cluster", m.apiPort), nil)
		res, err := c.client.Do(req)
		if err != nil {
			lastErr = err
			continue
		}
		var body struct {
			Members []clusterMember `json:"members"`
		}
		err = json.NewDecoder(res.Body).Decode(&body)
		res.Body.Close()
		if err != nil || res.StatusCode != http.StatusOK {
			lastErr = fmt.Errorf("%s: status %d %v", m.name, res.StatusCode, err)
			continue
		}
		return body.Members, nil
	}
	return nil, lastErr
}

func (c *patroniCluster) index(name string) int {
	for i, m := range c.members {
		if m.name == name {
			return i
		}
	}
	return -1
}

// Leader returns the member that is the running leader (-1: none).
func (c *patroniCluster) Leader(ctx context.Context) int {
	members, err := c.view(ctx)
	if err != nil {
		return -1
	}
	for _, m := range members {
		if m.Role == "leader" && m.State == "running" {
			return c.index(m.Name)
		}
	}
	return -1
}

// WaitLeader waits until a member other than not is the running leader
// and accepts writes.
func (c *patroniCluster) WaitLeader(ctx context.Context, not int, timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	for {
		if l := c.Leader(ctx); l >= 0 && l != not && c.writable(ctx, l) {
			return l, nil
		}
		if time.Now().After(deadline) {
			return -1, fmt.Errorf("no new leader after %s", timeout)
		}
		select {
		case <-ctx.Done():
			return -1, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// writable reports whether member i answers as a primary.
func (c *patroniCluster) writable(ctx context.Context, i int) bool {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := connectAdmin(cctx, c.memberURL(i, "postgres"))
	if err != nil {
		return false
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var recovery bool
	return conn.QueryRow(cctx, "SELECT pg_is_in_recovery()").Scan(&recovery) == nil && !recovery
}

// WaitHealthy waits until the cluster has a running leader, a streaming
// synchronous standby and every member running.
func (c *patroniCluster) WaitHealthy(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for {
		members, err := c.view(ctx)
		if err == nil {
			leader, sync, running := 0, 0, 0
			var desc []string
			for _, m := range members {
				desc = append(desc, fmt.Sprintf("%s %s %s", m.Name, m.Role, m.State))
				if m.State == "running" || m.State == "streaming" {
					running++
					switch m.Role {
					case "leader":
						leader++
					case "sync_standby":
						sync++
					}
				}
			}
			last = strings.Join(desc, ", ")
			if leader == 1 && sync >= 1 && running == len(c.members) {
				return nil
			}
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the Patroni cluster is not healthy after %s: %s (logs in %s)", timeout, last, c.dir)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Describe is one line of the cluster's state, for the progress log.
func (c *patroniCluster) Describe(ctx context.Context) string {
	members, err := c.view(ctx)
	if err != nil {
		return err.Error()
	}
	var desc []string
	for _, m := range members {
		desc = append(desc, fmt.Sprintf("%s %s %s tl%d", m.Name, m.Role, m.State, m.Timeline))
	}
	return strings.Join(desc, ", ")
}

// awaitDatabase waits until every member that answers has the database
// name (a standby replays CREATE DATABASE a moment after the primary).
func (c *patroniCluster) awaitDatabase(ctx context.Context, name string) error {
	deadline := time.Now().Add(30 * time.Second)
	for i := range c.members {
		for {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			conn, err := pgx.Connect(cctx, c.memberURL(i, "postgres"))
			if err != nil {
				cancel()
				break // down or starting: it replays the database before it serves
			}
			var n int
			err = conn.QueryRow(cctx, "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n)
			conn.Close(context.WithoutCancel(ctx))
			cancel()
			if err == nil && n == 1 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("database %s not on %s after 30s", name, c.members[i].name)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// postmasterPid reads member i's postmaster.pid (0: none).
func (c *patroniCluster) postmasterPid(i int) int {
	b, err := os.ReadFile(filepath.Join(c.members[i].dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	return pid
}

// KillPostmaster sends SIGKILL to member i's postmaster and returns its
// pid (Patroni lives on and sees PostgreSQL gone).
func (c *patroniCluster) KillPostmaster(i int) (int, error) {
	pid := c.postmasterPid(i)
	if pid == 0 {
		return 0, fmt.Errorf("%s has no postmaster.pid", c.members[i].name)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return 0, fmt.Errorf("kill the postmaster of %s (pid %d): %w", c.members[i].name, pid, err)
	}
	return pid, nil
}

// KillPatroni sends SIGKILL to member i's Patroni (its PostgreSQL lives
// on, orphaned) and keeps it down until the returned function is called.
func (c *patroniCluster) KillPatroni(i int) (pid int, release func(), err error) {
	m := c.members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil || m.cmd.Process == nil {
		return 0, nil, fmt.Errorf("%s: no Patroni running", m.name)
	}
	hold := make(chan struct{})
	m.hold = hold
	if err := m.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		m.hold = nil
		return 0, nil, err
	}
	var once sync.Once
	return m.cmd.Process.Pid, func() { once.Do(func() { close(hold) }) }, nil
}

// Stop ends Patroni (which stops its PostgreSQL), etcd and the reaper
// (which kills any postmaster left).
func (c *patroniCluster) Stop() {
	c.mu.Lock()
	c.stopping = true
	c.mu.Unlock()
	for _, m := range c.members {
		m.mu.Lock()
		if m.hold != nil {
			close(m.hold)
			m.hold = nil
		}
		if m.cmd != nil && m.cmd.Process != nil {
			_ = m.cmd.Process.Signal(syscall.SIGTERM)
		}
		m.mu.Unlock()
	}
	done := make(chan struct{})
	go func() { c.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		for _, m := range c.members {
			m.mu.Lock()
			if m.cmd != nil && m.cmd.Process != nil {
				_ = m.cmd.Process.Kill()
			}
			m.mu.Unlock()
		}
		<-done
	}
	if c.reaper != nil && c.reaper.Process != nil {
		_ = c.reaper.Process.Signal(syscall.SIGTERM)
	}
	if c.etcd != nil && c.etcd.Process != nil {
		_ = c.etcd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.etcdDone:
		case <-time.After(10 * time.Second):
			_ = c.etcd.Process.Kill()
		}
	}
}
