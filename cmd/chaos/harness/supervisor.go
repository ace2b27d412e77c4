package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// failpointEnv is internal/failpoint's variable (failpoint.EnvVar).
const failpointEnv = "STRATA_FAILPOINTS"

// procSpec describes one supervised `strata serve` process.
type procSpec struct {
	Name  string
	Roles string
	// Env is the process's whole environment.
	Env []string
	// Arm, when set, is called before every start and returns a value
	// for STRATA_FAILPOINTS ("" leaves the incarnation unarmed). A
	// failpoint kills the process with SIGKILL itself; such an exit is
	// recorded as injected.
	Arm func() string
}

// procEvent is a start, an exit or an injected kill, for the scenario's
// notes and for timing the criteria (catch-up after the last restart).
type procEvent struct {
	At       time.Time
	Proc     string
	Kind     string // start, exit, kill, failpoint (the incarnation killed itself at its armed failpoint)
	Pid      int
	Detail   string
	Injected bool // the exit followed a kill by the harness (or Stop)
}

// supervisor runs strata serve processes and restarts each one when it
// exits, like a process manager would (systemd, Kubernetes), until Stop.
type supervisor struct {
	bin    string
	logDir string
	procs  []*proc
	wg     sync.WaitGroup
	// RestartDelay is the pause before a process is started again.
	restartDelay time.Duration

	mu       sync.Mutex
	stopping bool
	events   []procEvent
}

type proc struct {
	spec procSpec
	addr string // 127.0.0.1:port, the same across restarts

	mu      sync.Mutex
	cmd     *exec.Cmd
	started time.Time
	killed  bool          // the running incarnation was killed on purpose
	armed   string        // the running incarnation's STRATA_FAILPOINTS
	exited  chan struct{} // closed when the running incarnation is reaped
}

func newSupervisor(bin, logDir string, specs []procSpec) (*supervisor, error) {
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	s := &supervisor{bin: bin, logDir: logDir, restartDelay: 100 * time.Millisecond}
	for _, sp := range specs {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s.procs = append(s.procs, &proc{spec: sp, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))})
	}
	return s, nil
}

// URLs returns the base URL of every process, in order.
func (s *supervisor) URLs() []string {
	out := make([]string, len(s.procs))
	for i, p := range s.procs {
		out[i] = "http://" + p.addr
	}
	return out
}

// Start starts every process and keeps restarting it until Stop.
func (s *supervisor) Start() error {
	for _, p := range s.procs {
		if err := s.startOne(p); err != nil {
			return err
		}
		s.wg.Add(1)
		go s.keep(p)
	}
	return nil
}

