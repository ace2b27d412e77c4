package projections

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/domain/order"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/internal/db"
	"github.com/strata-es/strata/internal/failpoint"
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
	// Registry decodes payloads (default order.Registry).
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
}

func (c *RunnerConfig) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.BatchSize == 0 {
		c.BatchSize = 500
	}
	def(&c.PollInterval, time.Second)
	def(&c.MinRepoll, 2*time.Millisecond)
	def(&c.LeaseRetry, 3*time.Second)
	def(&c.MinErrorBackoff, 500*time.Millisecond)
	def(&c.MaxErrorBackoff, time.Minute)
	def(&c.FinishTimeout, 10*time.Second)
	if c.StreamCache == 0 {
		c.StreamCache = 100_000
	}
	if c.Registry == nil {
		c.Registry = order.Registry
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
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
	handles map[string]bool
	logger  *slog.Logger

	mu     sync.Mutex
	status RunnerStatus

	// Owned by the goroutine in Run or CatchUp.
	checkpoint event.Position
	streams    *streamCache
	catchingUp bool // the last batch was full: the next one is read at once
}

// NewRunner returns a runner of p reading log. pool must run as
// db.RoleProjector; the runner takes one connection out of it for as long
// as it runs (its session holds the lease and applies every batch).
func NewRunner(p Projection, log eventstore.Log, pool *pgxpool.Pool, cfg RunnerConfig) (*Runner, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("projection %s: %w", p.Name(), err)
	}
	locator, ok := log.(eventstore.VersionLocator)
	if !ok {
		return nil, fmt.Errorf("projection %s: the event log (%T) cannot locate stream versions, which the contiguity check needs", p.Name(), log)
	}
	handles := map[string]bool{}
	for _, t := range p.EventTypes() {
		handles[t] = true
	}
	return &Runner{
		proj:    p,
		log:     log,
		locator: locator,
		pool:    pool,
		cfg:     cfg,
		handles: handles,
		logger:  cfg.Logger.With("projection", p.Name()),
		status:  RunnerStatus{Name: p.Name(), State: StateStopped},
		streams: newStreamCache(cfg.StreamCache),
	}, nil
}

// Name returns the projection's name.
func (r *Runner) Name() string { return r.proj.Name() }

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
// (or waits as a standby), then applies batches as events arrive. On a
// failing batch it records the error, retries with backoff and never skips
// the event. When ctx ends it finishes the batch in flight and returns nil;
// it returns no other error (failures are in Status and the log).
func (r *Runner) Run(ctx context.Context) error {
	defer r.setState(StateStopped)
	r.setState(StateStarting)
	var conn *pgx.Conn
	defer func() { closeConn(conn) }()
	standbyLogged := false
	failures := 0 // consecutive sessions that ended early
	for ctx.Err() == nil {
		if conn == nil || conn.IsClosed() {
			closeConn(conn)
			conn = nil
			c, err := r.connect(ctx)
			if err != nil {
				if ctx.Err() == nil {
					r.logger.Warn("projection runner cannot connect; retrying", "error", err.Error(), "retry_in", r.cfg.LeaseRetry.String())
				}
				sleep(ctx, r.cfg.LeaseRetry)
				continue
			}
			conn = c
		}
		ok, err := tryLease(ctx, conn, r.proj.Name())
		if err != nil {
			closeConn(conn)
			conn = nil
			if ctx.Err() == nil {
				r.logger.Warn("projection runner cannot take its lease; retrying", "error", err.Error())
			}
			sleep(ctx, r.cfg.LeaseRetry)
			continue
		}
		if !ok {
			r.setState(StateStandby)
			if !standbyLogged {
				r.logger.Info("projection runner on standby: another session holds the lease", "retry_every", r.cfg.LeaseRetry.String())
				standbyLogged = true
			}
			sleep(ctx, r.cfg.LeaseRetry)
			continue
		}
		standbyLogged = false
		led := time.Now()
		err = r.lead(ctx, conn)
		// Ending the session releases the lease whatever state it is in.
		releaseLease(conn, r.proj.Name())
		closeConn(conn)
		conn = nil
		if ctx.Err() != nil {
			return nil
		}
		r.setState(StateStarting)
		// Reconnect at once after a long run; back off when sessions keep
		// failing right away (say, the schema is not migrated yet).
		if time.Since(led) > 10*time.Second {
			failures = 0
		}
		delay := min(100*time.Millisecond<<min(failures, 9), 30*time.Second)
		failures++
		r.logger.Warn("projection runner lost its session; reconnecting", "error", errString(err), "retry_in", delay.String())
		sleep(ctx, delay)
	}
	return nil
}

