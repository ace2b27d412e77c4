package projections

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/internal/pgsession"
)

// FailpointBeforeCommit names the failpoint between a batch's read-model
// writes (all sent and acknowledged) and its COMMIT.
const FailpointBeforeCommit = "projector.before-commit"

// State is what a runner is doing.
type State string

// Runner states. A projection's status on the admin route is one of
// running, standby, error or stopped.
const (
	StateStarting State = "starting" // connecting to the database
	StateRunning  State = "running"  // holds the lease and applies events
	StateStandby  State = "standby"  // another session holds the lease; retrying
	StateError    State = "error"    // holds the lease, but the next batch fails; retried with backoff, never skipped
	StatePaused   State = "paused"   // a tool (rebuild swap, dead-letter retry) holds the projection; resumes after it
	// StateAheadOfLog: the checkpoint is beyond the end of the log (the
	// read models were restored from a later point than the events); the
	// runner applies nothing until a full rebuild replaces the checkpoint.
	StateAheadOfLog State = "ahead_of_log"
	StateStopped    State = "stopped"
)

// RunnerStatus is a runner's view of itself.
type RunnerStatus struct {
	Name       string
	State      State
	Checkpoint event.Position // as of the last commit (zero before the first lease)
	LastError  string
	ErrorAt    time.Time
}

// EventError is the failure to apply one event of a batch; the batch was
// rolled back. Index is the event's place in the batch as read from the
// log.
type EventError struct {
	Projection string
	Index      int
	Event      event.Record
	Err        error
}

func (e *EventError) Error() string {
	return fmt.Sprintf("projection %s: event %s (%s v%d) of stream %q of tenant %q, version %d, at %s: %v",
		e.Projection, e.Event.ID, e.Event.Type, e.Event.SchemaVersion, e.Event.Stream, e.Event.Tenant, e.Event.Version, e.Event.Position, e.Err)
}

func (e *EventError) Unwrap() error { return e.Err }

// ErrLeaseHeld is returned by CatchUp when another session runs the
// projection.
var ErrLeaseHeld = errors.New("the projection is run by another session")

// Runner applies the global log to one projection. Run and CatchUp must
// not be called concurrently on one Runner; Status may be called anytime.
type Runner struct {
	proj Projection
	log  eventstore.Log
	// loadedStatus is the checkpoint row's status when the lease was taken.
	loadedStatus State
	locator      eventstore.VersionLocator
	pool         *pgxpool.Pool
	cfg          RunnerConfig
	logger       *slog.Logger

	mu     sync.Mutex
	status RunnerStatus

	key     string // checkpoint and lease key
	letters string // the projection column of its dead letters and parked streams (letterName)
	handles map[string]bool

	// Owned by the goroutine in Run or CatchUp.
	checkpoint    event.Position
	streams       *streamCache
	catchingUp    bool                    // the last batch was full: the next one is read at once
	wakeTakenAt   time.Time               // when Run took the wake-up channel for this step (zero: none)
	generation    string                  // of the checkpoint row, for dead letters
	parkedStreams int64                   // the checkpoint row's count: 0 means no stream needs looking up
	retries       map[streamKey]time.Time // parked streams the runner retries, and when
	until         event.Position          // CatchUp's bound: no event after it is applied (zero: none)
	pauseSeen     bool                    // the last commit saw a tool's pause lock
	ledger        *LedgerBook             // the generation's completeness ledger
	leaveCaughtUp bool                    // runAlone: return once caught up
	shed          bool                    // the runner gave its partition to another process (Share)
}

