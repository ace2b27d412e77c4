package projections

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/internal/db"
	"github.com/strata-es/strata/internal/failpoint"
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
	StateStopped  State = "stopped"
)

// RunnerStatus is a runner's view of itself.
type RunnerStatus struct {
	Name       string
	State      State
	Checkpoint event.Position // as of the last commit (zero before the first lease)
	LastError  string
	ErrorAt    time.Time
}

// RunnerConfig tunes a Runner. Zero values take the defaults.
type RunnerConfig struct {
	// CatchUpBatch is the batch size while catching up: after a read that
	// returned a full batch, the next reads take up to this many events
	// (default 4 x BatchSize, at most 10,000). Catching up from the start
	// pays per batch (transaction, checkpoint, statements per tenant), so
	// bigger batches go faster (measured 22,800 events/s at 500, 34,700 at
	// 2,000); live traffic keeps BatchSize, which bounds how long a batch
	// holds the log's horizon for everyone else.
	CatchUpBatch int
	// BatchSize is the most events read and applied per transaction
	// (default 500; STRATA_PROJECTION_BATCH in serve).
	BatchSize int
	// PollInterval is how often the log is read when nothing wakes the
	// runner (default 1s; STRATA_PROJECTION_POLL in serve).
	PollInterval time.Duration
	// MinRepoll is the first delay before reading again when a wake-up
	// found nothing visible yet, because an older transaction is still
	// open; it doubles up to PollInterval (default 2ms).
	MinRepoll time.Duration
	// Gather is the shortest time between the starts of two batches
	// prompted by wake-ups (default 5ms). Under steady traffic every
	// append wakes the runner; without it each batch would carry one or
	// two events and its fixed cost (transaction, checkpoint, statements
	// per tenant) four projections over. With it, a batch gathers what
	// arrived meanwhile: the command benchmark's throughput with all roles
	// in one process went from 1,600 to ... requests/s. Quiet traffic
	// waits for nothing (the last batch started long ago); busy traffic
	// waits at most Gather. Negative disables.
	Gather time.Duration
	// LeaseRetry is how often a standby runner tries to take the lease
	// (default 3s).
	LeaseRetry time.Duration
	// MinErrorBackoff and MaxErrorBackoff bound the delay before a failed
	// batch is retried (defaults 500ms and 1m).
	MinErrorBackoff, MaxErrorBackoff time.Duration
	// FinishTimeout bounds each batch, from its read to its commit; a
	// shutdown lets the batch in flight finish within it (default 10s).
	FinishTimeout time.Duration
	// PerEvent makes the runner apply every batch event by event even when
	// the projection implements BatchProjection (slower; for tests and for
	// comparing the two paths).
	PerEvent bool
	// StreamCache is how many streams' last versions are remembered for
	// the contiguity check (default 100,000).
	StreamCache int
	// Registry decodes payloads. Required: the process's one registry,
	// so that every module's events decode the same way on every path.
	Registry *event.Registry
	// Wake, when set, returns a channel closed when new events may be
	// available (Signal.C). It is taken before each read.
	Wake func() <-chan struct{}
	// Shared, when set, lets runners of this process that catch up from
	// the same position share reads and decoding (see SharedReads). It is
	// used only if it decodes with Registry.
	Shared *SharedReads
	// Progress, when set, is told of every committed checkpoint, so that
	// queries in this process wait for it without polling.
	Progress *Progress
	// Logger defaults to slog.Default().
	Logger *slog.Logger

	// DeadLetters turns on the failure policy of ARCHITECTURE decision 5
	// (see FailurePolicy): an event that fails on its own parks its stream
	// in the dead-letter store instead of stopping the projection. Without
	// it a failing event is retried with backoff forever, holding every
	// stream back (and CatchUp returns its *EventError).
	DeadLetters bool
	// Failures tunes the failure policy (defaults: 5 attempts, 200ms
	// doubling to 10s, 20% jitter).
	Failures FailurePolicy
	// Checkpoint is the key of the runner's checkpoint row and lease
	// (default: the projection's name). A rebuild runs a projection into
	// shadow tables under a key of its own; a new projection that reuses
	// another's code needs one too.
	Checkpoint string
	// Filter, when set, limits the events applied to those it accepts;
	// the others advance the checkpoint like events of types the
	// projection does not handle (a rebuild of one tenant).
	Filter func(event.Record) bool
	// OnBatch, when set, is called after every committed batch (progress
	// of a rebuild).
	OnBatch func(BatchInfo)
	// AsyncCommit turns synchronous_commit off on the runner's session: a
	// commit does not wait for its WAL flush. A crash may then lose the
	// last batches, but never half a batch (rows and checkpoint commit
	// together), so they are simply applied again: safe for any runner,
	// and what a rebuild uses.
	AsyncCommit bool
}

