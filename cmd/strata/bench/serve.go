package bench

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/domain"
)

// benchSecret signs the tokens of the end-to-end workloads.
const benchSecret = "bench-secret-bench-secret-bench-secret-0123"

// server is a `strata serve` child process.
type server struct {
	cmd  *exec.Cmd
	base string
	once sync.Once
}

// startServe runs `strata serve` (all roles) against url as a separate
// process, as users run it, with limits lifted so the benchmark measures
// the service, not its throttles.
func (e *Env) startServe(ctx context.Context, url string, env ...string) (*server, error) {
	return e.startProcess(ctx, "strata serve", []string{"serve"}, append([]string{
		"DATABASE_URL=" + url,
		"STRATA_JWT_SECRET=" + benchSecret,
		"STRATA_AUTO_MIGRATE=false",
		"STRATA_RATE_COMMANDS=unlimited",
		"STRATA_RATE_QUERIES=unlimited",
		"STRATA_MAX_IN_FLIGHT=100000",
		"STRATA_TENANT_IN_FLIGHT_COMMANDS=unlimited",
		"STRATA_TENANT_IN_FLIGHT_QUERIES=unlimited",
		"STRATA_TENANT_IN_FLIGHT_WAITS=unlimited",
		"STRATA_TENANT_POOL_SHARE=1", // the bench's one tenant may use the whole pool
		"STRATA_LOG_LEVEL=error",
		"STRATA_DATA_DIR=" + os.TempDir(),
		// The command path alone, comparable with earlier runs: the
		// workload's orders have no stock, and the fulfilment process
		// manager would cancel each placed one, adding its own load.
		"STRATA_PROCESSES=none",
		// The workloads' tenants are not provisioned in the directory.
		"STRATA_REQUIRE_TENANT_DIRECTORY=false",
	}, env...))
}

// startMinimal runs the minimal handler (minimal.go) against url as a
// separate process, the baseline of the HTTP workloads.
func (e *Env) startMinimal(ctx context.Context, url string) (*server, error) {
	return e.startProcess(ctx, "the minimal handler", []string{"bench", minimalArgs},
		[]string{"DATABASE_URL=" + url, "STRATA_JWT_SECRET=" + benchSecret})
}

// startProcess runs the strata binary with args, --addr and env on top
// of this process's environment, and waits until its /readyz answers.
func (e *Env) startProcess(ctx context.Context, what string, args, env []string) (*server, error) {
	if e.cfg.StrataPath == "" {
		return nil, fmt.Errorf("no strata binary to run (Config.StrataPath)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(e.cfg.StrataPath, append(args, "--addr", addr)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() { // keep the pipe drained; show failures
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if e.cfg.Progress != nil && (strings.Contains(sc.Text(), `"level":"ERROR"`) || strings.HasPrefix(sc.Text(), "minimal handler:")) {
				fmt.Fprintln(e.cfg.Progress, what+":", sc.Text())
			}
		}
	}()
	s := &server{cmd: cmd, base: "http://" + addr}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		res, err := http.Get(s.base + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return s, nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.stop()
	return nil, fmt.Errorf("%s did not become ready within 30 s", what)
}

func (s *server) stop() { s.once.Do(s.terminate) }

func (s *server) terminate() {
	s.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }() //nolint:errcheck
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill() //nolint:errcheck
		<-done
	}
}

// peakRSS returns the process's peak resident set (VmHWM) in MiB.
func (s *server) peakRSS() (float64, error) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(s.cmd.Process.Pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, err := strconv.ParseFloat(f[1], 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc status")
}

func tokenFor(tenant string) string {
	tok, err := auth.Sign([]byte(benchSecret), auth.Claims{Subject: "bench", Tenant: domain.TenantID(tenant)}, 6*time.Hour)
	if err != nil {
		panic(err)
	}
	return tok
}

func httpClient(conns int) *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		MaxIdleConns: conns * 2, MaxIdleConnsPerHost: conns * 2, IdleConnTimeout: time.Minute,
	}}
}