// NewRunner returns a runner of p reading log. pool must run as
// db.RoleProjector; the runner takes one connection out of it for as long
// as it runs (its session holds the lease and applies every batch).
func NewRunner(p Projection, log eventstore.Log, pool *pgxpool.Pool, cfg RunnerConfig) (*Runner, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("projection %s: %w", p.Name(), err)
	}
	if err := CheckDecodable(p, cfg.Registry); err != nil {
		return nil, err
	}
	locator, ok := log.(eventstore.VersionLocator)
	if !ok {
		return nil, fmt.Errorf("projection %s: the event log (%T) cannot locate stream versions, which the contiguity check needs", p.Name(), log)
	}
	handles := map[string]bool{}
	for _, t := range p.EventTypes() {
		handles[t] = true
	}
	key := cfg.Checkpoint
	if !cfg.Partition.IsZero() {
		if _, ok := p.(Partitionable); !ok {
			return nil, fmt.Errorf("projection %s cannot be split into partitions: it does not declare itself Partitionable (its rows may depend on the order of events across streams)", p.Name())
		}
		if _, ok := log.(eventstore.PartitionLog); !ok {
			return nil, fmt.Errorf("projection %s: partitions need a log that reads one partition's events (PostgreSQL); %T does not", p.Name(), log)
		}
		if key == "" {
			key = PartitionKey(p.Name(), cfg.Partition)
		}
		if !checkpointKey.MatchString(key) {
			return nil, fmt.Errorf("projection %s: its partition's checkpoint key %q is longer than 63 bytes: give the runner a shorter RunnerConfig.Checkpoint", p.Name(), key)
		}
	}
	if key == "" {
		key = p.Name()
	}
	logger := cfg.Logger.With("projection", p.Name())
	if !cfg.Partition.IsZero() {
		logger = logger.With("partition", cfg.Partition.String())
	} else if key != p.Name() {
		logger = logger.With("checkpoint", key)
	}
	return &Runner{
		proj:    p,
		log:     log,
		locator: locator,
		pool:    pool,
		cfg:     cfg,
		handles: handles,
		key:     key,
		letters: letterName(p.Name(), key),
		logger:  logger,
		status:  RunnerStatus{Name: key, State: StateStopped},
		streams: newStreamCache(cfg.StreamCache),
		retries: map[streamKey]time.Time{},
	}, nil
}

// Name returns the runner's checkpoint key: the projection's name unless
// RunnerConfig.Checkpoint says otherwise.
func (r *Runner) Name() string { return r.key }

// Status returns what the runner is doing.
func (r *Runner) Status() RunnerStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status
}

func (r *Runner) setState(s State) {
	r.mu.Lock()
	prev := r.status.State
	r.status.State = s
	r.mu.Unlock()
	if prev != s {
		r.logger.Debug("projection runner state", "from", string(prev), "to", string(s))
	}
}

// Run keeps the projection up to date until ctx ends: it takes the lease
// (or waits as a standby), then applies batches as events arrive. An event
// that fails on its own parks its stream when DeadLetters is set (see
// FailurePolicy); any other failing batch is recorded and retried with
// backoff, never skipped. When a tool takes the projection (AcquireExclusive)
// it finishes its batch, yields and waits (state paused). When ctx ends it
// finishes the batch in flight and returns nil; it returns no other error
// (failures are in Status and the log).
func (r *Runner) Run(ctx context.Context) error {
	defer r.setState(StateStopped)
	r.setState(StateStarting)
	return r.leader().Run(ctx)
}

// runAlone runs the runner on a session of its own, as Run does, until it
// has applied a batch and is caught up with the head: then it gives its
// lease and session back and returns nil, for its Group to take it over.
// A runner in error, paused by a tool, on standby or ahead of the log stays
// alone until that has passed.
func (r *Runner) runAlone(ctx context.Context) error {
	// The state stays what it was (running, for a member leaving the
	// group) until the leader loop says otherwise: a member moving between
	// the group and a session of its own is not starting, and /readyz must
	// not flap while it does.
	r.leaveCaughtUp = true
	defer func() { r.leaveCaughtUp = false }()
	return r.leader().Run(ctx)
}

