package processtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/commands"
	"github.com/strata-es/strata/commands/commandapi"
	"github.com/strata-es/strata/commands/process"
	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/projections"
)

// RuntimeConfig is what a Runtime stands up.
type RuntimeConfig struct {
	// Registry decodes the log for the runner and encodes what Append and
	// the handlers made over Deps write. Required: the codecs of every
	// event the process consumes (and its commands' aggregates append).
	Registry *event.Registry
	// Lines are the migration lines the test needs besides the engine's
	// (none when every command is a fake).
	Lines []db.Line
	// Start is where the Clock starts (default: the wall clock's time when
	// NewRuntime runs). An event's Input.At is its recording time, which is
	// the database's clock, not the Clock: starting at the wall clock keeps
	// the two within the test's run time of each other, and
	// AdvanceToDeadline fires a deadline set from an event's At without a
	// margin to guess.
	Start time.Time
	// Runner tunes the runner (Attempts, InitialBackoff, MaxBackoff,
	// StepTimeout, Concurrency, BatchSize, OnStep, OnFire). Its Registry,
	// Now and Wake are the kit's; Poll and LeaseRetry default to 20ms and
	// Logger to a silent one.
	Runner process.RunnerConfig
	// Redispatch executes every step once more under its key when it has
	// a definite answer, as the runtime does when it crashed between a
	// step's execution and the recording of its outcome, and fails the
	// test when the two answers disagree: one succeeded and the other not,
	// or a command's results differ. It holds the bound commands and the
	// ports to the idempotency their keys promise.
	Redispatch bool
	// Timeout bounds each wait of Start and Settle (default 30s).
	Timeout time.Duration
}

// Call is one execution of a step by the runtime (or, with Redispatch,
// by the kit again).
type Call struct {
	Kind    process.StepKind
	Name    string // the command's or the port's
	Tenant  domain.TenantID
	Key     string // the step's idempotency key (process.StepKey)
	Payload json.RawMessage
	Result  json.RawMessage
	Err     error
	// At is the Clock's time of the execution.
	At time.Time
	// Again marks the kit's re-execution (Redispatch).
	Again bool
}

// Runtime is one process's real runtime — the runner with its dispatcher
// and deadlines — over a fresh PostgreSQL database of its own, with a
// Clock the test moves. Make it with NewRuntime, make the process's Spec
// (its commands bound over Deps, or fakes made with Answer), Start it,
// then drive it:
//
//	rt := processtest.NewRuntime(t, processtest.RuntimeConfig{Registry: reg})
//	rt.Start(process.Spec{Manager: mgr, Commands: map[string]process.CommandFunc{
//		"test.assign": processtest.Reply(nil).Command()}})
//	rt.Append("t-a", "ticket-1", opened)   // and settles
//	rt.Advance(time.Hour)                  // fires what is due, settles
//	d := rt.Instance("t-a", "1")           // state, history, steps, deadlines
//
// Nothing moves the Clock but the test: a deadline fires, and a step that
// failed transiently is tried again, only once the test moves the Clock
// past its time (Advance, AdvanceToDeadline, AdvanceToRetry).
type Runtime struct {
	// Clock is the runner's and the handlers' clock.
	Clock *Clock
	// Store is the event store over the database (the runner's log).
	Store *postgres.Store
	// App and Projector are pools running as db.RoleApp and
	// db.RoleProjector; AdminURL connects as a superuser (inspection
	// only).
	App, Projector *pgxpool.Pool
	AdminURL       string

	t      testing.TB
	ctx    context.Context
	cfg    RuntimeConfig
	wake   *projections.Signal
	runner *process.Runner
	name   string

	adminMu sync.Mutex
	admin   *pgx.Conn

	mu    sync.Mutex
	calls []Call
}