// BatchInfo describes a committed batch.
type BatchInfo struct {
	// Events is how many events of the log the batch covered (applied,
	// parked or skipped); Checkpoint is where it ended.
	Events     int
	Checkpoint event.Position
	// Parked counts events the batch sent to the dead-letter store.
	Parked int
}

// checkpointKey matches projection_checkpoints.projection.
var checkpointKey = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)

func (c *RunnerConfig) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.BatchSize == 0 {
		c.BatchSize = 500
	}
	if c.CatchUpBatch == 0 {
		c.CatchUpBatch = min(4*c.BatchSize, 10_000)
	}
	c.CatchUpBatch = max(c.CatchUpBatch, c.BatchSize)
	def(&c.PollInterval, time.Second)
	def(&c.MinRepoll, 2*time.Millisecond)
	def(&c.Gather, 5*time.Millisecond)
	def(&c.LeaseRetry, 3*time.Second)
	def(&c.MinErrorBackoff, 500*time.Millisecond)
	def(&c.MaxErrorBackoff, time.Minute)
	def(&c.FinishTimeout, 10*time.Second)
	if c.StreamCache == 0 {
		c.StreamCache = 100_000
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Failures.setDefaults()
}

// Validate reports every invalid setting.
func (c RunnerConfig) Validate() error {
	var errs []error
	if c.BatchSize < 1 || c.BatchSize > 10_000 {
		errs = append(errs, fmt.Errorf("batch size %d: want 1 to 10000", c.BatchSize))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"poll interval", c.PollInterval}, {"min repoll", c.MinRepoll}, {"lease retry", c.LeaseRetry},
		{"min error backoff", c.MinErrorBackoff}, {"max error backoff", c.MaxErrorBackoff}, {"finish timeout", c.FinishTimeout}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s %s: want a positive duration", d.name, d.v))
		}
	}
	if c.MaxErrorBackoff < c.MinErrorBackoff {
		errs = append(errs, errors.New("max error backoff is below min error backoff"))
	}
	if c.StreamCache < 1 {
		errs = append(errs, fmt.Errorf("stream cache %d: want at least 1", c.StreamCache))
	}
	if c.Registry == nil {
		errs = append(errs, errors.New("registry is required (the process's event registry)"))
	}
	if c.Checkpoint != "" && !checkpointKey.MatchString(c.Checkpoint) {
		errs = append(errs, fmt.Errorf("checkpoint key %q: want [a-z][a-z0-9_]{0,62}", c.Checkpoint))
	}
	if err := c.Failures.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
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
	proj    Projection
	log     eventstore.Log
	locator eventstore.VersionLocator
	pool    *pgxpool.Pool
	cfg     RunnerConfig
	logger  *slog.Logger

	mu     sync.Mutex
	status RunnerStatus

	key     string // checkpoint and lease key
	handles map[string]bool

	// Owned by the goroutine in Run or CatchUp.
	checkpoint    event.Position
	streams       *streamCache
	catchingUp    bool                    // the last batch was full: the next one is read at once
	generation    string                  // of the checkpoint row, for dead letters
	parkedStreams int64                   // the checkpoint row's count: 0 means no stream needs looking up
	retries       map[streamKey]time.Time // parked streams the runner retries, and when
	until         event.Position          // CatchUp's bound: no event after it is applied (zero: none)
	pauseSeen     bool                    // the last commit saw a tool's pause lock
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
	if key == "" {
		key = p.Name()
	}
	logger := cfg.Logger.With("projection", p.Name())
	if key != p.Name() {
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
	var conn *pgx.Conn
	defer func() { pgsession.Close(conn) }()
	standbyLogged, pausedLogged := false, false
	var backoff pgsession.Backoff
	for ctx.Err() == nil {
		if conn == nil || conn.IsClosed() {
			pgsession.Close(conn)
			conn = nil
			c, err := r.connect(ctx)
			if err != nil {
				if ctx.Err() == nil {
					r.logger.Warn("projection runner cannot connect; retrying", "error", err.Error(), "retry_in", r.cfg.LeaseRetry.String())
				}
				pgsession.Sleep(ctx, r.cfg.LeaseRetry)
				continue
			}
			conn = c
		}
		paused, err := pauseRequested(ctx, conn, r.key)
		if err == nil && paused {
			if !pausedLogged {
				r.logger.Info("projection runner paused: a replay operation holds the projection")
				pausedLogged = true
			}
			r.setState(StatePaused)
			pgsession.Sleep(ctx, pauseRetry)
			continue
		}
		pausedLogged = false
		var ok bool
		if err == nil {
			ok, err = lease.Try(ctx, conn, r.key)
		}
		if err != nil {
			pgsession.Close(conn)
			conn = nil
			if ctx.Err() == nil {
				r.logger.Warn("projection runner cannot take its lease; retrying", "error", err.Error())
			}
			pgsession.Sleep(ctx, r.cfg.LeaseRetry)
			continue
		}
		if !ok {
			r.setState(StateStandby)
			if !standbyLogged {
				r.logger.Info("projection runner on standby: another session holds the lease", "retry_every", r.cfg.LeaseRetry.String())
				standbyLogged = true
			}
			pgsession.Sleep(ctx, r.cfg.LeaseRetry)
			continue
		}
		standbyLogged = false
		led := time.Now()
		err = r.lead(ctx, conn)
		// Ending the session releases the lease whatever state it is in.
		lease.Release(conn, r.key)
		pgsession.Close(conn)
		conn = nil
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, errYield) {
			// A tool asked for the projection: it takes the lease now and
			// the loop waits above until its pause lock is gone.
			r.setState(StatePaused)
			continue
		}
		r.setState(StateStarting)
		delay := backoff.After(time.Since(led))
		r.logger.Warn("projection runner lost its session; reconnecting", "error", errString(err), "retry_in", delay.String())
		pgsession.Sleep(ctx, delay)
	}
	return nil
}

