package process

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/internal/pgsession"
	"github.com/strata-es/strata/projections"
)

// Failpoints of the runtime (internal/failpoint, armed through
// STRATA_FAILPOINTS): the crash tests kill a runner there.
const (
	// FailpointAfterExecute is between a step's execution (the command
	// appended, the provider answered) and the recording of its outcome.
	FailpointAfterExecute = "process.after-execute"
	// FailpointBeforeCommit is between a batch's writes and its COMMIT.
	FailpointBeforeCommit = "process.before-commit"
)

// State is what a runner is doing.
type State string

const (
	StateStarting State = "starting" // connecting
	StateRunning  State = "running"  // holds the lease: decides, dispatches, fires
	StateStandby  State = "standby"  // another session holds the lease
	StatePaused   State = "paused"   // an operator's retry or discard holds the process
	StateError    State = "error"    // holds the lease, but the log's next batch fails; retried
	StateStopped  State = "stopped"
)

// RunnerStatus is a runner's view of itself.
type RunnerStatus struct {
	Process    string         `json:"process"`
	State      State          `json:"state"`
	Checkpoint event.Position `json:"-"`
	Position   string         `json:"position"`
	InFlight   int            `json:"in_flight"`
	LastError  string         `json:"last_error,omitempty"`
	ErrorAt    time.Time      `json:"error_at,omitzero"`
}

// errYield: a tool asked for the process (AcquireExclusive); the runner
// gives its lease back.
var errYield = fmt.Errorf("a tool asked for the process: %w", pgsession.ErrYield)

// errCheckpointMoved: the checkpoint is not where this runner left it
// (another session wrongly believed it held the lease too).
var errCheckpointMoved = errors.New("checkpoint moved by another runner")

// Runner runs one process manager: it decides the log's events for the
// process's instances, dispatches the steps they issue, fires their
// deadlines and decides the outcomes and timeouts, under a lease that
// makes it the only active runner of the process in every strata process
// sharing the database. Run must not be called concurrently on one Runner;
// Status may be called anytime.
type Runner struct {
	spec   Spec
	rt     runtime
	name   string
	log    eventstore.Log
	pool   *pgxpool.Pool
	cfg    RunnerConfig
	logger *slog.Logger
	w      *writer

	handles map[string]bool

	mu     sync.Mutex
	status RunnerStatus

	kick chan struct{} // work may be due: a decision added steps, a step finished

	// Owned by the goroutine in Run.
	checkpoint event.Position
	ledger     *projections.LedgerBook // the checkpoint's completeness ledger
	work       map[string]bool         // tenants that may have pending steps or deadlines
	served     uint64                  // steps dispatched (the clock of lastServed)
	lastServed map[string]uint64       // by tenant: when its last step was dispatched (dispatchFair)

	inflightMu sync.Mutex
	inflight   map[stepID]bool
	finished   map[stepID]uint64 // executions finished, by the epoch of the look at the outbox then
	epoch      uint64
	workers    sync.WaitGroup
}

type stepID struct{ tenant, instance, step string }

// NewRunner returns a runner of spec reading log. pool must run as
// db.RoleProjector; the runner takes one connection out of it for as long
// as it holds the lease and uses others to record outcomes. Commands go
// out through spec.Commands, intents through spec.Ports.
func NewRunner(spec Spec, log eventstore.Log, pool *pgxpool.Pool, cfg RunnerConfig) (*Runner, error) {
	cfg.setDefaults()
	rt, err := asRuntime(spec.Manager)
	if err != nil {
		return nil, err
	}
	name := rt.Name()
	var errs []error
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	if log == nil || pool == nil {
		errs = append(errs, errors.New("the event log and the projector pool are required"))
	}
	for n, f := range spec.Commands {
		if n == "" || f == nil {
			errs = append(errs, fmt.Errorf("command %q: a name and a CommandFunc are required", n))
		}
	}
	for n, p := range spec.Ports {
		if f, ok := p.(PortFunc); n == "" || p == nil || ok && f == nil {
			errs = append(errs, fmt.Errorf("port %q: a name and a Port are required", n))
		}
	}
	handles := map[string]bool{}
	for _, t := range rt.EventTypes() {
		handles[t] = true
		if cfg.Registry != nil && !cfg.Registry.Has(t) {
			errs = append(errs, fmt.Errorf("event type %s has no codec in the registry", t))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("process %s: %w", name, err)
	}
	r := &Runner{
		spec:       spec,
		rt:         rt,
		name:       name,
		log:        log,
		pool:       pool,
		cfg:        cfg,
		logger:     cfg.Logger.With("process", name),
		handles:    handles,
		status:     RunnerStatus{Process: name, State: StateStopped},
		kick:       make(chan struct{}, 1),
		inflight:   map[stepID]bool{},
		finished:   map[stepID]uint64{},
		lastServed: map[string]uint64{},
	}
	r.w = &writer{m: rt, name: name, now: cfg.Now, known: r.known}
	return r, nil
}

func (r *Runner) known(kind StepKind, name string) bool {
	if kind == StepCommand {
		return r.spec.Commands[name] != nil
	}
	return r.spec.Ports[name] != nil
}

// Name is the process's name: its checkpoint and lease key.
func (r *Runner) Name() string { return r.name }

// Status returns what the runner is doing.
func (r *Runner) Status() RunnerStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.status
	s.Position = s.Checkpoint.String()
	r.inflightMu.Lock()
	s.InFlight = len(r.inflight)
	r.inflightMu.Unlock()
	return s
}

