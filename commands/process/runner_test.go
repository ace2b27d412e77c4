package process

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/strata-es/strata/domain"
)

// TestTicketRunsToCompletion: an opened ticket is assigned (a command,
// whose event lands in the assignment's stream), notified (an intent) and
// closed; every input is in the instance's history, in order.
func TestTicketRunsToCompletion(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.runner(RunnerConfig{})
	b.start(r)
	b.append("t-a", ticketOpened{ID: "k1", Title: "printer"})
	d := b.statusIs("t-a", "k1", "waiting")
	b.append("t-a", ticketClosed{ID: "k1"})
	d = b.statusIs("t-a", "k1", "closed")
	if !d.Done || d.Parked || d.Inputs != 4 {
		t.Errorf("instance = %+v", d.Instance)
	}
	if got, want := strings.Join(historyKinds(d), ","), "event,outcome,outcome,event"; got != want {
		t.Errorf("history kinds = %s, want %s", got, want)
	}
	if n := b.count(`SELECT count(*) FROM events WHERE stream_id = 'assign-k1'`); n != 1 {
		t.Errorf("assignment events = %d, want 1", n)
	}
	if len(d.Steps) != 2 || d.Steps[0].Status != "done" || d.Steps[1].Status != "done" || d.Steps[1].Key != StepKey("ticket", "k1", "notify") {
		t.Errorf("steps = %+v", d.Steps)
	}
	if len(d.Deadlines) != 1 || d.Deadlines[0].Status != "cancelled" {
		t.Errorf("deadlines = %+v (Done cancels them)", d.Deadlines)
	}
	if b.port.effects[StepKey("ticket", "k1", "notify")] != 1 {
		t.Errorf("notifier effects = %v", b.port.effects)
	}
}

// TestBatchCommitsAtomically: a batch whose transaction fails after its
// writes (state, steps, deadlines, history) and before COMMIT leaves
// nothing behind, not even the checkpoint; the runner reads the event
// again and decides it once.
func TestBatchCommitsAtomically(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// The command is held until the first batch has failed, so what is
	// looked at below is only what the failed batch left.
	held := make(chan struct{})
	assignFn := b.spec.Commands["test.assign"]
	b.spec.Commands["test.assign"] = func(ctx context.Context, tenant domain.TenantID, payload json.RawMessage, key string) (json.RawMessage, error) {
		select {
		case <-held:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return assignFn(ctx, tenant, payload, key)
	}
	// Every batch fails until the checks below are done: the runner
	// retries a failed batch after a backoff, which a slow check must not
	// race with.
	var failed atomic.Int32
	release := make(chan struct{})
	checked := make(chan struct{})
	r := b.runner(RunnerConfig{})
	r.cfg.hooks = &testHooks{beforeCommit: func(what string) error {
		if what != "batch" {
			return nil
		}
		select {
		case <-checked:
			return nil
		default:
		}
		if failed.Add(1) == 1 {
			close(release)
		}
		return errors.New("injected failure before commit")
	}}
	res := b.append("t-a", ticketOpened{ID: "k1"})
	b.start(r)
	<-release
	// The failed transaction has rolled back once Status says error.
	b.eventually("the runner to report the failed batch", func() bool { return r.Status().State == StateError })
	for _, c := range []struct{ what, sql string }{
		{"instances", `SELECT count(*) FROM process_instances`},
		{"steps", `SELECT count(*) FROM process_steps`},
		{"deadlines", `SELECT count(*) FROM process_deadlines`},
		{"history", `SELECT count(*) FROM process_history`},
		{"checkpoint moved", `SELECT count(*) FROM projection_checkpoints WHERE projection = 'ticket' AND pos_major > 0`},
	} {
		if n := b.count(c.sql); n != 0 {
			t.Errorf("after the failed batch: %s = %d, want 0", c.what, n)
		}
	}
	close(checked)
	close(held)
	d := b.statusIs("t-a", "k1", "waiting")
	if got := strings.Join(historyKinds(d), ","); got != "event,outcome,outcome" {
		t.Errorf("history = %s: the event was not decided exactly once", got)
	}
	if len(d.Steps) != 2 || len(d.Deadlines) != 1 || d.Deadlines[0].Status != "pending" {
		t.Errorf("steps %+v deadlines %+v", d.Steps, d.Deadlines)
	}
	if n := b.count(`SELECT count(*) FROM projection_checkpoints WHERE projection = 'ticket' AND (pos_major, pos_minor) >= ($1::numeric, $2::numeric)`,
		u64(res.Position.Major), u64(res.Position.Minor)); n != 1 {
		t.Errorf("checkpoint is not past the event")
	}
	if r.Status().State != StateRunning {
		t.Errorf("runner state %s after recovering", r.Status().State)
	}
}