func (r *Runner) leader() *pgsession.Leader {
	l := &pgsession.Leader{Lease: lease, Name: r.key, Kind: "projection runner", Connect: r.connect,
		Paused: func(ctx context.Context, conn *pgx.Conn) (bool, error) { return pauseRequested(ctx, conn, r.key) }, PauseRetry: pauseRetry,
		Retry: r.cfg.LeaseRetry, Lead: r.lead, Logger: r.logger,
		OnState: func(s pgsession.LeaderState) { r.setState(leaderStates[s]) }}
	if sh := r.cfg.Share; sh != nil && !r.cfg.Partition.IsZero() {
		// Admit counts the partition taken; Unadmit (the lease was not
		// taken) and the end of Lead (unless it was shed) give it back.
		l.Admit = func() bool { return sh.admit(r.proj.Name(), r.cfg.Partition.Count) }
		l.Unadmit = func() { sh.give(r.proj.Name()) }
		lead := l.Lead
		l.Lead = func(ctx context.Context, conn *pgx.Conn) error {
			r.shed = false
			defer func() {
				if !r.shed {
					sh.give(r.proj.Name())
				}
			}()
			return lead(ctx, conn)
		}
	}
	return l
}

// shedDue reports whether this runner is to give its partition to another
// process (Share); the share then counts it given back.
func (r *Runner) shedDue() bool {
	if r.cfg.Share == nil || r.cfg.Partition.IsZero() || r.shed {
		return false
	}
	r.shed = r.cfg.Share.shed(r.proj.Name(), r.cfg.Partition.Count)
	return r.shed
}

// leaderStates maps the states between leaderships onto a runner's.
var leaderStates = map[pgsession.LeaderState]State{
	pgsession.LeaderStarting: StateStarting, pgsession.LeaderStandby: StateStandby, pgsession.LeaderPaused: StatePaused}

// lead runs batches while this session holds the lease. It returns nil when
// ctx ends, and an error when the session is broken or the lease in doubt.
func (r *Runner) lead(ctx context.Context, conn *pgx.Conn) error {
	if err := r.begin(ctx, conn); err != nil {
		if errors.Is(err, ErrSplitParked) || errors.Is(err, ErrMergePartitions) {
			return r.refuseLayout(ctx, conn, err)
		}
		return err
	}
	// A tool may have asked for the projection while this runner took the
	// lease: let it have it before doing anything.
	if paused, err := pauseRequested(ctx, conn, r.key); err != nil {
		return err
	} else if paused {
		return errYield
	}
	if r.loadedStatus == StateSplit {
		return r.refuseSplit(ctx, conn)
	}
	if ahead, err := r.aheadOfLog(ctx); err != nil {
		return err
	} else if ahead != "" {
		return r.refuseAhead(ctx, conn, ahead)
	}
	cp := r.checkpoint
	r.mu.Lock()
	r.status.State, r.status.Checkpoint = StateRunning, cp
	r.mu.Unlock()
	r.logger.Info("projection runner active", "checkpoint", cp.Token(), "position", cp.String())

	var (
		pace      pacer
		errDelay  time.Duration
		transient time.Duration
		lastStart time.Time // of the last batch
		wake      <-chan struct{}
		haveWake  bool // wake was taken after the last wake-up, before the gather pause
	)
	for {
		if r.cfg.Wake != nil && !haveWake {
			wake = r.cfg.Wake()        // before reading: a wake-up during the read is not lost
			r.wakeTakenAt = time.Now() // a head read begun since may serve this step (SharedReads)
		}
		haveWake = false
		if ctx.Err() != nil {
			r.stop(conn)
			return nil
		}
		lastStart = time.Now()
		n, err := r.stepToCompletion(ctx, conn)
		if err == nil && r.pauseSeen {
			return errYield // the batch committed; the tool takes over
		}
		if err != nil {
			if conn.IsClosed() || db.IsUnavailable(err) || errors.Is(err, errCheckpointMoved) {
				return err
			}
			var wait time.Duration
			if IsTransient(err) {
				// A deadlock, a serialization failure, a batch out of time:
				// pause and retry, counting no attempt and parking nothing.
				transient = min(max(2*transient, r.cfg.Failures.InitialDelay), r.cfg.Failures.MaxDelay)
				wait = transient
				r.logger.Warn("projection batch failed transiently; retrying", "error", err.Error(), "retry_in", wait.String())
			} else {
				errDelay = min(max(2*errDelay, r.cfg.MinErrorBackoff), r.cfg.MaxErrorBackoff)
				wait = errDelay
				r.fail(ctx, conn, err, errDelay)
			}
			switch r.wait(ctx, conn, wait) {
			case waitStopped:
				r.stop(conn)
				return nil
			case waitYield:
				return errYield
			}
			continue
		}
		transient = 0
		if errDelay > 0 {
			errDelay = 0
			r.setState(StateRunning)
			r.logger.Info("projection runner recovered", "checkpoint", r.checkpoint.Token())
		}
		if _, err := r.retryDue(ctx, conn, retryLimit(n)); err != nil {
			return err
		}
		if r.leaveCaughtUp && !r.catchingUp {
			return pgsession.ErrDone // back to the group
		}
		if r.shedDue() {
			r.logger.Info("projection partition given to another process", "checkpoint", r.checkpoint.Token())
			return pgsession.ErrShed // the batch committed; another process takes over
		}
		timeout := pace.next(n, r.catchingUp, &r.cfg)
		if r.catchingUp {
			continue // more is probably waiting
		}
		if d, ok := r.nextRetry(); ok && d < timeout {
			timeout = max(d, time.Millisecond)
		}
		timer := time.NewTimer(timeout)
		select {
		case <-ctx.Done():
			timer.Stop()
			r.stop(conn)
			return nil
		case <-wake:
			timer.Stop()
			pace.woken()
			// The next channel is taken now, before the gather pause: the
			// runners woken by one append then all took theirs before any
			// of them reads, so they can share that read (SharedReads).
			wake, haveWake = r.cfg.Wake(), true
			r.wakeTakenAt = time.Now()
			if wait := r.cfg.Gather - time.Since(lastStart); wait > 0 && !pgsession.Sleep(ctx, wait) {
				r.stop(conn)
				return nil
			}
		case <-timer.C:
			// After a re-poll delay keep chasing; after a plain poll not.
			if pace.timedOut() {
				// An idle session may have died unnoticed (it holds the
				// lease, and a standby cannot take over until it is gone);
				// the probe also tells whether a tool asked for the
				// projection.
				pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				paused, err := pauseRequested(pctx, conn, r.key)
				cancel()
				if err != nil && ctx.Err() == nil {
					return fmt.Errorf("projection %s: lease session: %w", r.key, err)
				}
				if paused {
					return errYield
				}
			}
		}
	}
}