func (r *Runner) setState(s State) {
	r.mu.Lock()
	prev := r.status.State
	r.status.State = s
	r.mu.Unlock()
	if prev != s {
		r.logger.Debug("process runner state", "from", string(prev), "to", string(s))
	}
}

func (r *Runner) wakeUp() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Run runs the process until ctx ends: it takes the lease (or waits as a
// standby and takes over when the leader's session ends), then decides,
// dispatches and fires as work arrives. A tool that takes the process
// (projections.AcquireExclusive under the process's name) makes it finish
// what it is doing, yield and wait. It returns nil when ctx ends; failures
// are in Status and the log.
func (r *Runner) Run(ctx context.Context) error {
	defer r.setState(StateStopped)
	r.setState(StateStarting)
	l := pgsession.Leader{Lease: pgsession.ProjectionLease, Name: r.name, Kind: "process runner",
		Connect: func(ctx context.Context) (*pgx.Conn, error) {
			c, err := r.pool.Acquire(ctx)
			if err != nil {
				return nil, err
			}
			return c.Hijack(), nil // the lease lives with the session: never back to the pool
		},
		Paused: func(ctx context.Context, conn *pgx.Conn) (bool, error) {
			return projections.PauseRequested(ctx, conn, r.name)
		},
		PauseRetry: min(r.cfg.LeaseRetry, 200*time.Millisecond), Retry: r.cfg.LeaseRetry, Lead: r.lead, Logger: r.logger,
		OnState: func(s pgsession.LeaderState) { r.setState(leaderStates[s]) }}
	return l.Run(ctx)
}

// leaderStates maps the states between leaderships onto a runner's.
var leaderStates = map[pgsession.LeaderState]State{
	pgsession.LeaderStarting: StateStarting, pgsession.LeaderStandby: StateStandby, pgsession.LeaderPaused: StatePaused}

// lead works while this session holds the lease. The dispatcher's
// executions in flight are cancelled and waited for before it returns, so
// no step of this leadership is executed after the lease is given back.
func (r *Runner) lead(ctx context.Context, conn *pgx.Conn) error {
	dctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		r.workers.Wait()
	}()
	if err := r.begin(ctx, conn); err != nil {
		return err
	}
	r.mu.Lock()
	r.status.State, r.status.Checkpoint, r.status.LastError = StateRunning, r.checkpoint, ""
	r.mu.Unlock()
	r.logger.Info("process runner active", "position", r.checkpoint.String())

	var (
		errDelay    time.Duration
		eventsAfter time.Time     // a failed batch is retried from then on
		workDelay   time.Duration // after a failed look at the outbox and deadlines
		// After a wake-up the log is read again soon, backing off towards
		// Poll: the events it announced may not be visible yet, because an
		// older transaction is still open somewhere in the cluster (the
		// log never skips it, ARCHITECTURE decision 1), and nothing else
		// would wake the runner when it ends.
		// A new leader chases too: a wake-up may have come before it
		// listened.
		chasing = true
		repoll  time.Duration
	)
	for {
		var wake <-chan struct{}
		if r.cfg.Wake != nil {
			wake = r.cfg.Wake.C() // before reading: a wake-up during the read is not lost
		}
		if ctx.Err() != nil {
			r.stopped(conn)
			return nil
		}
		more := false
		if time.Now().After(eventsAfter) {
			n, err := r.decideBatch(ctx, conn)
			switch {
			case errors.Is(err, errYield):
				return err
			case err != nil:
				if conn.IsClosed() || db.IsUnavailable(err) || errors.Is(err, errCheckpointMoved) {
					return err
				}
				errDelay = min(max(2*errDelay, 500*time.Millisecond), time.Minute)
				eventsAfter = time.Now().Add(errDelay)
				r.fail(ctx, conn, err, errDelay)
			default:
				if errDelay > 0 {
					errDelay = 0
					r.setState(StateRunning)
					r.logger.Info("process runner recovered", "position", r.checkpoint.String())
				}
				more = n == r.cfg.BatchSize
			}
		}
		next, busy, err := r.work1(ctx, dctx, conn)
		if errors.Is(err, errYield) {
			return err
		}
		if err != nil {
			if conn.IsClosed() || db.IsUnavailable(err) {
				return err
			}
			workDelay = min(max(2*workDelay, 50*time.Millisecond), 5*time.Second)
			r.logger.Warn("process runner: outbox or deadlines failed; retrying", "error", err.Error(), "retry_in", workDelay.String())
		} else {
			workDelay = 0
		}
		if more || busy {
			continue
		}
		timeout := r.cfg.Poll
		if chasing {
			repoll = max(2*repoll, 2*time.Millisecond)
			if repoll < r.cfg.Poll {
				timeout = repoll
			} else {
				chasing, repoll = false, 0
			}
		}
		if !next.IsZero() {
			timeout = min(timeout, max(next.Sub(r.cfg.Now()), time.Millisecond))
		}
		if workDelay > 0 {
			timeout = min(timeout, workDelay)
		}
		if !eventsAfter.IsZero() && time.Now().Before(eventsAfter) {
			timeout = min(timeout, max(time.Until(eventsAfter), time.Millisecond))
		}
		timer := time.NewTimer(timeout)
		select {
		case <-ctx.Done():
			timer.Stop()
			r.stopped(conn)
			return nil
		case <-wake:
			chasing, repoll = true, 0
		case <-r.kick:
		case <-timer.C:
			if chasing {
				break
			}
			// An idle session may have died unnoticed, and a tool may be
			// waiting for the lease.
			pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
			paused, err := projections.PauseRequested(pctx, conn, r.name)
			pcancel()
			if err != nil && ctx.Err() == nil {
				return fmt.Errorf("process %s: lease session: %w", r.name, err)
			}
			if paused {
				return errYield
			}
		}
		timer.Stop()
	}
}