// NewRuntime migrates a fresh database (the engine's line and cfg.Lines)
// and returns the runtime over it, not started.
func NewRuntime(t testing.TB, cfg RuntimeConfig) *Runtime {
	t.Helper()
	if cfg.Registry == nil {
		t.Fatal("processtest: RuntimeConfig.Registry is required")
	}
	if cfg.Start.IsZero() {
		// Microseconds: what PostgreSQL keeps of a time.
		cfg.Start = time.Now().UTC().Truncate(time.Microsecond)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	d := testdb.New(t, cfg.Lines...)
	admin, err := pgx.Connect(ctx, d.AdminURL)
	if err != nil {
		t.Fatalf("processtest: connect: %v", err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })
	if _, err := admin.Exec(ctx, "SET search_path = "+db.Schema); err != nil {
		t.Fatalf("processtest: %v", err)
	}
	return &Runtime{Clock: NewClock(cfg.Start), Store: postgres.New(d.App, d.Projector), App: d.App, Projector: d.Projector,
		AdminURL: d.AdminURL, t: t, ctx: ctx, cfg: cfg, wake: projections.NewSignal(), admin: admin}
}

// Deps are the dependencies of command handlers over the runtime's store,
// deciding at the Clock: what a module's Processes(cfg, deps) binds its
// commands with.
func (r *Runtime) Deps() commandapi.Deps {
	return commandapi.Deps{Store: r.Store, Idempotency: r.Store, Config: commands.Config{Registry: r.cfg.Registry, Now: r.Clock.Now}}
}

// Start runs spec's process until the test ends and waits until its
// runner holds the lease. Every command and port of spec is recorded
// (Calls). It returns the runner (Status).
func (r *Runtime) Start(spec process.Spec) *process.Runner {
	r.t.Helper()
	if r.runner != nil {
		r.t.Fatal("processtest: Start called twice")
	}
	if spec.Manager == nil {
		r.t.Fatal("processtest: the Spec has no Manager")
	}
	r.name = spec.Manager.Name()
	wrapped := process.Spec{Manager: spec.Manager, Commands: map[string]process.CommandFunc{}, Ports: map[string]process.Port{}}
	for name, f := range spec.Commands {
		if f == nil {
			wrapped.Commands[name] = nil
			continue
		}
		exec := r.recorded(process.StepCommand, name, func(ctx context.Context, tenant domain.TenantID, key string, payload json.RawMessage) (json.RawMessage, error) {
			return f(ctx, tenant, payload, key)
		})
		wrapped.Commands[name] = func(ctx context.Context, tenant domain.TenantID, payload json.RawMessage, key string) (json.RawMessage, error) {
			return exec(ctx, tenant, key, payload)
		}
	}
	for name, p := range spec.Ports {
		if p == nil {
			wrapped.Ports[name] = nil
			continue
		}
		wrapped.Ports[name] = process.PortFunc(r.recorded(process.StepIntent, name, p.Execute))
	}
	rc := r.cfg.Runner
	rc.Registry, rc.Now, rc.Wake = r.cfg.Registry, r.Clock.Now, r.wake
	if rc.Poll == 0 {
		rc.Poll = 20 * time.Millisecond
	}
	if rc.LeaseRetry == 0 {
		rc.LeaseRetry = 20 * time.Millisecond
	}
	if rc.Logger == nil {
		rc.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	runner, err := process.NewRunner(wrapped, r.Store, r.Projector, rc)
	if err != nil {
		r.t.Fatalf("processtest: %v", err)
	}
	r.runner = runner
	ctx, cancel := context.WithCancel(r.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = runner.Run(ctx)
	}()
	r.t.Cleanup(func() { cancel(); <-done })
	r.waitFor("the runner to take its lease", func() (bool, error) { return runner.Status().State == process.StateRunning, nil })
	return runner
}

type execFunc func(ctx context.Context, tenant domain.TenantID, key string, payload json.RawMessage) (json.RawMessage, error)

// recorded wraps exec so that every execution is recorded and, with
// Redispatch, repeated once it is definite.
func (r *Runtime) recorded(kind process.StepKind, name string, exec execFunc) execFunc {
	return func(ctx context.Context, tenant domain.TenantID, key string, payload json.RawMessage) (json.RawMessage, error) {
		call := Call{Kind: kind, Name: name, Tenant: tenant, Key: key, Payload: payload}
		run := func(again bool) (json.RawMessage, error) {
			c := call
			c.At, c.Again = r.Clock.Now(), again
			c.Result, c.Err = exec(ctx, tenant, key, payload)
			r.mu.Lock()
			r.calls = append(r.calls, c)
			r.mu.Unlock()
			return c.Result, c.Err
		}
		res, err := run(false)
		if !r.cfg.Redispatch || err != nil && !process.IsDefinite(err) {
			return res, err
		}
		for attempt := 1; ctx.Err() == nil; attempt++ {
			again, err2 := run(true)
			if err2 != nil && !process.IsDefinite(err2) {
				if attempt < 30 {
					continue
				}
				r.t.Errorf("processtest: %s %s under %s, executed again, failed %d times: %v", kind, name, key, attempt, err2)
				break
			}
			if (err == nil) != (err2 == nil) || kind == process.StepCommand && err == nil && string(res) != string(again) {
				r.t.Errorf("processtest: %s %s under %s executed again answered %s (error %v); first %s (error %v)", kind, name, key, again, err2, res, err)
			}
			break
		}
		return res, err
	}
}

// Append appends payloads to stream for tenant (one transaction, after
// whatever the stream holds) and settles.
func (r *Runtime) Append(tenant domain.TenantID, stream string, payloads ...event.Payload) event.Position {
	r.t.Helper()
	evs := make([]eventstore.NewEvent, len(payloads))
	for i, p := range payloads {
		typ, v, data, err := r.cfg.Registry.Encode(p)
		if err != nil {
			r.t.Fatalf("processtest: append %T: %v", p, err)
		}
		evs[i] = eventstore.NewEvent{ID: uuid.NewString(), Type: typ, SchemaVersion: v, Data: data}
	}
	res, err := r.Store.Append(r.ctx, eventstore.AppendRequest{Tenant: string(tenant), Stream: stream, Expected: eventstore.Any, Events: evs})
	if err != nil {
		r.t.Fatalf("processtest: append to %s: %v", stream, err)
	}
	r.Settle()
	return res.Position
}

// Settle waits until the runner is quiet at the Clock's time: it has
// decided every event of the log, no step is executing or due, and no
// deadline is due. What waits for a later time (a step's retry, a
// deadline) waits for the test to move the Clock. It fails the test when
// the runner fails on the log (an error that is not an instance's: it
// would retry forever) or does not settle within the Timeout.
func (r *Runtime) Settle() {
	r.t.Helper()
	if r.runner == nil {
		r.t.Fatal("processtest: Settle before Start")
	}
	r.waitFor("the runner to settle", r.settled)
}

// settled reports the runner quiet. The order of the reads matters: the
// due work is read before and after the log's head and the checkpoint, so
// that a step issued by a decision committed meanwhile is seen; an event a
// step's command appended is committed before the step's outcome is
// recorded, so it is in the head once the step is no longer due.
func (r *Runtime) settled() (bool, error) {
	r.wake.Fire()
	st := r.runner.Status()
	if st.State == process.StateError {
		return false, fmt.Errorf("the runner fails on the log: %s", st.LastError)
	}
	if st.State != process.StateRunning || st.InFlight > 0 {
		return false, nil
	}
	before, err := r.due()
	if err != nil || before > 0 {
		return false, err
	}
	head, err := r.committedHead()
	if err != nil {
		return false, err
	}
	st = r.runner.Status()
	if st.Checkpoint.Less(head) || st.InFlight > 0 {
		return false, nil
	}
	after, err := r.due()
	return err == nil && after == 0, err
}

// committedHead is the newest committed event's position. Not the store's
// Head, which stops below the oldest transaction open anywhere in the
// cluster (other tests' too): the runner waits for such a transaction
// before it reads past it (ARCHITECTURE decision 1), and a settled runner
// has decided every committed event.
func (r *Runtime) committedHead() (event.Position, error) {
	r.adminMu.Lock()
	defer r.adminMu.Unlock()
	var major, minor string
	// Ordered by the columns, not by the text output columns of the same
	// names: "998" sorts after "1010".
	err := r.admin.QueryRow(r.ctx, `SELECT tx_id::text AS tx_text, position::text AS pos_text FROM events
ORDER BY events.tx_id DESC, events.position DESC LIMIT 1`).Scan(&major, &minor)
	if errors.Is(err, pgx.ErrNoRows) {
		return event.Position{}, nil
	}
	if err != nil {
		return event.Position{}, fmt.Errorf("read the log's head: %w", err)
	}
	return event.ParseColumns(major, minor)
}

// due counts the process's steps and deadlines due at the Clock's time.
func (r *Runtime) due() (int64, error) {
	r.adminMu.Lock()
	defer r.adminMu.Unlock()
	var n int64
	err := r.admin.QueryRow(r.ctx, `SELECT
  (SELECT count(*) FROM process_steps WHERE process = $1 AND status = 'pending' AND next_attempt_at <= $2)
+ (SELECT count(*) FROM process_deadlines WHERE process = $1 AND status = 'pending' AND due_at <= $2)`, r.name, r.Clock.Now()).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("read the due work: %w", err)
	}
	return n, nil
}

// Advance moves the Clock d forward and settles: the deadlines due by
// then fire, the steps whose retry is due are tried again.
func (r *Runtime) Advance(d time.Duration) {
	r.t.Helper()
	r.Clock.Advance(d)
	r.Settle()
}

// AdvanceToRetry moves the Clock to the earliest retry of a step that
// failed transiently and settles; false, the Clock unmoved, when no step
// waits for a retry. Deadlines due by then fire as well. Loop on it to run
// a flaky dependency's steps to their definite answers:
//
//	for rt.AdvanceToRetry() {
//	}
func (r *Runtime) AdvanceToRetry() bool {
	r.t.Helper()
	return r.advanceTo(`SELECT min(next_attempt_at) FROM process_steps WHERE process = $1 AND status = 'pending'`)
}

// AdvanceToDeadline moves the Clock to the earliest pending deadline and
// settles (it fires, with whatever its decision issues); false, the Clock
// unmoved, when no deadline is pending.
func (r *Runtime) AdvanceToDeadline() bool {
	r.t.Helper()
	return r.advanceTo(`SELECT min(due_at) FROM process_deadlines WHERE process = $1 AND status = 'pending'`)
}

// advanceTo settles, moves the Clock to the time query finds (when it is
// later) and settles again.
func (r *Runtime) advanceTo(query string) bool {
	r.t.Helper()
	r.Settle()
	r.adminMu.Lock()
	var next *time.Time
	err := r.admin.QueryRow(r.ctx, query, r.name).Scan(&next)
	r.adminMu.Unlock()
	if err != nil {
		r.t.Fatalf("processtest: %v", err)
	}
	if next == nil {
		return false
	}
	if next.After(r.Clock.Now()) {
		r.Clock.Set(*next)
	}
	r.Settle()
	return true
}

// Instance reads one instance as an operator does: its status, state,
// history, steps and deadlines. It fails the test when there is none.
func (r *Runtime) Instance(tenant domain.TenantID, id string) process.InstanceDetail {
	r.t.Helper()
	d, err := process.ReadInstance(r.ctx, r.Projector, string(tenant), r.name, id)
	if err != nil {
		r.t.Fatalf("processtest: %v", err)
	}
	return d
}

// Calls returns every execution of a step so far, in order.
func (r *Runtime) Calls() []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Call(nil), r.calls...)
}

// waitFor polls cond until it holds, fails or the Timeout passes.
func (r *Runtime) waitFor(what string, cond func() (bool, error)) {
	r.t.Helper()
	deadline := time.Now().Add(r.cfg.Timeout)
	for {
		ok, err := cond()
		if err != nil && !errors.Is(err, context.Canceled) {
			r.t.Fatalf("processtest: waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			st := process.RunnerStatus{}
			if r.runner != nil {
				st = r.runner.Status()
			}
			r.t.Fatalf("processtest: gave up waiting %s for %s (runner %s at %s, %d in flight)", r.cfg.Timeout, what, st.State, st.Checkpoint, st.InFlight)
		}
		select {
		case <-r.ctx.Done():
			r.t.Fatalf("processtest: waiting for %s: %v", what, r.ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}
