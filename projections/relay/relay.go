package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/internal/failpoint"
	"github.com/strata-es/strata/internal/pgsession"
	"github.com/strata-es/strata/projections"
)

// DefaultTopic is the topic events are published on: the JetStream stream
// (subjects strata_events.<tenant>.<event type>) or the watermill-sql table
// watermill_strata_events.
const DefaultTopic = "strata_events"

// Failpoints of the relay (internal/failpoint).
const (
	// FailpointAfterPublish is between the broker's acknowledgement of a
	// batch and the checkpoint's advance: a crash there re-publishes the
	// batch.
	FailpointAfterPublish = "relay.after-publish"
	// FailpointBeforeCommit is between a transactional batch's writes
	// (messages and checkpoint) and its COMMIT.
	FailpointBeforeCommit = "relay.before-commit"
)

// Config tunes a Relay. Zero values take the defaults; exactly one of
// Publisher and TxPublisher must be set.
type Config struct {
	// Topic is the watermill topic (default DefaultTopic): lower-case
	// [a-z0-9_], at most 56 bytes. The relay's checkpoint and lease are
	// named relay_<topic>; renaming the topic starts a new relay from the
	// first event.
	Topic string
	// Publisher publishes to a broker. Publish must return only once the
	// broker has acknowledged every message (watermill-nats with JetStream
	// does); the checkpoint advances afterwards, so a crash in between
	// publishes the batch again (at-least-once).
	Publisher message.Publisher
	// TxPublisher returns a publisher that writes into tx, the batch's
	// transaction, which also advances the checkpoint: messages are then
	// published exactly once (watermill-sql; see SQLTxPublisher).
	TxPublisher func(tx pgx.Tx) (message.Publisher, error)
	// BatchSize is the most events read and published at once (default 500).
	BatchSize int
	// PollInterval is how often the log is read when nothing wakes the
	// relay (default 1s).
	PollInterval time.Duration
	// LeaseRetry is how often a standby relay tries to take the lease
	// (default 3s).
	LeaseRetry time.Duration
	// MinErrorBackoff and MaxErrorBackoff bound the delay before a failed
	// batch is tried again (defaults 500ms and 30s). A batch is never
	// skipped.
	MinErrorBackoff, MaxErrorBackoff time.Duration
	// MaxMessageBytes is the most a message may weigh (its payload and its
	// metadata's keys and values); 0 leaves only the transport's own limit,
	// which a publisher implementing MessageChecker reports (NATSPublisher:
	// the server's max_payload). An event above either limit cannot be
	// published: its stream is parked for its tenant (poison.go).
	MaxMessageBytes int64
	// PanicAttempts is how often the relay tries an event whose publishing
	// panics before it parks the event's stream (default 3); the batch is
	// retried with backoff meanwhile.
	PanicAttempts int
	// FinishTimeout bounds each batch from read to checkpoint; on shutdown
	// the batch in flight may finish within it (default 15s, below serve's
	// shutdown timeout).
	FinishTimeout time.Duration
	// Wake, when set, returns a channel closed when new events may be
	// available (projections.Signal.C); it is taken before each read.
	Wake func() <-chan struct{}
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

var topicPattern = regexp.MustCompile(`^[a-z][a-z0-9_]{0,55}$`)

func (c *Config) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.Topic == "" {
		c.Topic = DefaultTopic
	}
	if c.BatchSize == 0 {
		c.BatchSize = 500
	}
	def(&c.PollInterval, time.Second)
	def(&c.LeaseRetry, 3*time.Second)
	def(&c.MinErrorBackoff, 500*time.Millisecond)
	def(&c.MaxErrorBackoff, 30*time.Second)
	def(&c.FinishTimeout, 15*time.Second)
	if c.PanicAttempts == 0 {
		c.PanicAttempts = 3
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports every invalid setting.
func (c Config) Validate() error {
	var errs []error
	if !topicPattern.MatchString(c.Topic) {
		errs = append(errs, fmt.Errorf("topic %q: want [a-z][a-z0-9_]{0,55}", c.Topic))
	}
	if (c.Publisher == nil) == (c.TxPublisher == nil) {
		errs = append(errs, errors.New("set exactly one of Publisher and TxPublisher"))
	}
	if c.BatchSize < 1 || c.BatchSize > 10_000 {
		errs = append(errs, fmt.Errorf("batch size %d: want 1 to 10000", c.BatchSize))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"poll interval", c.PollInterval}, {"lease retry", c.LeaseRetry}, {"min error backoff", c.MinErrorBackoff},
		{"max error backoff", c.MaxErrorBackoff}, {"finish timeout", c.FinishTimeout}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s %s: want a positive duration", d.name, d.v))
		}
	}
	if c.MaxMessageBytes < 0 {
		errs = append(errs, fmt.Errorf("max message bytes %d: want 0 (the transport's limit) or more", c.MaxMessageBytes))
	}
	if c.PanicAttempts < 1 {
		errs = append(errs, fmt.Errorf("panic attempts %d: want 1 or more", c.PanicAttempts))
	}
	if c.MaxErrorBackoff < c.MinErrorBackoff {
		errs = append(errs, errors.New("max error backoff is below min error backoff"))
	}
	return errors.Join(errs...)
}