// lead runs batches while this session holds the lease. It returns nil when
// ctx ends, and an error when the session is broken or the lease in doubt.
func (r *Runner) lead(ctx context.Context, conn *pgx.Conn) error {
	if err := r.begin(ctx, conn); err != nil {
		return err
	}
	// A tool may have asked for the projection while this runner took the
	// lease: let it have it before doing anything.
	if paused, err := pauseRequested(ctx, conn, r.key); err != nil {
		return err
	} else if paused {
		return errYield
	}
	cp := r.checkpoint
	r.mu.Lock()
	r.status.State, r.status.Checkpoint = StateRunning, cp
	r.mu.Unlock()
	r.logger.Info("projection runner active", "checkpoint", cp.Token(), "position", cp.String())

	var (
		chasing   bool          // the last read was prompted by a wake-up
		repoll    time.Duration // current delay of re-reading after an empty wake-up
		errDelay  time.Duration
		transient time.Duration
		lastStart time.Time // of the last batch
	)
	for {
		var wake <-chan struct{}
		if r.cfg.Wake != nil {
			wake = r.cfg.Wake() // before reading: a wake-up during the read is not lost
		}
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
		if err := r.retryDue(ctx, conn); err != nil {
			return err
		}
		if r.catchingUp {
			chasing, repoll = false, 0
			continue // more is probably waiting
		}
		timeout := r.cfg.PollInterval
		if n == 0 && chasing {
			// Woken for events that are not visible yet: an older
			// transaction is still open somewhere in the cluster. Look
			// again soon, backing off towards the poll interval.
			repoll = max(2*repoll, r.cfg.MinRepoll)
			if repoll < r.cfg.PollInterval {
				timeout = repoll
			} else {
				chasing, repoll = false, 0
			}
		} else {
			chasing, repoll = false, 0
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
			chasing, repoll = true, 0
			if wait := r.cfg.Gather - time.Since(lastStart); wait > 0 && !pgsession.Sleep(ctx, wait) {
				r.stop(conn)
				return nil
			}
		case <-timer.C:
			// After a re-poll delay keep chasing; after a plain poll not.
			chasing = repoll > 0
			if !chasing {
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

// errYield: a tool asked for the projection; the runner gives its lease
// back and waits until the tool is done.
var errYield = errors.New("a replay operation asked for the projection")

// pauseRetry is how often a paused runner looks whether the tool is done.
const pauseRetry = 100 * time.Millisecond

type waitResult int

const (
	waitDone waitResult = iota
	waitStopped
	waitYield
)

// wait sleeps d (after a failed batch), looking every poll interval
// whether a tool asked for the projection, which a failing runner must not
// hold up.
func (r *Runner) wait(ctx context.Context, conn *pgx.Conn, d time.Duration) waitResult {
	end := time.Now().Add(d)
	for {
		left := time.Until(end)
		if left <= 0 {
			return waitDone
		}
		if !pgsession.Sleep(ctx, min(left, r.cfg.PollInterval)) {
			return waitStopped
		}
		if paused, err := pauseRequested(ctx, conn, r.key); err == nil && paused {
			return waitYield
		}
	}
}

// begin loads the checkpoint row of a session that just took the lease,
// and the automatic retries of parked streams still to do.
func (r *Runner) begin(ctx context.Context, conn *pgx.Conn) error {
	st, err := loadCheckpoint(ctx, conn, r.key)
	if err != nil {
		return err
	}
	r.checkpoint, r.generation, r.parkedStreams = st.pos, st.generation, st.parkedStreams
	r.streams.reset()
	r.catchingUp, r.pauseSeen = false, false
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

// loadRetries reads which parked streams are still to be retried
// automatically, tenant by tenant (the tenants come from the log).
func (r *Runner) loadRetries(ctx context.Context, conn *pgx.Conn) error {
	tenants, err := Tenants(ctx, conn)
	if err != nil {
		return err
	}
	for lo := 0; lo < len(tenants); lo += 200 {
		b := &pgx.Batch{}
		for _, t := range tenants[lo:min(lo+200, len(tenants))] {
			b.Queue(db.SetTenantSQL, t)
			b.Queue(`SELECT stream_id, next_attempt_at FROM parked_streams
WHERE tenant_id = $1 AND projection = $2 AND generation = $3::uuid AND next_attempt_at IS NOT NULL`, t, r.proj.Name(), r.generation).
				Query(func(rows pgx.Rows) error {
					for rows.Next() {
						var stream string
						var at time.Time
						if err := rows.Scan(&stream, &at); err != nil {
							return err
						}
						r.retries[streamKey{t, stream}] = at
					}
					return rows.Err()
				})
		}
		if err := conn.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("read parked streams: %w", err)
		}
	}
	return nil
}

// nextRetry returns how long until the next automatic retry is due.
func (r *Runner) nextRetry() (time.Duration, bool) {
	var next time.Time
	for _, at := range r.retries {
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return time.Until(next), !next.IsZero()
}

// retryDue retries the parked streams whose next attempt is due, each in
// a transaction of its own on the lease session (so nothing else applies
// the projection meanwhile). It returns an error only when the session is
// gone.
func (r *Runner) retryDue(ctx context.Context, conn *pgx.Conn) error {
	if len(r.retries) == 0 {
		return nil
	}
	now := time.Now()
	for k, at := range r.retries {
		if at.After(now) {
			continue
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.FinishTimeout)
		out, err := retryStream(sctx, conn, r.proj, r.cfg.Registry, r.key, r.generation, k.tenant, k.stream, "runner", &r.cfg.Failures)
		cancel()
		log := r.logger.With("tenant", k.tenant, "stream", k.stream)
		switch {
		case errors.Is(err, ErrNotParked):
			delete(r.retries, k)
		case err != nil:
			if conn.IsClosed() || db.IsUnavailable(err) {
				return err
			}
			r.retries[k] = now.Add(r.cfg.Failures.Delay(1))
			log.Warn("retry of a parked stream failed without an attempt counted; trying again later", "error", err.Error())
		case out.Unparked:
			delete(r.retries, k)
			r.parkedStreams = out.parkedStreams
			log.Info("parked stream applied on retry and unparked", "letters", len(out.Applied))
		default:
			r.parkedStreams = out.parkedStreams
			f := out.Failed
			if out.NextAttemptAt.IsZero() {
				delete(r.retries, k)
				log.Error("event parked for good after its last attempt; retry or discard it with `strata replay dlq`",
					"dead_letter", f.ID, "version", f.Event.Version, "attempts", f.Attempts, "error", f.Error)
			} else {
				r.retries[k] = out.NextAttemptAt
				log.Warn("retry of a parked stream failed", "dead_letter", f.ID, "version", f.Event.Version,
					"attempt", f.Attempts, "of", r.cfg.Failures.Attempts, "error", f.Error,
					"retry_in", time.Until(out.NextAttemptAt).Round(time.Millisecond).String())
			}
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
		if err := r.retryDue(ctx, conn); err != nil {
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

// readSize is how many events the next read asks for.
func (r *Runner) readSize() int {
	if r.catchingUp {
		return r.cfg.CatchUpBatch
	}
	return r.cfg.BatchSize
}

// step reads one batch after the checkpoint and applies it in one
// transaction. It returns how many events it applied (0: none visible).
func (r *Runner) step(ctx context.Context, conn *pgx.Conn) (int, error) {
	// The read runs before the transaction begins (on a pooled connection,
	// in a statement that takes no transaction id), so the batch's own
	// transaction never holds the log's horizon back while reading.
	began := time.Now()
	var recs []event.Record
	var decoded *sharedBatch
	var err error
	if sh := r.cfg.Shared; sh != nil && sh.registry == r.cfg.Registry {
		decoded, err = sh.read(ctx, r, r.checkpoint, r.readSize(), r.catchingUp)
		if decoded != nil {
			recs = decoded.recs
		}
	} else {
		recs, err = r.log.ReadAll(ctx, r.checkpoint, r.readSize())
	}
	if err != nil {
		r.catchingUp = false
		return 0, fmt.Errorf("read log after %s: %w", r.checkpoint, err)
	}
	r.catchingUp = len(recs) == r.readSize()
	if !r.until.IsZero() {
		k := len(recs)
		for k > 0 && r.until.Less(recs[k-1].Position) {
			k--
		}
		recs = recs[:k] // decoded's slices stay aligned: a prefix
	}
	if len(recs) == 0 {
		return 0, nil
	}
	ctx, span := startBatchSpan(ctx, r.key, recs)
	n, err := r.applyRead(ctx, conn, recs, decoded, began)
	endBatchSpan(span, err)
	return n, err
}

// applyRead applies a batch read by step: contiguity, decoding, parking,
// the transaction, and the bookkeeping after it commits.
func (r *Runner) applyRead(ctx context.Context, conn *pgx.Conn, recs []event.Record, decoded *sharedBatch, began time.Time) (int, error) {
	last, err := checkContiguous(ctx, r.locator, r.streams, recs)
	if err != nil {
		return 0, fmt.Errorf("projection %s: %w", r.proj.Name(), err)
	}
	items, err := r.prepare(recs, decoded)
	if err != nil {
		return 0, err
	}
	plan, err := r.planParks(ctx, conn, items)
	if err != nil {
		return 0, err
	}
	next := recs[len(recs)-1].Position
	bp, setBased := r.proj.(BatchProjection)
	setBased = setBased && !r.cfg.PerEvent
	var res applied
	for round := 0; ; round++ {
		res, err = r.apply(ctx, conn, recs, items, next, bp, setBased, plan)
		var sbe *setBasedError
		if errors.As(err, &sbe) && !conn.IsClosed() && !db.IsUnavailable(err) && ctx.Err() == nil {
			// Find the event: the same batch again, event by event.
			if res, err = r.apply(ctx, conn, recs, items, next, bp, false, plan); err == nil {
				r.logger.Warn("a batch failed as a whole but applied event by event: the projection's two paths disagree",
					"error", sbe.Error())
			}
		}
		var ee *EventError
		if plan != nil && errors.As(err, &ee) && IsPoison(ee.Err) && !conn.IsClosed() && ctx.Err() == nil && round <= len(items) &&
			plan.park(ee.Event, ee.Err, r.cfg.Failures) {
			continue // the same batch again, with the event's stream parked
		}
		break
	}
	if err != nil {
		return 0, err
	}
	r.checkpoint = next
	for k, v := range last {
		r.streams.put(k, v)
	}
	r.parkedStreams, r.pauseSeen = res.parkedStreams, res.pause
	if plan != nil {
		r.noteParks(plan)
	}
	if r.logger.Enabled(ctx, slog.LevelDebug) {
		r.logger.DebugContext(ctx, "applied batch", "events", len(recs), "handled", len(items), "parked", res.letters,
			"checkpoint", next.String(), "took", time.Since(began).String())
	}
	r.mu.Lock()
	r.status.Checkpoint = next
	r.mu.Unlock()
	if r.cfg.Progress != nil {
		r.cfg.Progress.advance(r.key, next)
	}
	if r.cfg.OnBatch != nil {
		r.cfg.OnBatch(BatchInfo{Events: len(recs), Checkpoint: next, Parked: res.letters})
	}
	return len(recs), nil
}

// noteParks logs the streams a committed batch parked and schedules their
// automatic retries; parked streams found with a schedule the runner did
// not know (parked before it took the lease) join the schedule too.
func (r *Runner) noteParks(plan *parkPlan) {
	for k, p := range plan.existing {
		if _, ok := r.retries[k]; !ok && !p.next.IsZero() {
			r.retries[k] = p.next
		}
	}
	for k, f := range plan.fresh {
		log := r.logger.With("tenant", k.tenant, "stream", k.stream, "version", f.rec.Version, "event", f.rec.ID,
			"type", f.rec.Type, "error", errorText(f.err))
		if f.next == nil {
			log.Error("event failed: its stream is parked in the dead-letter store; retry or discard it with `strata replay dlq`")
			continue
		}
		r.retries[k] = *f.next
		log.Warn("event failed: its stream is parked in the dead-letter store and retried in the background",
			"attempt", 1, "of", r.cfg.Failures.Attempts, "retry_in", time.Until(*f.next).Round(time.Millisecond).String())
	}
}

// parkPlan says which events of a batch go to the dead-letter store: all
// events of streams parked before the batch, and, for streams the batch
// parks, the failing event and every later one of its stream.
type parkPlan struct {
	existing map[streamKey]parkedHere
	fresh    map[streamKey]*freshPark
}

// freshPark is a stream parked by this batch at rec, which failed with err.
type freshPark struct {
	rec  event.Record
	err  error
	next *time.Time // first automatic retry (nil: none)
}

// parks reports whether ev goes to the dead-letter store, and whether it
// is the failing event of a stream the batch parks.
func (p *parkPlan) parks(ev event.Record) (parked, head bool) {
	k := streamKey{ev.Tenant, ev.Stream}
	if _, ok := p.existing[k]; ok {
		return true, false
	}
	if f, ok := p.fresh[k]; ok && f.rec.Version <= ev.Version {
		return true, f.rec.Version == ev.Version
	}
	return false, false
}

// park parks ev's stream from ev on; false if it is parked already.
func (p *parkPlan) park(ev event.Record, err error, policy FailurePolicy) bool {
	if parked, _ := p.parks(ev); parked {
		return false
	}
	f := &freshPark{rec: ev, err: err}
	if policy.Attempts > 1 {
		t := time.Now().Add(policy.Delay(1))
		f.next = &t
	}
	p.fresh[streamKey{ev.Tenant, ev.Stream}] = f
	return true
}

// planParks finds which of the batch's streams are parked (one round trip
// of lookups, only when the projection has parked streams at all) and parks
// the streams of events that could not be decoded. It returns nil without
// DeadLetters.
func (r *Runner) planParks(ctx context.Context, conn *pgx.Conn, items []item) (*parkPlan, error) {
	if !r.cfg.DeadLetters {
		return nil, nil
	}
	plan := &parkPlan{existing: map[streamKey]parkedHere{}, fresh: map[streamKey]*freshPark{}}
	if r.parkedStreams > 0 && len(items) > 0 {
		streams := map[string][]string{}
		seen := map[streamKey]bool{}
		var tenants []string
		for _, it := range items {
			k := streamKey{it.ev.Tenant, it.ev.Stream}
			if seen[k] {
				continue
			}
			seen[k] = true
			if _, ok := streams[k.tenant]; !ok {
				tenants = append(tenants, k.tenant)
			}
			streams[k.tenant] = append(streams[k.tenant], k.stream)
		}
		b := &pgx.Batch{}
		for _, t := range tenants {
			b.Queue(db.SetTenantSQL, t)
			b.Queue(lookupParkedSQL, t, r.proj.Name(), r.generation, streams[t]).Query(func(rows pgx.Rows) error {
				for rows.Next() {
					var stream string
					var p parkedHere
					var next *time.Time
					if err := rows.Scan(&stream, &p.head, &next); err != nil {
						return err
					}
					if next != nil {
						p.next = *next
					}
					plan.existing[streamKey{t, stream}] = p
				}
				return rows.Err()
			})
		}
		if err := conn.SendBatch(ctx, b).Close(); err != nil {
			return nil, fmt.Errorf("projection %s: look up parked streams: %w", r.proj.Name(), err)
		}
	}
	for _, it := range items {
		if it.err != nil {
			plan.park(it.ev.Record, it.err, r.cfg.Failures)
		}
	}
	return plan, nil
}

// item is an event the projection handles, decoded, with its index in the
// batch as read from the log. err is set when it could not be decoded
// (only with DeadLetters: it is then parked).
type item struct {
	idx int
	ev  Event
	err error
}

// prepare decodes the events the projection handles and groups them by
// tenant, each tenant's events keeping their log order, so that set_config
// is sent once per tenant rather than once per event of interleaved
// tenants. Reordering across tenants cannot change any row: every
// read-model row belongs to one tenant (tenant_id in every key, RLS WITH
// CHECK on every write), so a projection cannot observe another tenant's
// events.
func (r *Runner) prepare(recs []event.Record, decoded *sharedBatch) ([]item, error) {
	items := make([]item, 0, len(recs))
	for i, rec := range recs {
		if !r.handles[rec.Type] || r.cfg.Filter != nil && !r.cfg.Filter(rec) {
			continue
		}
		var payload event.Payload
		var err error
		if decoded != nil {
			payload, err = decoded.payloads[i], decoded.errs[i]
		} else {
			payload, err = r.cfg.Registry.DecodeRecord(rec)
		}
		if err != nil {
			if !r.cfg.DeadLetters || errors.Is(err, event.ErrUnknownType) {
				// A type the registry lacks is the process's fault, not
				// the event's: parking it would drop every event of
				// that type (and a rebuild would swap in tables without
				// their rows). Stop instead, until the registry is fixed.
				return nil, r.eventError(i, rec, err)
			}
			items = append(items, item{idx: i, ev: Event{Record: rec}, err: fmt.Errorf("decode: %w", err)})
			continue
		}
		items = append(items, item{idx: i, ev: Event{Record: rec, Payload: payload}})
	}
	// Group by tenant, stably: bucket the positions, then copy once.
	byTenant := map[string][]int{}
	var tenants []string
	for k, it := range items {
		if _, ok := byTenant[it.ev.Tenant]; !ok {
			tenants = append(tenants, it.ev.Tenant)
		}
		byTenant[it.ev.Tenant] = append(byTenant[it.ev.Tenant], k)
	}
	if len(tenants) < 2 {
		return items, nil
	}
	slices.Sort(tenants)
	grouped := make([]item, 0, len(items))
	for _, t := range tenants {
		for _, k := range byTenant[t] {
			grouped = append(grouped, items[k])
		}
	}
	return grouped, nil
}

// setBasedError is a failure of the set-based path: the batch is retried
// event by event to find the event.
type setBasedError struct{ err error }

func (e *setBasedError) Error() string { return "set-based batch: " + e.err.Error() }
func (e *setBasedError) Unwrap() error { return e.err }

// Owners of queued statements other than an event index.
const (
	ownerRunner = -1 // BEGIN, the checkpoint, set_config, dead letters
	ownerGroup  = -2 // a set-based statement of a tenant's events
)

// commitCheckpointFirst is nil in every real build. Only the chaos_broken
// build tag (chaos_broken.go, for `make chaos-broken`) sets it, to commit
// the checkpoint move in a transaction of its own before the batch's
// writes: the defect the fault harness must be able to catch.
var commitCheckpointFirst func(ctx context.Context, conn *pgx.Conn, name string, from, next event.Position) error

// applied is what a committed batch reports.
type applied struct {
	parkedStreams int64 // the checkpoint row's count after the batch
	pause         bool  // a tool holds the projection's pause lock
	letters       int   // events sent to the dead-letter store
}

// apply sends the batch in one pipelined round trip: BEGIN, the checkpoint
// move, then per tenant its set_config, the statements of its events
// (set-based, or event by event) and the dead letters of the events plan
// parks, and commits in a second round trip.
func (r *Runner) apply(ctx context.Context, conn *pgx.Conn, recs []event.Record, items []item, next event.Position, bp BatchProjection, setBased bool, plan *parkPlan) (applied, error) {
	var res applied
	from := r.checkpoint
	if commitCheckpointFirst != nil { // only in the deliberately broken chaos_broken build
		if err := commitCheckpointFirst(ctx, conn, r.key, from, next); err != nil {
			return res, err
		}
		from = next
	}
	// Which events are parked, decided before anything is queued: the
	// checkpoint's counters go first.
	parked := make([]bool, len(items))
	heads := 0
	if plan != nil {
		for i, it := range items {
			p, head := plan.parks(it.ev.Record)
			parked[i] = p
			if p {
				res.letters++
			}
			if head {
				heads++
			}
		}
	}
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	b.Queue(advanceSQL, r.key, u64(next.Major), u64(next.Minor), u64(from.Major), u64(from.Minor), int64(heads), int64(res.letters),
		pauseClass, leaseKey(r.key)).
		QueryRow(func(row pgx.Row) error {
			err := row.Scan(&res.parkedStreams, &res.pause)
			if errors.Is(err, pgx.ErrNoRows) {
				return errCheckpointMoved
			}
			return err
		})
	owner := []int{ownerRunner, ownerRunner} // queued statement -> its event's index in recs, or an owner constant
	for lo := 0; lo < len(items); {
		hi := lo + 1
		for hi < len(items) && items[hi].ev.Tenant == items[lo].ev.Tenant {
			hi++
		}
		b.Queue(db.SetTenantSQL, items[lo].ev.Tenant)
		owner = append(owner, ownerRunner)
		if setBased {
			evs := make([]Event, 0, hi-lo)
			for i, it := range items[lo:hi] {
				if !parked[lo+i] {
					evs = append(evs, it.ev)
				}
			}
			if len(evs) > 0 {
				n := b.Len()
				if err := bp.ApplyBatch(b, evs); err != nil {
					return res, &setBasedError{err}
				}
				for range b.Len() - n {
					owner = append(owner, ownerGroup)
				}
			}
		} else {
			for i, it := range items[lo:hi] {
				if parked[lo+i] {
					continue
				}
				n := b.Len()
				if err := r.proj.Apply(b, it.ev); err != nil {
					return res, r.eventError(it.idx, it.ev.Record, err)
				}
				for range b.Len() - n {
					owner = append(owner, it.idx)
				}
			}
		}
		for i, it := range items[lo:hi] {
			if !parked[lo+i] {
				continue
			}
			_, head := plan.parks(it.ev.Record)
			k := streamKey{it.ev.Tenant, it.ev.Stream}
			var args []any
			var err error
			if head {
				f := plan.fresh[k]
				if args, err = letterArgs(r.proj.Name(), r.generation, it.ev.Record, errorText(f.err)); err != nil {
					return res, err
				}
				b.Queue(parkHeadSQL, append(args, f.next, int32(1))...)
			} else {
				headVersion := plan.existing[k].head
				if f, ok := plan.fresh[k]; ok {
					headVersion = f.rec.Version
				}
				if args, err = letterArgs(r.proj.Name(), r.generation, it.ev.Record, behindText(headVersion)); err != nil {
					return res, err
				}
				b.Queue(parkBehindSQL, args...)
			}
			owner = append(owner, ownerRunner)
		}
		lo = hi
	}

	err := sendTx(ctx, conn, b, func() { failpoint.Hit(FailpointBeforeCommit) }, func(k int, err error) error {
		if k >= 0 {
			switch o := owner[k]; {
			case o >= 0:
				return r.eventError(o, recs[o], err)
			case o == ownerGroup:
				return &setBasedError{err}
			}
		}
		return fmt.Errorf("projection %s: apply batch: %w", r.proj.Name(), err)
	})
	return res, err
}

// sendTx sends b, whose first query begins a transaction, in one round
// trip, reads every queued query's result (through its callback, if any)
// and commits, calling beforeCommit (when set) just before. On any failure
// it rolls back, even when ctx has ended, and returns queryErr(k, err):
// k is the failing query's index, or -1 when ending the batch or the
// commit failed.
func sendTx(ctx context.Context, conn *pgx.Conn, b *pgx.Batch, beforeCommit func(), queryErr func(k int, err error) error) error {
	br := conn.SendBatch(ctx, b)
	tx := br.Tx()
	committed := false
	defer func() {
		if !committed {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = tx.Rollback(rctx)
		}
	}()
	for k, qq := range b.QueuedQueries {
		var err error
		if qq.Fn != nil {
			err = qq.Fn(br)
		} else {
			_, err = br.Exec()
		}
		if err != nil {
			br.Close()
			return queryErr(k, err)
		}
	}
	if err := br.Close(); err != nil {
		return queryErr(-1, err)
	}
	if beforeCommit != nil {
		beforeCommit()
	}
	if err := tx.Commit(ctx); err != nil {
		return queryErr(-1, fmt.Errorf("commit: %w", err))
	}
	committed = true
	return nil
}

func (r *Runner) eventError(i int, rec event.Record, err error) error {
	return &EventError{Projection: r.proj.Name(), Index: i, Event: rec, Err: err}
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

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
