package pgembed

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// childProc is a postgres process started in Child mode.
type childProc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited and been reaped
	err  error         // Wait result, valid after done
}

func (s *Server) startChild(ctx context.Context, port int, logOffset int64) error {
	logFile, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("pgembed: opening server log: %w", err)
	}
	cmd := exec.Command(s.bin.path("postgres"), append([]string{"-D", s.cfg.DataDir}, s.serverArgs(port)...)...)
	cmd.Env = serverEnv()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Own process group: a terminal Ctrl-C reaches us, not the server; our
	// death reaches the server through the parent-death signal.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setParentDeathSignal(cmd.SysProcAttr, syscall.SIGQUIT)
	s.owner.apply(cmd)
	err = spawn(cmd)
	_ = logFile.Close()
	if err != nil {
		return fmt.Errorf("pgembed: starting %s: %w", cmd.Path, err)
	}
	cp := &childProc{cmd: cmd, done: make(chan struct{})}
	go func() {
		cp.err = cmd.Wait()
		close(cp.done)
	}()
	s.child, s.pid = cp, cmd.Process.Pid
	if err := s.waitReady(ctx, port, timeoutFor(ctx, childReadyTimeout), cp.done); err != nil {
		s.killChild(cp)
		s.child, s.pid = nil, 0
		if cp.err != nil {
			err = fmt.Errorf("%w (%v)", err, cp.err)
		}
		return s.errWithLog(err, logOffset)
	}
	return nil
}

// killChild shuts a child down immediately and reaps it.
func (s *Server) killChild(cp *childProc) {
	_ = cp.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-cp.done:
	case <-time.After(10 * time.Second):
		_ = cp.cmd.Process.Kill()
		<-cp.done
	}
}

func (s *Server) stopChild(ctx context.Context, mode string) error {
	cp := s.child
	if cp == nil {
		return nil
	}
	select {
	case <-cp.done:
		s.child, s.pid = nil, 0
		return nil
	default:
	}
	sig := syscall.SIGINT // fast shutdown
	if mode == "immediate" {
		sig = syscall.SIGQUIT
	}
	s.cfg.Logf("pgembed: stopping PostgreSQL on port %d (%s)", s.Port(), mode)
	_ = cp.cmd.Process.Signal(sig)
	timer := time.NewTimer(timeoutFor(ctx, stopTimeout))
	defer timer.Stop()
	var err error
	select {
	case <-cp.done:
	case <-ctx.Done():
		err = ctx.Err()
	case <-timer.C:
		err = fmt.Errorf("timed out")
	}
	if err != nil {
		s.killChild(cp)
		err = s.errWithLog(fmt.Errorf("stopping postgres (%s): %w; it was shut down immediately", mode, err), max(fileSize(s.logPath)-8<<10, 0))
	}
	s.child, s.pid = nil, 0
	return err
}

// Child processes get a parent-death signal, which the kernel sends when the
// *thread* that forked them exits. Go may retire OS threads, so every child
// is forked from one goroutine that is locked to its thread and never ends.
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
		go spawner()
	})
	req := spawnReq{cmd: cmd, res: make(chan error, 1)}
	spawnCh <- req
	return <-req.res
}

func spawner() {
	runtime.LockOSThread() // never unlocked: the thread lives as long as the process
	for req := range spawnCh {
		req.res <- req.cmd.Start()
	}
}