// Status is a relay's view of itself.
type Status struct {
	Name       string
	State      projections.State
	Checkpoint event.Position // as of the last advance
	Published  int64          // messages published by this Relay value (re-publications included)
	Parked     int64          // events this Relay value parked in the dead-letter store
	Failed     int64          // rounds of this Relay value that failed (retried with backoff)
	LastError  string
	ErrorAt    time.Time
}

// Relay publishes the global log, in log order, from its checkpoint. Run
// must not be called concurrently on one Relay; Status may be called
// anytime.
type Relay struct {
	log    eventstore.Log
	pool   *pgxpool.Pool
	cfg    Config
	name   string
	logger *slog.Logger

	published atomic.Int64
	parked    atomic.Int64
	failed    atomic.Int64
	panics    map[string]int // owned by Run: attempts of events whose publishing panicked
	mu        sync.Mutex
	status    Status

	checkpoint event.Position          // owned by Run
	ledger     *projections.LedgerBook // owned by Run: the checkpoint's completeness ledger
}

// New returns a relay of log. pool must run as db.RoleProjector; the relay
// takes one connection out of it for as long as it runs (its session holds
// the lease and advances the checkpoint).
func New(log eventstore.Log, pool *pgxpool.Pool, cfg Config) (*Relay, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	name := CheckpointName(cfg.Topic)
	return &Relay{
		log:    log,
		pool:   pool,
		cfg:    cfg,
		name:   name,
		logger: cfg.Logger.With("relay", name),
		status: Status{Name: name, State: projections.StateStopped},
		panics: map[string]int{},
	}, nil
}

// CheckpointName is the relay's row in projection_checkpoints (and the
// name of its lease) for topic.
func CheckpointName(topic string) string { return "relay_" + topic }

// Name returns the relay's checkpoint name.
func (r *Relay) Name() string { return r.name }

// Status returns what the relay is doing.
func (r *Relay) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.status
	s.Published, s.Parked, s.Failed = r.published.Load(), r.parked.Load(), r.failed.Load()
	return s
}

func (r *Relay) setState(s projections.State) {
	r.mu.Lock()
	r.status.State = s
	r.mu.Unlock()
}

// Run publishes until ctx ends: it takes the lease (or waits as a
// standby), then publishes batches as events arrive. A failing batch is
// retried with backoff and never skipped. When ctx ends it lets the batch
// in flight finish (within FinishTimeout) and returns nil; it returns no
// other error (failures are in Status and the log).
func (r *Relay) Run(ctx context.Context) error {
	defer r.setState(projections.StateStopped)
	r.setState(projections.StateStarting)
	l := pgsession.Leader{Lease: lease, Name: r.name, Kind: "relay", Connect: r.connect,
		Retry: r.cfg.LeaseRetry, Lead: r.lead, Logger: r.logger,
		OnState: func(s pgsession.LeaderState) {
			if s == pgsession.LeaderStandby {
				r.setState(projections.StateStandby)
			} else {
				r.setState(projections.StateStarting)
			}
		}}
	return l.Run(ctx)
}