// begin loads the checkpoint of a session that just took the lease and
// the tenants that may have work: every tenant of the log (the first look
// at the outbox and the deadlines drops those that have none).
func (r *Runner) begin(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, `INSERT INTO projection_checkpoints (projection) VALUES ($1) ON CONFLICT (projection) DO NOTHING`, r.name); err != nil {
		return fmt.Errorf("create checkpoint of %s: %w", r.name, err)
	}
	var major, minor, generation string
	if err := conn.QueryRow(ctx, `UPDATE projection_checkpoints SET status = 'running', updated_at = now()
WHERE projection = $1 RETURNING pos_major::text, pos_minor::text, generation::text`, r.name).Scan(&major, &minor, &generation); err != nil {
		return fmt.Errorf("load checkpoint of %s: %w", r.name, err)
	}
	pos, err := event.ParseColumns(major, minor)
	if err != nil {
		return err
	}
	r.checkpoint = pos
	r.ledger = projections.NewLedgerBook(r.name, generation)
	tenants, err := projections.Tenants(ctx, conn)
	if err != nil {
		return err
	}
	r.work = map[string]bool{}
	for _, t := range tenants {
		r.work[t] = true
	}
	return nil
}

func (r *Runner) fail(ctx context.Context, conn *pgx.Conn, err error, retryIn time.Duration) {
	r.mu.Lock()
	first := r.status.State != StateError || r.status.LastError != err.Error()
	r.status.State, r.status.LastError, r.status.ErrorAt = StateError, err.Error(), time.Now()
	r.mu.Unlock()
	if first {
		r.logger.Error("process stopped at an event it cannot decide; retrying with backoff, never skipping",
			"error", err.Error(), "position", r.checkpoint.String(), "retry_in", retryIn.String())
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if rerr := projections.RecordCheckpointError(rctx, conn, r.name, err); rerr != nil {
		r.logger.Warn("cannot record the process's error", "error", rerr.Error())
	}
}

func (r *Runner) stopped(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = projections.RecordCheckpointStopped(ctx, conn, r.name)
	r.logger.Info("process runner stopped", "position", r.checkpoint.String())
}

func (r *Runner) hook(what string) error {
	if h := r.cfg.hooks; h != nil && h.beforeCommit != nil {
		return h.beforeCommit(what)
	}
	return nil
}

// sortedTenants returns the tenants that may have work, in order.
func (r *Runner) sortedTenants() []string {
	out := make([]string, 0, len(r.work))
	for t := range r.work {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
