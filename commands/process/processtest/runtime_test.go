package processtest_test

import (
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-es/strata/commands/process"
	"github.com/strata-es/strata/commands/process/processtest"
	"github.com/strata-es/strata/domain"
)

func TestMain(m *testing.M) { processtest.Main(m) }

// ticketRuntime runs the toy process over the kit's runtime with assign
// as its command and notify as its port.
func ticketRuntime(t testing.TB, cfg processtest.RuntimeConfig, assign, notify processtest.Answer) *processtest.Runtime {
	t.Helper()
	cfg.Registry = registry
	rt := processtest.NewRuntime(t, cfg)
	mgr, err := process.New(ticketDefinition)
	if err != nil {
		t.Fatal(err)
	}
	rt.Start(process.Spec{Manager: mgr,
		Commands: map[string]process.CommandFunc{"test.assign": assign.Command()},
		Ports:    map[string]process.Port{"notifier": notify.Port()}})
	return rt
}

func stepStatus(d process.InstanceDetail) map[string]string {
	out := map[string]string{}
	for _, s := range d.Steps {
		out[s.Step] = s.Status
	}
	return out
}

// The runtime decides the appended event, dispatches the command and then
// the intent its outcome issues, each under its step's key, and leaves
// the deadline alone until the test moves the clock past it.
func TestRuntime_DecidesDispatchesAndFires(t *testing.T) {
	t.Parallel()
	rt := ticketRuntime(t, processtest.RuntimeConfig{}, processtest.Reply(map[string]int{"version": 1}), processtest.Reply(nil))
	rt.Append("t-a", "ticket-k1", opened{ID: "k1"})

	d := rt.Instance("t-a", "k1")
	if d.Status != "waiting" || len(d.Deadlines) != 1 || d.Deadlines[0].Status != "pending" {
		t.Fatalf("after the opening: %s, deadlines %+v; want waiting with the escalation pending", d.Status, d.Deadlines)
	}
	if got := stepStatus(d); got["assign"] != "done" || got["notify"] != "done" {
		t.Errorf("steps %v, want both done", got)
	}
	calls := rt.Calls()
	if len(calls) != 2 || calls[0].Name != "test.assign" || calls[0].Kind != process.StepCommand || calls[1].Name != "notifier" ||
		calls[0].Key != process.StepKey("ticket", "k1", "assign") || calls[1].Key != process.StepKey("ticket", "k1", "notify") ||
		calls[0].Tenant != "t-a" || string(calls[0].Payload) != `{"ticket": "k1"}` {
		t.Errorf("calls %+v, want test.assign then notifier under their step keys", calls)
	}

	// Half the timeout: nothing fires.
	rt.Advance(30 * time.Minute)
	if d := rt.Instance("t-a", "k1"); d.Status != "waiting" {
		t.Errorf("half an hour later: %s, want waiting", d.Status)
	}
	if !rt.AdvanceToDeadline() {
		t.Fatal("no pending deadline to advance to")
	}
	d = rt.Instance("t-a", "k1")
	if d.Status != "escalated" || !d.Done || d.Deadlines[0].Status != "fired" || d.History[len(d.History)-1].Kind != "timeout" {
		t.Errorf("after the deadline: %s (done %v), deadline %+v", d.Status, d.Done, d.Deadlines[0])
	}
	if rt.AdvanceToDeadline() {
		t.Error("a deadline is still pending after the only one fired")
	}
}

// A transient failure is retried when the clock reaches the retry, not
// before: the test sees the step pending in between.
func TestRuntime_RetriesWhenTheClockMoves(t *testing.T) {
	t.Parallel()
	down := processtest.Script(processtest.Fail(errors.New("notifier: 503")), processtest.Reply(nil))
	rt := ticketRuntime(t, processtest.RuntimeConfig{}, processtest.Reply(nil), down)
	rt.Append("t-a", "ticket-k1", opened{ID: "k1"})
	rt.Settle()
	d := rt.Instance("t-a", "k1")
	if d.Status != "notifying" || stepStatus(d)["notify"] != "pending" {
		t.Fatalf("after a failed notification: %s, steps %v; want notifying with notify pending", d.Status, stepStatus(d))
	}
	if !rt.AdvanceToRetry() {
		t.Fatal("no step waits for a retry")
	}
	if d := rt.Instance("t-a", "k1"); d.Status != "waiting" {
		t.Errorf("after the retry: %s, want waiting", d.Status)
	}
	var keys []string
	for _, c := range rt.Calls() {
		if c.Name == "notifier" {
			keys = append(keys, c.Key)
		}
	}
	if len(keys) != 2 || keys[0] != keys[1] {
		t.Errorf("notifier calls under %v, want two under one key", keys)
	}
	if rt.AdvanceToRetry() {
		t.Error("a step still waits for a retry")
	}
}

// Tenants are apart: the same ticket of two tenants is two instances.
func TestRuntime_Tenants(t *testing.T) {
	t.Parallel()
	rt := ticketRuntime(t, processtest.RuntimeConfig{}, processtest.Reply(nil), processtest.Refuse("nobody listens"))
	rt.Append("t-a", "ticket-k1", opened{ID: "k1"})
	rt.Append("t-b", "ticket-k1", opened{ID: "k1"}, closed{ID: "k1"})
	if a, b := rt.Instance("t-a", "k1"), rt.Instance("t-b", "k1"); a.Status != "declined" || b.Status != "closed" {
		t.Errorf("t-a %s, t-b %s; want declined and closed", a.Status, b.Status)
	}
}

// Redispatch executes each step again under its key and fails the test
// when the second answer differs: a command that is not idempotent.
func TestRuntime_Redispatch(t *testing.T) {
	t.Parallel()
	t.Run("idempotent", func(t *testing.T) {
		t.Parallel()
		rt := ticketRuntime(t, processtest.RuntimeConfig{Redispatch: true}, processtest.Reply(map[string]int{"version": 1}), processtest.Reply(nil))
		rt.Append("t-a", "ticket-k1", opened{ID: "k1"})
		again := 0
		for _, c := range rt.Calls() {
			if c.Again {
				again++
			}
		}
		if again != 2 {
			t.Errorf("%d executions again, want one per step (2)", again)
		}
	})
	t.Run("not idempotent", func(t *testing.T) {
		t.Parallel()
		var n atomic.Int64
		counting := processtest.Answer(func(domain.TenantID, string, json.RawMessage) (json.RawMessage, error) {
			return json.Marshal(map[string]int64{"version": n.Add(1)})
		})
		got := failures(t, func(tb testing.TB) {
			rt := ticketRuntime(tb, processtest.RuntimeConfig{Redispatch: true}, counting, processtest.Reply(nil))
			rt.Append("t-a", "ticket-k1", opened{ID: "k1"})
		})
		if !strings.Contains(got, `command test.assign under pm:ticket:k1:assign executed again answered {"version":2}`) {
			t.Errorf("the kit reported %q, want the command's second answer", got)
		}
	})
}