// lead publishes batches while this session holds the lease. It returns
// nil when ctx ends, and an error when the session is broken or the lease
// in doubt.
func (r *Relay) lead(ctx context.Context, conn *pgx.Conn) error {
	cp, generation, err := loadCheckpoint(ctx, conn, r.name)
	if err != nil {
		return err
	}
	r.checkpoint = cp
	r.ledger = projections.NewLedgerBook(r.name, generation)
	r.mu.Lock()
	r.status.State, r.status.Checkpoint = projections.StateRunning, cp
	r.mu.Unlock()
	r.logger.Info("relay active", "topic", r.cfg.Topic, "checkpoint", cp.Token(), "position", cp.String())

	var errDelay time.Duration
	for {
		var wake <-chan struct{}
		if r.cfg.Wake != nil {
			wake = r.cfg.Wake() // before reading: a wake-up during the read is not lost
		}
		if ctx.Err() != nil {
			r.stop(conn)
			return nil
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.FinishTimeout)
		more, err := r.step(sctx, conn)
		cancel()
		if errors.Is(err, errPaused) {
			// A dead-letter tool works on the relay's letters; it is done
			// within seconds.
			r.logger.Debug("relay paused by a dead-letter operation")
			if !pgsession.Sleep(ctx, min(r.cfg.PollInterval, 100*time.Millisecond)) {
				r.stop(conn)
				return nil
			}
			continue
		}
		if err != nil {
			var broker *brokerError
			if conn.IsClosed() || (!errors.As(err, &broker) && db.IsUnavailable(err)) || errors.Is(err, errCheckpointMoved) {
				return err
			}
			if more {
				errDelay = 0 // the round committed its first events: the backoff counts rounds without progress
			}
			errDelay = min(max(2*errDelay, r.cfg.MinErrorBackoff), r.cfg.MaxErrorBackoff)
			r.fail(ctx, conn, err, errDelay)
			if !pgsession.Sleep(ctx, errDelay) {
				r.stop(conn)
				return nil
			}
			continue
		}
		if errDelay > 0 {
			errDelay = 0
			r.setState(projections.StateRunning)
			r.logger.Info("relay recovered", "checkpoint", r.checkpoint.Token())
		}
		if more {
			continue
		}
		timer := time.NewTimer(r.cfg.PollInterval)
		select {
		case <-ctx.Done():
			timer.Stop()
			r.stop(conn)
			return nil
		case <-wake:
			timer.Stop()
		case <-timer.C:
			// An idle session may have died unnoticed while holding the
			// lease; a standby cannot take over until it is gone.
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := conn.Ping(pctx)
			cancel()
			if err != nil && ctx.Err() == nil {
				return fmt.Errorf("relay %s: lease session: %w", r.name, err)
			}
		}
	}
}

// step publishes one batch after the checkpoint and advances the
// checkpoint past the events it settled: published, parked under the
// poison rule (parking.go, poison.go) or skipped as copies of a moved
// tenant. more says that events are probably waiting: the batch was full,
// or the round committed only its first events. A round that failed after
// settling some events commits them and returns its error.
func (r *Relay) step(ctx context.Context, conn *pgx.Conn) (more bool, err error) {
	recs, err := r.log.ReadAll(ctx, r.checkpoint, r.cfg.BatchSize)
	if err != nil {
		return false, fmt.Errorf("read log after %s: %w", r.checkpoint, err)
	}
	if len(recs) == 0 {
		return false, nil
	}
	// A tenant that arrived by a move: the copies of its events were
	// published by the placement it left (their message IDs are the same,
	// but a consumer's deduplication window is short).
	arrived, err := projections.ReadArrivals(ctx, conn, true)
	if err != nil {
		return false, err
	}
	if err := r.ledger.Load(ctx, conn, recs); err != nil {
		return false, err
	}
	next := recs[len(recs)-1].Position
	tx, parked, err := r.begin(ctx, conn, recs)
	if err != nil {
		return false, err
	}
	defer rollback(ctx, tx) // a no-op once committed
	b, err := r.plan(ctx, recs, arrived, parked)
	if err != nil {
		return false, r.publishFailed(fmt.Errorf("publish events after %s: %w", r.checkpoint, err))
	}
	pub := func(msgs []*message.Message) error { return safePublish(r.cfg.Publisher, r.cfg.Topic, msgs) }
	if r.cfg.Publisher == nil {
		pub = func(msgs []*message.Message) error { return r.publishTx(ctx, tx, msgs) }
	}
	settled, perr := r.publish(b, pub, time.Now().Add(r.cfg.FinishTimeout/2))
	if settled == 0 {
		return false, r.publishFailed(fmt.Errorf("publish %d events after %s: %w", len(b.pending()), r.checkpoint, perr))
	}
	b.settle(settled)
	recs, next = b.recs, b.recs[settled-1].Position
	published := int64(len(b.pending()))
	if r.cfg.Publisher != nil {
		r.published.Add(published)
		r.logger.DebugContext(ctx, "published batch", "events", published, "first", recs[0].Position.String(), "last", next.String())
		failpoint.Hit(FailpointAfterPublish)
	}
	if err := r.park(ctx, tx, b); err != nil {
		return false, err
	}
	counted, err := advance(ctx, tx, r.ledger, r.name, recs, b.uses, r.checkpoint, next)
	if err != nil {
		return false, err
	}
	if r.cfg.TxPublisher != nil {
		failpoint.Hit(FailpointBeforeCommit)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("commit batch after %s: %w", r.checkpoint, err)
	}
	if r.cfg.TxPublisher != nil {
		r.published.Add(published)
		r.logger.DebugContext(ctx, "published batch", "events", published, "first", recs[0].Position.String(), "last", next.String())
	}
	r.logParks(b)
	r.parked.Add(int64(countParked(b)))
	r.forgetPanics(recs, perr == nil)
	r.checkpoint = next
	r.ledger.Commit(counted)
	r.mu.Lock()
	r.status.Checkpoint = next
	r.mu.Unlock()
	if perr != nil && !errors.Is(perr, errBudgetSpent) {
		// The events before the failing one are committed; the round
		// failed all the same, and the next starts at that event.
		return true, r.publishFailed(fmt.Errorf("publish events after %s: %w", r.checkpoint, perr))
	}
	return perr != nil || len(recs) == r.cfg.BatchSize, nil
}