// lead runs batches while this session holds the lease. It returns nil when
// ctx ends, and an error when the session is broken or the lease in doubt.
func (r *Runner) lead(ctx context.Context, conn *pgx.Conn) error {
	cp, err := loadCheckpoint(ctx, conn, r.proj.Name())
	if err != nil {
		return err
	}
	r.checkpoint = cp
	r.streams.reset()
	r.catchingUp = false
	r.mu.Lock()
	r.status.State, r.status.Checkpoint = StateRunning, cp
	r.mu.Unlock()
	r.logger.Info("projection runner active", "checkpoint", cp.Token(), "position", cp.String())

	var (
		chasing  bool          // the last read was prompted by a wake-up
		repoll   time.Duration // current delay of re-reading after an empty wake-up
		errDelay time.Duration
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
		n, err := r.stepToCompletion(ctx, conn)
		if err != nil {
			if conn.IsClosed() || db.IsUnavailable(err) || errors.Is(err, errCheckpointMoved) {
				return err
			}
			errDelay = min(max(2*errDelay, r.cfg.MinErrorBackoff), r.cfg.MaxErrorBackoff)
			r.fail(ctx, conn, err, errDelay)
			if !sleep(ctx, errDelay) {
				r.stop(conn)
				return nil
			}
			continue
		}
		if errDelay > 0 {
			errDelay = 0
			r.setState(StateRunning)
			r.logger.Info("projection runner recovered", "checkpoint", r.checkpoint.Token())
		}
		if n == r.cfg.BatchSize {
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
		timer := time.NewTimer(timeout)
		select {
		case <-ctx.Done():
			timer.Stop()
			r.stop(conn)
			return nil
		case <-wake:
			timer.Stop()
			chasing, repoll = true, 0
		case <-timer.C:
			// After a re-poll delay keep chasing; after a plain poll not.
			chasing = repoll > 0
			if !chasing {
				// An idle session may have died unnoticed (it holds the
				// lease, and a standby cannot take over until it is gone).
				pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := conn.Ping(pctx)
				cancel()
				if err != nil && ctx.Err() == nil {
					return fmt.Errorf("projection %s: lease session: %w", r.proj.Name(), err)
				}
			}
		}
	}
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
	if rerr := recordError(rctx, conn, r.proj.Name(), err); rerr != nil {
		r.logger.Warn("cannot record the projection's error", "error", rerr.Error())
	}
}

func (r *Runner) stop(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := recordStopped(ctx, conn, r.proj.Name()); err != nil {
		r.logger.Warn("cannot record that the projection stopped", "error", err.Error())
	}
	r.logger.Info("projection runner stopped", "checkpoint", r.checkpoint.Token())
}

// CatchUp takes the lease, applies batches until the checkpoint reaches
// until (or, when until is zero, until no further event is visible), and
// gives the lease back. It is for tests, benchmarks and tools that drive a
// projection in the foreground. Errors: ErrLeaseHeld, and any batch error
// (an *EventError for an event that cannot be applied).
func (r *Runner) CatchUp(ctx context.Context, until event.Position) error {
	conn, err := r.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn(conn)
	ok, err := tryLease(ctx, conn, r.proj.Name())
	if err != nil {
		return err
	}
	if !ok {
		return ErrLeaseHeld
	}
	defer releaseLease(conn, r.proj.Name())
	if r.checkpoint, err = loadCheckpoint(ctx, conn, r.proj.Name()); err != nil {
		return err
	}
	r.streams.reset()
	r.catchingUp = false
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = recordStopped(sctx, conn, r.proj.Name())
	}()
	repoll := r.cfg.MinRepoll
	for until.IsZero() || r.checkpoint.Less(until) {
		n, err := r.step(ctx, conn)
		if err != nil {
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
		if !sleep(ctx, repoll) {
			return ctx.Err()
		}
		repoll = min(2*repoll, 100*time.Millisecond)
	}
	return nil
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
		decoded, err = sh.read(ctx, r, r.checkpoint, r.cfg.BatchSize, r.catchingUp)
		if decoded != nil {
			recs = decoded.recs
		}
	} else {
		recs, err = r.log.ReadAll(ctx, r.checkpoint, r.cfg.BatchSize)
	}
	if err != nil {
		r.catchingUp = false
		return 0, fmt.Errorf("read log after %s: %w", r.checkpoint, err)
	}
	r.catchingUp = len(recs) == r.cfg.BatchSize
	if len(recs) == 0 {
		return 0, nil
	}
	last, err := checkContiguous(ctx, r.locator, r.streams, recs)
	if err != nil {
		return 0, fmt.Errorf("projection %s: %w", r.proj.Name(), err)
	}
	items, err := r.prepare(recs, decoded)
	if err != nil {
		return 0, err
	}
	next := recs[len(recs)-1].Position
	bp, setBased := r.proj.(BatchProjection)
	setBased = setBased && !r.cfg.PerEvent
	err = r.apply(ctx, conn, recs, items, next, bp, setBased)
	var sbe *setBasedError
	if errors.As(err, &sbe) && !conn.IsClosed() && !db.IsUnavailable(err) && ctx.Err() == nil {
		// Find the event: the same batch again, event by event.
		if err = r.apply(ctx, conn, recs, items, next, bp, false); err == nil {
			r.logger.Warn("a batch failed as a whole but applied event by event: the projection's two paths disagree",
				"error", sbe.Error())
		}
	}
	if err != nil {
		return 0, err
	}
	r.checkpoint = next
	for k, v := range last {
		r.streams.put(k, v)
	}
	if r.logger.Enabled(ctx, slog.LevelDebug) {
		r.logger.DebugContext(ctx, "applied batch", "events", len(recs), "handled", len(items),
			"checkpoint", next.String(), "took", time.Since(began).String())
	}
	r.mu.Lock()
	r.status.Checkpoint = next
	r.mu.Unlock()
	if r.cfg.Progress != nil {
		r.cfg.Progress.advance(r.proj.Name(), next)
	}
	return len(recs), nil
}

