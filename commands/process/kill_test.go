package process

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/internal/failpoint"
)

// childURLEnv hands the database to the child runner process.
const childURLEnv = "STRATA_TEST_PROCESS_CHILD_URL"

// TestCrashBetweenAppendAndOutcome kills a runner process with SIGKILL
// right after a command it dispatched appended its events and before the
// outcome was recorded (the process.after-execute failpoint, in a child
// process: a real crash, so the session, its lease and every transaction
// die with it, which an in-process hook would not show). A new runner
// executes the step again with the same idempotency key: the command's
// events exist once, and the outcome is recorded once.
func TestCrashBetweenAppendAndOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.append("t-a", ticketOpened{ID: "k1"})

	cmd := exec.CommandContext(b.ctx, os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), childURLEnv+"="+b.url, failpoint.EnvVar+"="+FailpointAfterExecute)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the child did not die at its failpoint: %v\n%s", err, out)
	}
	if n := b.count(`SELECT count(*) FROM events WHERE stream_id = 'assign-k1'`); n != 1 {
		t.Fatalf("after the crash the assignment has %d events, want 1 (the command ran)", n)
	}
	d, err := b.instance("t-a", "k1")
	if err != nil {
		t.Fatal(err)
	}
	if d.Status != "assigning" || d.Steps[0].Status != "pending" || d.Steps[0].Attempts != 0 {
		t.Fatalf("after the crash: status %s, step %+v (the outcome must not be recorded)", d.Status, d.Steps[0])
	}

	b.start(b.runner(RunnerConfig{}))
	d = b.statusIs("t-a", "k1", "waiting")
	if n := b.count(`SELECT count(*) FROM events WHERE stream_id = 'assign-k1'`); n != 1 {
		t.Errorf("the re-dispatched command appended again: %d events", n)
	}
	if n := b.count(`SELECT count(*) FROM idempotency_keys WHERE key = $1`, StepKey("ticket", "k1", "assign")); n != 1 {
		t.Errorf("idempotency records of the step = %d, want 1", n)
	}
	outcomes := 0
	for _, h := range d.History {
		if h.Kind == histOutcome && strings.Contains(string(h.Summary), `"step": "assign"`) {
			outcomes++
		}
	}
	if outcomes != 1 || d.Steps[0].Status != "done" || d.Steps[0].Attempts != 1 {
		t.Errorf("assign outcomes = %d, step %+v; want one outcome", outcomes, d.Steps[0])
	}
}

// TestCrashBeforeBatchCommit kills a runner process with SIGKILL after
// its batch wrote the instance, its steps, deadline and history and moved
// the checkpoint, before COMMIT (process.before-commit). Nothing of it is
// left; a new runner decides the event once.
func TestCrashBeforeBatchCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.append("t-a", ticketOpened{ID: "k1"})
	cmd := exec.CommandContext(b.ctx, os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), childURLEnv+"="+b.url, failpoint.EnvVar+"="+FailpointBeforeCommit)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the child did not die at its failpoint: %v\n%s", err, out)
	}
	for _, table := range []string{"process_instances", "process_steps", "process_deadlines", "process_history"} {
		if n := b.count(`SELECT count(*) FROM ` + table); n != 0 {
			t.Errorf("after the crash %s has %d rows", table, n)
		}
	}
	if n := b.count(`SELECT count(*) FROM projection_checkpoints WHERE projection = 'ticket' AND pos_major > 0`); n != 0 {
		t.Errorf("the checkpoint moved")
	}
	b.start(b.runner(RunnerConfig{}))
	d := b.statusIs("t-a", "k1", "waiting")
	if got := strings.Join(historyKinds(d), ","); got != "event,outcome,outcome" {
		t.Errorf("history = %s", got)
	}
	if n := b.count(`SELECT count(*) FROM events WHERE stream_id = 'assign-k1'`); n != 1 {
		t.Errorf("assignment events = %d", n)
	}
}

// TestCrashChild is the runner process the crash tests kill. Run on its own (no child URL) it does nothing.
func TestCrashChild(t *testing.T) {
	url := os.Getenv(childURLEnv)
	if url == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	app, err := db.OpenPool(ctx, url, db.PoolConfig{Role: db.RoleApp})
	if err != nil {
		t.Fatal(err)
	}
	proj, err := db.OpenPool(ctx, url, db.PoolConfig{Role: db.RoleProjector})
	if err != nil {
		t.Fatal(err)
	}
	b := newBundle(ctx, t, url, app, proj)
	r := b.runner(RunnerConfig{})
	_ = r.Run(ctx) // until the failpoint kills the process
	t.Fatal("the runner returned without reaching its failpoint")
}