// forgetPanics drops the panic counts of committed events: every count
// when the whole batch committed, else those of recs, the settled part (the
// event the round stopped at keeps its count).
func (r *Relay) forgetPanics(recs []event.Record, whole bool) {
	if whole {
		clear(r.panics)
		return
	}
	for _, rec := range recs {
		delete(r.panics, panicKey(rec))
	}
}

// brokerError is a failure of a broker's publisher. It may look like a
// database that is unavailable (nats.go reports a JetStream publication
// that timed out as context.DeadlineExceeded, a net.Error), but the
// relay's session is fine: the batch is retried on it, with the error
// recorded on the checkpoint row, instead of the session being dropped.
type brokerError struct{ err error }

func (e *brokerError) Error() string { return e.err.Error() }
func (e *brokerError) Unwrap() error { return e.err }

// publishFailed marks err as the broker's when the relay publishes to one;
// watermill-sql's failures are the database's own.
func (r *Relay) publishFailed(err error) error {
	if r.cfg.Publisher != nil {
		return &brokerError{err}
	}
	return err
}

func countParked(b *batch) int {
	n := 0
	for _, u := range b.uses {
		if u == projections.LedgerParked {
			n++
		}
	}
	return n
}

func (r *Relay) fail(ctx context.Context, conn *pgx.Conn, err error, retryIn time.Duration) {
	r.failed.Add(1)
	now := time.Now()
	r.mu.Lock()
	first := r.status.State != projections.StateError || r.status.LastError != err.Error()
	r.status.State, r.status.LastError, r.status.ErrorAt = projections.StateError, err.Error(), now
	r.mu.Unlock()
	if first {
		r.logger.Error("relay cannot publish; retrying with backoff, never skipping",
			"error", err.Error(), "checkpoint", r.checkpoint.Token(), "retry_in", retryIn.String())
	} else {
		r.logger.Warn("relay still failing", "error", err.Error(), "retry_in", retryIn.String())
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if rerr := projections.RecordCheckpointError(rctx, conn, r.name, err); rerr != nil {
		r.logger.Warn("cannot record the relay's error", "error", rerr.Error())
	}
}

func (r *Relay) stop(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := projections.RecordCheckpointStopped(ctx, conn, r.name); err != nil {
		r.logger.Warn("cannot record that the relay stopped", "error", err.Error())
	}
	r.logger.Info("relay stopped", "checkpoint", r.checkpoint.Token(), "published", r.published.Load())
}

// connect takes a connection out of the pool for good: the relay's session
// must end when the relay lets go of it, never return to the pool holding
// the lease.
func (r *Relay) connect(ctx context.Context) (*pgx.Conn, error) {
	c, err := r.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return c.Hijack(), nil
}

func u64(v uint64) string { return strconv.FormatUint(v, 10) }