// begin loads the checkpoint row of a session that just took the lease,
// and the automatic retries of parked streams still to do.
func (r *Runner) begin(ctx context.Context, conn *pgx.Conn) error {
	if !r.cfg.Partition.IsZero() {
		if err := ensurePartition(ctx, conn, r.proj.Name(), r.cfg.Partition); err != nil {
			return err
		}
	}
	st, err := loadCheckpoint(ctx, conn, r.key)
	if err != nil {
		return err
	}
	r.checkpoint, r.generation, r.parkedStreams = st.pos, st.generation, st.parkedStreams
	r.loadedStatus = st.status
	r.streams.reset()
	r.ledger = NewLedgerBook(r.proj.Name(), r.generation)
	r.catchingUp, r.pauseSeen = false, false
	r.wakeTakenAt = time.Time{} // CatchUp reads the head for itself
	clear(r.retries)
	if r.cfg.DeadLetters && r.parkedStreams > 0 {
		if err := r.loadRetries(ctx, conn); err != nil {
			// Not fatal: a stream whose schedule is not known is retried
			// once its next event arrives, or by an operator.
			r.logger.Warn("cannot load the retry schedule of parked streams", "error", err.Error())
		}
	}
	return nil
}

// stepToCompletion runs one step that a cancelled ctx does not interrupt:
// a shutdown lets the batch in flight commit (within FinishTimeout).
func (r *Runner) stepToCompletion(ctx context.Context, conn *pgx.Conn) (int, error) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.FinishTimeout)
	defer cancel()
	return r.step(sctx, conn)
}