func (s *supervisor) startOne(p *proc) error {
	logf, err := os.OpenFile(filepath.Join(s.logDir, p.spec.Name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close() // the child has its own descriptor
	cmd := exec.Command(s.bin, "serve", "--addr", p.addr, "--roles", p.spec.Roles)
	cmd.Env = p.spec.Env
	armed := ""
	if p.spec.Arm != nil {
		if armed = p.spec.Arm(); armed != "" {
			cmd.Env = append(append([]string{}, cmd.Env...), failpointEnv+"="+armed)
		}
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setParentDeathSignal(cmd.SysProcAttr)
	if err := spawn(cmd); err != nil {
		return fmt.Errorf("start %s: %w", p.spec.Name, err)
	}
	now := time.Now()
	fmt.Fprintf(logf, "--- chaos: started pid %d at %s %s\n", cmd.Process.Pid, now.Format(time.RFC3339Nano), armed)
	p.mu.Lock()
	p.cmd, p.started, p.killed, p.armed, p.exited = cmd, now, false, armed, make(chan struct{})
	p.mu.Unlock()
	s.record(procEvent{At: now, Proc: p.spec.Name, Kind: "start", Pid: cmd.Process.Pid, Detail: armed})
	return nil
}

// keep waits for the process and restarts it, until Stop.
func (s *supervisor) keep(p *proc) {
	defer s.wg.Done()
	for {
		p.mu.Lock()
		cmd, exited := p.cmd, p.exited
		p.mu.Unlock()
		err := cmd.Wait()
		p.mu.Lock()
		killed, armed := p.killed, p.armed
		p.mu.Unlock()
		close(exited)
		detail := "exit 0"
		kind := "exit"
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				detail = "signal " + ws.Signal().String()
				if ws.Signal() == syscall.SIGKILL && armed != "" && !killed {
					// The incarnation's own failpoint fired.
					kind, detail, killed = "failpoint", "failpoint "+armed, true
				}
			} else {
				detail = fmt.Sprintf("exit %d", ee.ExitCode())
			}
		} else if err != nil {
			detail = err.Error()
		}
		s.mu.Lock()
		stopping := s.stopping
		s.events = append(s.events, procEvent{At: time.Now(), Proc: p.spec.Name, Kind: kind, Pid: cmd.Process.Pid,
			Detail: detail, Injected: killed || stopping})
		s.mu.Unlock()
		if stopping {
			return
		}
		time.Sleep(s.restartDelay)
		for {
			s.mu.Lock()
			stopping = s.stopping
			s.mu.Unlock()
			if stopping {
				return
			}
			if err := s.startOne(p); err == nil {
				break
			}
			time.Sleep(time.Second)
		}
	}
}

// Pid returns the pid of process i's running incarnation (0: none).
func (s *supervisor) Pid(i int) int {
	p := s.procs[i]
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	select {
	case <-p.exited:
		return 0
	default:
	}
	return p.cmd.Process.Pid
}

// Kill sends SIGKILL to process i (no goodbye to the database, no
// graceful shutdown) and returns its pid.
func (s *supervisor) Kill(i int) int {
	p := s.procs[i]
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil || p.killed {
		return 0
	}
	select {
	case <-p.exited:
		return 0 // already gone; the supervisor restarts it
	default:
	}
	p.killed = true
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	s.record(procEvent{At: time.Now(), Proc: p.spec.Name, Kind: "kill", Pid: p.cmd.Process.Pid, Injected: true})
	return p.cmd.Process.Pid
}

// startSupervised starts specs under a new supervisor and waits until
// every process is ready; on an error nothing is left running. The caller
// stops it.
func (e *env) startSupervised(ctx context.Context, specs []procSpec) (*supervisor, error) {
	sup, err := newSupervisor(e.cfg.Strata, filepath.Join(e.dir, "logs"), specs)
	if err != nil {
		return nil, err
	}
	if err := sup.Start(); err != nil {
		sup.Stop(5 * time.Second)
		return nil, err
	}
	if err := sup.WaitReady(ctx, 60*time.Second); err != nil {
		sup.Stop(5 * time.Second)
		return nil, err
	}
	return sup, nil
}

// WaitReady waits until every process answers 200 on /readyz.
func (s *supervisor) WaitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	for _, u := range s.URLs() {
		for {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u+"/readyz", nil)
			res, err := client.Do(req)
			if err == nil {
				res.Body.Close()
				if res.StatusCode == http.StatusOK {
					break
				}
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s not ready after %s (logs in %s)", u, timeout, s.logDir)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// Stop ends every process: SIGTERM, then SIGKILL after grace.
func (s *supervisor) Stop(grace time.Duration) {
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	for _, p := range s.procs {
		p.mu.Lock()
		if p.cmd != nil && p.cmd.Process != nil {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
		p.mu.Unlock()
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		for _, p := range s.procs {
			p.mu.Lock()
			if p.cmd != nil && p.cmd.Process != nil {
				_ = p.cmd.Process.Kill()
			}
			p.mu.Unlock()
		}
		<-done
	}
}

func (s *supervisor) record(ev procEvent) {
	s.mu.Lock()
	s.events = append(s.events, ev)
	s.mu.Unlock()
}

// Events returns what happened to the processes so far.
func (s *supervisor) Events() []procEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]procEvent(nil), s.events...)
}

// lastStart returns the latest start of any process after the first ones.
func (s *supervisor) lastStart() time.Time {
	var t time.Time
	for _, ev := range s.Events() {
		if ev.Kind == "start" && ev.At.After(t) {
			t = ev.At
		}
	}
	return t
}

// unexpectedExits lists exits the harness did not cause.
// noteUnexpectedExits notes on r the processes that exited by themselves.
func (s *supervisor) noteUnexpectedExits(r *Result) {
	exits := s.unexpectedExits()
	if len(exits) == 0 {
		return
	}
	var d []string
	for _, ex := range exits {
		d = append(d, fmt.Sprintf("%s pid %d %s at %s", ex.Proc, ex.Pid, ex.Detail, ex.At.Format("15:04:05.000")))
	}
	r.note("serve processes that exited by themselves (restarted by the supervisor): %s", strings.Join(d, "; "))
}

func (s *supervisor) unexpectedExits() []procEvent {
	var out []procEvent
	for _, ev := range s.Events() {
		if (ev.Kind == "exit" || ev.Kind == "failpoint") && !ev.Injected {
			out = append(out, ev)
		}
	}
	return out
}

func (s *supervisor) count(kind string) int {
	n := 0
	for _, ev := range s.Events() {
		if ev.Kind == kind {
			n++
		}
	}
	return n
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Child processes get a parent-death signal, which the kernel sends when the
// thread that forked them exits; Go may retire threads, so every child is
// forked from one goroutine locked to its thread for good (as pgembed does).
var (
	spawnOnce sync.Once
	spawnCh   chan spawnReq
)

type spawnReq struct {
	cmd *exec.Cmd
	res chan error
}

func spawn(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnCh = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked
			for req := range spawnCh {
				req.res <- req.cmd.Start()
			}
		}()
	})
	req := spawnReq{cmd: cmd, res: make(chan error, 1)}
	spawnCh <- req
	return <-req.res
}