// item is an event the projection handles, decoded, with its index in the
// batch as read from the log.
type item struct {
	idx int
	ev  Event
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
		if !r.handles[rec.Type] {
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
			return nil, r.eventError(i, rec, err)
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
	ownerRunner = -1 // BEGIN, the checkpoint, set_config
	ownerGroup  = -2 // a set-based statement of a tenant's events
)

// apply sends the batch in one pipelined round trip: BEGIN, the checkpoint
// move, then per tenant its set_config and the statements of its events
// (set-based, or event by event), and commits in a second round trip.
func (r *Runner) apply(ctx context.Context, conn *pgx.Conn, recs []event.Record, items []item, next event.Position, bp BatchProjection, setBased bool) error {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	b.Queue(advanceSQL, r.proj.Name(), u64(next.Major), u64(next.Minor), u64(r.checkpoint.Major), u64(r.checkpoint.Minor)).
		Exec(func(ct pgconn.CommandTag) error {
			if ct.RowsAffected() != 1 {
				return errCheckpointMoved
			}
			return nil
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
			for _, it := range items[lo:hi] {
				evs = append(evs, it.ev)
			}
			n := b.Len()
			if err := bp.ApplyBatch(b, evs); err != nil {
				return &setBasedError{err}
			}
			for range b.Len() - n {
				owner = append(owner, ownerGroup)
			}
		} else {
			for _, it := range items[lo:hi] {
				n := b.Len()
				if err := r.proj.Apply(b, it.ev); err != nil {
					return r.eventError(it.idx, it.ev.Record, err)
				}
				for range b.Len() - n {
					owner = append(owner, it.idx)
				}
			}
		}
		lo = hi
	}

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
			switch o := owner[k]; {
			case o >= 0:
				return r.eventError(o, recs[o], err)
			case o == ownerGroup:
				return &setBasedError{err}
			}
			return fmt.Errorf("projection %s: apply batch: %w", r.proj.Name(), err)
		}
	}
	if err := br.Close(); err != nil {
		return fmt.Errorf("projection %s: apply batch: %w", r.proj.Name(), err)
	}
	failpoint.Hit(FailpointBeforeCommit)
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("projection %s: commit batch: %w", r.proj.Name(), err)
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
	return c.Hijack(), nil
}

func closeConn(conn *pgx.Conn) {
	if conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

// sleep waits for d or ctx; it reports whether the full d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