func (r *Runner) fail(ctx context.Context, conn *pgx.Conn, err error, retryIn time.Duration) {
	now := time.Now()
	r.mu.Lock()
	first := r.status.State != StateError || r.status.LastError != err.Error()
	r.status.State, r.status.LastError, r.status.ErrorAt = StateError, err.Error(), now
	r.mu.Unlock()
	if first {
		r.logger.Error("projection stopped at an event it cannot apply; retrying with backoff, never skipping",
			"error", err.Error(), "checkpoint", r.checkpoint.Token(), "retry_in", retryIn.String())
	} else {
		r.logger.Warn("projection still failing", "error", err.Error(), "retry_in", retryIn.String())
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if rerr := RecordCheckpointError(rctx, conn, r.key, err); rerr != nil {
		r.logger.Warn("cannot record the projection's error", "error", rerr.Error())
	}
}

func (r *Runner) stop(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := RecordCheckpointStopped(ctx, conn, r.key); err != nil {
		r.logger.Warn("cannot record that the projection stopped", "error", err.Error())
	}
	r.logger.Info("projection runner stopped", "checkpoint", r.checkpoint.Token())
}

// CatchUp takes the lease, applies batches until the checkpoint reaches
// until (no event after until is applied) or, when until is zero, until no
// further event is visible, and gives the lease back. It is for tests,
// benchmarks and tools that drive a projection in the foreground; it does
// not yield to pauses. With DeadLetters, parked streams whose retry falls
// due meanwhile are retried between batches. Errors: ErrLeaseHeld, and any
// batch error (an *EventError for an event that cannot be applied, without
// DeadLetters).
func (r *Runner) CatchUp(ctx context.Context, until event.Position) error {
	conn, err := r.connect(ctx)
	if err != nil {
		return err
	}
	defer pgsession.Close(conn)
	ok, err := lease.Try(ctx, conn, r.key)
	if err != nil {
		return err
	}
	if !ok {
		return ErrLeaseHeld
	}
	defer lease.Release(conn, r.key)
	return r.catchUp(ctx, conn, until)
}

// CatchUpOn is CatchUp on the session of x, which holds the lease of the
// runner's checkpoint key: a tool that paused the projection's runner
// brings it to a position of its choosing (a rebuild of one tenant swaps
// at the live checkpoint).
func (r *Runner) CatchUpOn(ctx context.Context, x *Exclusive, until event.Position) error {
	if x == nil || x.key != r.key || x.conn == nil {
		return fmt.Errorf("projection %s: catch up needs the exclusive lease of %s", r.proj.Name(), r.key)
	}
	return r.catchUp(ctx, x.conn, until)
}

func (r *Runner) catchUp(ctx context.Context, conn *pgx.Conn, until event.Position) error {
	if r.cfg.AsyncCommit {
		// Also on a tool's session (CatchUpOn), which connect did not open.
		if _, err := conn.Exec(ctx, "SET synchronous_commit = off"); err != nil {
			return fmt.Errorf("projection %s: %w", r.proj.Name(), err)
		}
	}
	if err := r.begin(ctx, conn); err != nil {
		return err
	}
	r.mu.Lock()
	r.status.State, r.status.Checkpoint = StateRunning, r.checkpoint
	r.mu.Unlock()
	defer r.setState(StateStopped)
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = RecordCheckpointStopped(sctx, conn, r.key)
	}()
	r.until = until
	defer func() { r.until = event.Position{} }()
	repoll := r.cfg.MinRepoll
	for until.IsZero() || r.checkpoint.Less(until) {
		n, err := r.step(ctx, conn)
		if err != nil {
			return err
		}
		if _, err := r.retryDue(ctx, conn, retryLimit(n)); err != nil {
			return err
		}
		if n > 0 {
			repoll = r.cfg.MinRepoll
			continue
		}
		if until.IsZero() {
			return nil
		}
		// until is not visible yet: an older transaction is still open.
		if !pgsession.Sleep(ctx, repoll) {
			return ctx.Err()
		}
		repoll = min(2*repoll, 100*time.Millisecond)
	}
	return nil
}

// connect takes a connection out of the pool for good: the runner's
// session must end when the runner lets go of it, never return to the pool
// holding a lease.
func (r *Runner) connect(ctx context.Context) (*pgx.Conn, error) {
	c, err := r.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	conn := c.Hijack()
	if r.cfg.AsyncCommit {
		if _, err := conn.Exec(ctx, "SET synchronous_commit = off"); err != nil {
			pgsession.Close(conn)
			return nil, fmt.Errorf("connect: %w", err)
		}
	}
	return conn, nil
}
