package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/projections"
)

var consumerPattern = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)

// ConsumerConfig tunes a Consumer. Zero values take the defaults.
type ConsumerConfig struct {
	// Topic subscribed to (default DefaultTopic).
	Topic string
	// MaxRetries is how often a failing message is tried again before it is
	// dead-lettered (default 3; a negative value means no retry). Retries
	// wait InitialInterval (default 100ms), doubling up to MaxInterval
	// (default 2s). Their total must stay well below the subscriber's ack
	// deadline (NATSConfig.AckWait, SQLConfig.AckDeadline).
	MaxRetries                   int
	InitialInterval, MaxInterval time.Duration
	// Sink stores dead letters (default StoreSink: the shared dead-letter
	// store that `strata replay dlq` works on).
	Sink DeadLetterSink
	// Registry decodes payloads. Required: the process's one registry.
	Registry *event.Registry
	// CloseTimeout bounds the wait for messages in flight on shutdown
	// (default 30s).
	CloseTimeout time.Duration
	// TracerProvider makes the consumer spans (default the global one).
	TracerProvider trace.TracerProvider
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

func (c *ConsumerConfig) setDefaults() {
	if c.Topic == "" {
		c.Topic = DefaultTopic
	}
	switch {
	case c.MaxRetries == 0:
		c.MaxRetries = 3
	case c.MaxRetries < 0:
		c.MaxRetries = 0
	}
	if c.InitialInterval == 0 {
		c.InitialInterval = 100 * time.Millisecond
	}
	if c.MaxInterval == 0 {
		c.MaxInterval = 2 * time.Second
	}
	if c.Sink == nil {
		c.Sink = StoreSink{}
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = 30 * time.Second
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports every invalid setting.
func (c ConsumerConfig) Validate() error {
	var errs []error
	if !topicPattern.MatchString(c.Topic) {
		errs = append(errs, fmt.Errorf("topic %q: want [a-z][a-z0-9_]{0,55}", c.Topic))
	}
	if c.InitialInterval <= 0 || c.MaxInterval < c.InitialInterval {
		errs = append(errs, errors.New("retry intervals: want 0 < initial <= max"))
	}
	if c.CloseTimeout <= 0 {
		errs = append(errs, errors.New("close timeout: want a positive duration"))
	}
	if c.Registry == nil {
		errs = append(errs, errors.New("registry is required (the process's event registry)"))
	}
	return errors.Join(errs...)
}

// Errors of handling a message that never dead-letter it: it is nacked and
// delivered again later.
var (
	// ErrShuttingDown: the consumer was closing while the message was
	// handled (the router cancels the context of messages in flight).
	ErrShuttingDown = errors.New("consumer shutting down")
	// ErrVersionGap: an earlier version of the event's stream has not
	// arrived yet.
	ErrVersionGap = errors.New("stream version gap")
	// ErrPaused: a dead-letter operation (`strata replay dlq retry` or
	// `discard`, or the admin routes) holds the consumer's pause lock for
	// a moment (projections.AcquireExclusive on the consumer's name).
	ErrPaused = errors.New("consumer paused by a dead-letter operation")
)

// GapError is a message whose stream's previous version was never applied.
// The consumer nacks it and waits, never skipping: with one message in
// flight and log-ordered delivery a gap means an earlier message was lost
// or the subscription started after the stream's first event, and the
// consumer stops there (as a projection runner stops at a hole) until the
// missing version arrives.
type GapError struct {
	Consumer        string
	Tenant, Stream  string
	Applied, Got    int64
	EventID, TypeOf string
}

func (e *GapError) Error() string {
	return fmt.Sprintf("consumer %s: %s/%s: got version %d (event %s, %s) after version %d", e.Consumer, e.Tenant, e.Stream, e.Got, e.EventID, e.TypeOf, e.Applied)
}

func (e *GapError) Unwrap() error { return ErrVersionGap }

// poisonable reports whether err is the event's fault (a payload that does
// not decode, a projection that rejects the event, a statement that fails)
// rather than the circumstances': shutting down, a deadline, an earlier
// version missing, a message that is no relayed event at all (it names no
// tenant stream to park), or the database being unavailable. Only the
// former are dead-lettered after the retries.
func poisonable(err error) bool {
	switch {
	case err == nil,
		errors.Is(err, ErrShuttingDown),
		errors.Is(err, context.Canceled),
		errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, ErrVersionGap),
		errors.Is(err, ErrPaused),
		errors.Is(err, ErrBadMessage),
		errors.Is(err, errConcurrent),
		db.IsUnavailable(err):
		return false
	}
	return true
}

// retryable reports whether trying again at once may help.
func retryable(err error) bool {
	return !errors.Is(err, ErrShuttingDown) && !errors.Is(err, ErrVersionGap) && !errors.Is(err, ErrBadMessage) && !errors.Is(err, ErrPaused)
}

// errConcurrent: another delivery of the stream's messages committed first.
var errConcurrent = errors.New("stream applied concurrently")

// Consumer feeds projections from watermill subscribers: a Router with one
// handler per projection. Each message is applied in one transaction that
// also records, per (consumer, tenant, stream), the version applied, so a
// redelivered message changes nothing and a version gap is noticed. A
// message that keeps failing is retried (middleware.Retry), then parked in
// the DeadLetterSink together with its stream version, in one transaction,
// instead of going to a poison topic (middleware.PoisonQueueWithFilter,
// outermost, with the sink behind a Publisher). A message that failed
// because the consumer was shutting down is nacked, not parked.
type Consumer struct {
	pool     *pgxpool.Pool
	cfg      ConsumerConfig
	router   *message.Router
	tracer   trace.Tracer
	logger   *slog.Logger
	closing  atomic.Bool
	names    map[string]bool
	handlers []*handler
}

// NewConsumer returns a consumer applying messages with pool, which must
// run as db.RoleProjector.
func NewConsumer(pool *pgxpool.Pool, cfg ConsumerConfig) (*Consumer, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("relay consumer: %w", err)
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: cfg.CloseTimeout}, watermillLogger(cfg.Logger))
	if err != nil {
		return nil, fmt.Errorf("relay consumer: %w", err)
	}
	return &Consumer{
		pool:   pool,
		cfg:    cfg,
		router: router,
		tracer: cfg.TracerProvider.Tracer("github.com/strata-es/strata/projections/relay"),
		logger: cfg.Logger,
		names:  map[string]bool{},
	}, nil
}

// Add feeds p from sub under the consumer name name: the subscriber's
// durable consumer or consumer group (NewNATSSubscriber,
// NewSQLSubscriber), the key of the versions it applied and of its dead
// letters, and the name of its row in projection_checkpoints (which Run
// creates, recording p's name and tables, so that `strata replay dlq
// retry` can re-apply the consumer's letters). Like a projection's name,
// renaming it makes a new consumer that starts over. The name must not be
// that of a projection or a relay (Run refuses it: their dead letters
// would mix), and p's tables must not also be written by a projection
// runner. Add must be called before Run.
func (c *Consumer) Add(name string, p projections.Projection, sub message.Subscriber) error {
	if !consumerPattern.MatchString(name) {
		return fmt.Errorf("relay consumer: name %q: want [a-z][a-z0-9_]{0,62}", name)
	}
	if c.names[name] {
		return fmt.Errorf("relay consumer: %s added twice", name)
	}
	c.names[name] = true
	h := &handler{c: c, name: name, proj: p, handles: map[string]bool{}, logger: c.logger.With("consumer", name)}
	c.handlers = append(c.handlers, h)
	for _, t := range p.EventTypes() {
		h.handles[t] = true
	}
	poison, err := middleware.PoisonQueueWithFilter(parker{h}, "dead_letters", func(err error) bool {
		return !c.closing.Load() && poisonable(err)
	})
	if err != nil {
		return err
	}
	retry := middleware.Retry{
		MaxRetries:      c.cfg.MaxRetries,
		InitialInterval: c.cfg.InitialInterval,
		MaxInterval:     c.cfg.MaxInterval,
		Multiplier:      2,
		ShouldRetry: func(p middleware.RetryParams) bool {
			return !c.closing.Load() && retryable(p.Err)
		},
	}
	// First added is outermost: the span and attempt counter around
	// everything, then PoisonQueue around Retry around Recoverer (a panic
	// becomes an error that Retry sees), so that a message is dead-lettered
	// only after its last retry (watermill #580/#645).
	c.router.AddConsumerHandler(name, c.cfg.Topic, sub, h.handle).
		AddMiddleware(h.observe, poison, retry.Middleware, middleware.Recoverer)
	return nil
}

// Running is closed once the consumer's handlers are subscribed.
func (c *Consumer) Running() <-chan struct{} { return c.router.Running() }

// Run consumes until ctx ends, then stops taking messages, waits for the
// ones in flight (within CloseTimeout) and returns. Messages whose handling
// the shutdown interrupted are nacked and delivered again later, never
// dead-lettered.
func (c *Consumer) Run(ctx context.Context) error {
	if len(c.names) == 0 {
		return errors.New("relay consumer: nothing to consume")
	}
	for _, h := range c.handlers {
		if err := c.register(ctx, h); err != nil {
			return err
		}
	}
	done := make(chan error, 1)
	// The router gets its own context: on shutdown the closing flag must be
	// set before the router cancels anything.
	go func() { done <- c.router.Run(context.WithoutCancel(ctx)) }()
	select {
	case <-ctx.Done():
		c.closing.Store(true)
		err := c.router.Close()
		return errors.Join(err, <-done)
	case err := <-done:
		if err == nil {
			err = errors.New("every subscription ended")
		}
		return fmt.Errorf("relay consumer: %w", err)
	}
}

// register records the consumer's row in projection_checkpoints (see
// projections.RegisterConsumer), waiting for a database that is not
// available yet.
func (c *Consumer) register(ctx context.Context, h *handler) error {
	for {
		err := projections.RegisterConsumer(ctx, c.pool, h.name, h.proj)
		if err == nil || !db.IsUnavailable(err) || ctx.Err() != nil {
			if err != nil {
				return fmt.Errorf("relay consumer: %w", err)
			}
			return nil
		}
		h.logger.Warn("cannot register the consumer yet; retrying", "error", err.Error())
		select {
		case <-ctx.Done():
			return fmt.Errorf("relay consumer: %w", err)
		case <-time.After(time.Second):
		}
	}
}

// handler applies one consumer's messages.
type handler struct {
	c       *Consumer
	name    string
	proj    projections.Projection
	handles map[string]bool
	logger  *slog.Logger
}

type attemptsKey struct{}

// observe is the outermost middleware: one span per delivery (a child of
// the trace context in the message), and a counter of attempts for the
// dead letter.
func (h *handler) observe(next message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		ctx := propagation.TraceContext{}.Extract(msg.Context(), propagation.MapCarrier(msg.Metadata))
		ctx, span := h.c.tracer.Start(ctx, "relay.consume "+msg.Metadata.Get(MetaType),
			trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(
				attribute.String("messaging.destination.name", h.c.cfg.Topic),
				attribute.String("messaging.consumer.group.name", h.name),
				attribute.String("messaging.message.id", msg.UUID),
				attribute.String("strata.tenant", msg.Metadata.Get(MetaTenant)),
				attribute.String("strata.event_id", msg.Metadata.Get(MetaEventID)),
				attribute.String("strata.stream", msg.Metadata.Get(MetaStream)),
				attribute.String("strata.version", msg.Metadata.Get(MetaVersion)),
			))
		defer span.End()
		attempts := new(atomic.Int32)
		msg.SetContext(context.WithValue(ctx, attemptsKey{}, attempts))
		out, err := next(msg)
		span.SetAttributes(attribute.Int("strata.attempts", int(attempts.Load())))
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		return out, err
	}
}

func attemptsOf(ctx context.Context) int {
	if a, ok := ctx.Value(attemptsKey{}).(*atomic.Int32); ok {
		return int(a.Load())
	}
	return 0
}

// handle is one attempt at applying msg.
func (h *handler) handle(msg *message.Message) error {
	ctx := msg.Context()
	if a, ok := ctx.Value(attemptsKey{}).(*atomic.Int32); ok {
		a.Add(1)
	}
	rec, err := RecordFromMessage(msg)
	if err != nil {
		h.logger.Error("message is not a relayed event; nacked, never skipped", "message_uuid", msg.UUID, "error", err.Error())
		return err
	}
	err = h.apply(ctx, rec)
	if err != nil && (ctx.Err() != nil || h.c.closing.Load()) {
		return fmt.Errorf("%w: %w", ErrShuttingDown, err)
	}
	var gap *GapError
	if errors.As(err, &gap) {
		h.logger.Warn("stream version gap: waiting for the missing version, never skipping", "error", gap.Error())
	}
	return err
}

// locked starts the transaction of rec under its tenant and returns the
// stream's applied version, locked. The transaction first probes the
// consumer's pause lock, which it then holds in shared mode until it ends:
// a dead-letter operation on the consumer's letters (a retry or discard,
// which change which streams are parked) takes that lock exclusively, so
// it waits for the transactions in flight, and while it works every new
// one finds the lock taken and is given up with ErrPaused (the message is
// nacked and comes again). The consumer's checks of parked streams and
// its parking therefore never interleave with the tool's.
func (h *handler) locked(ctx context.Context, rec event.Record) (pgx.Tx, int64, error) {
	tx, err := h.c.pool.BeginTx(ctx, pgx.TxOptions{})
	if err != nil {
		return nil, 0, fmt.Errorf("consumer %s: begin: %w", h.name, err)
	}
	b := &pgx.Batch{}
	var paused bool
	projections.QueuePauseProbe(b, h.name, &paused)
	b.Queue(db.SetTenantSQL, rec.Tenant)
	var applied int64
	b.Queue(`SELECT coalesce((SELECT version FROM relay_applied WHERE tenant_id = $1 AND consumer = $2 AND stream_id = $3 FOR UPDATE), 0)`,
		rec.Tenant, h.name, rec.Stream).QueryRow(func(row pgx.Row) error { return row.Scan(&applied) })
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		rollback(ctx, tx)
		return nil, 0, fmt.Errorf("consumer %s: applied version of %s/%s: %w", h.name, rec.Tenant, rec.Stream, err)
	}
	if paused {
		rollback(ctx, tx)
		h.logger.Debug("consumer paused by a dead-letter operation; message nacked", "tenant", rec.Tenant, "stream", rec.Stream, "version", rec.Version)
		return nil, 0, fmt.Errorf("consumer %s: %w", h.name, ErrPaused)
	}
	return tx, applied, nil
}

// check classifies rec against the applied version: apply (true), a
// duplicate to acknowledge (false, nil) or a gap.
func (h *handler) check(rec event.Record, applied int64) (bool, error) {
	switch {
	case rec.Version <= applied:
		return false, nil
	case rec.Version > applied+1:
		return false, &GapError{Consumer: h.name, Tenant: rec.Tenant, Stream: rec.Stream, Applied: applied, Got: rec.Version, EventID: rec.ID, TypeOf: rec.Type}
	}
	return true, nil
}

// markSQL records rec's version as handled; it changes one row only if the
// stream was at the previous version.
const markSQL = `INSERT INTO relay_applied (tenant_id, consumer, stream_id, version, event_id, position)
VALUES ($1, $2, $3, $4, $5::uuid, $6)
ON CONFLICT (tenant_id, consumer, stream_id) DO UPDATE
SET version = excluded.version, event_id = excluded.event_id, position = excluded.position, updated_at = now()
WHERE relay_applied.version = excluded.version - 1`

func (h *handler) queueMark(b *pgx.Batch, rec event.Record) {
	b.Queue(markSQL, rec.Tenant, h.name, rec.Stream, rec.Version, rec.ID, rec.Position.Token()).
		Exec(func(ct pgconn.CommandTag) error {
			if ct.RowsAffected() != 1 {
				return errConcurrent
			}
			return nil
		})
}

// apply applies rec (or parks it behind its parked stream) exactly once.
func (h *handler) apply(ctx context.Context, rec event.Record) error {
	tx, applied, err := h.locked(ctx, rec)
	if err != nil {
		return err
	}
	defer rollback(ctx, tx)
	ok, err := h.check(rec, applied)
	if !ok {
		return err // nil for a duplicate: acknowledged, nothing changes
	}
	// Events of types the projection does not handle never concern it:
	// they are only recorded as handled, on a parked stream too (as a
	// runner does not park them).
	parked := false
	if h.handles[rec.Type] {
		if parked, err = h.c.cfg.Sink.Parked(ctx, tx, h.name, rec.Tenant, rec.Stream); err != nil {
			return err
		}
	}
	if parked {
		if err := h.c.cfg.Sink.Park(ctx, tx, DeadLetter{Consumer: h.name, Event: rec, Reason: "parked behind an earlier dead letter of its stream"}); err != nil {
			return err
		}
		b := &pgx.Batch{}
		h.queueMark(b, rec)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("consumer %s: %w", h.name, err)
		}
		if err := tx.Commit(ctx); err != nil {
			return fmt.Errorf("consumer %s: commit: %w", h.name, err)
		}
		h.logger.Warn("event parked behind its stream's dead letter", "tenant", rec.Tenant, "stream", rec.Stream, "version", rec.Version, "event_id", rec.ID)
		return nil
	}
	b := &pgx.Batch{}
	if h.handles[rec.Type] {
		payload, err := h.c.cfg.Registry.DecodeRecord(rec)
		if err != nil {
			return h.eventError(rec, err)
		}
		if err := projections.ApplyEvent(h.proj, b, projections.Event{Record: rec, Payload: payload}); err != nil {
			return h.eventError(rec, err)
		}
	}
	h.queueMark(b, rec)
	projections.GuardCallbacks(b)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		if errors.Is(err, errConcurrent) {
			return err
		}
		return h.eventError(rec, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("consumer %s: commit: %w", h.name, err)
	}
	return nil
}

func (h *handler) eventError(rec event.Record, err error) error {
	return &projections.EventError{Projection: h.name, Event: rec, Err: err}
}

// park dead-letters msg after its last failed attempt: the letter, and the
// stream version as handled, in one transaction.
func (h *handler) park(msg *message.Message) error {
	ctx := msg.Context()
	rec, err := RecordFromMessage(msg)
	if err != nil {
		return err
	}
	tx, applied, err := h.locked(ctx, rec)
	if err != nil {
		return err
	}
	defer rollback(ctx, tx)
	if ok, err := h.check(rec, applied); !ok {
		return err
	}
	md := make(map[string]string, len(msg.Metadata))
	for k, v := range msg.Metadata {
		md[k] = v
	}
	letter := DeadLetter{Consumer: h.name, Event: rec, Reason: msg.Metadata.Get(middleware.ReasonForPoisonedKey), Attempts: attemptsOf(ctx), Metadata: md}
	if err := h.c.cfg.Sink.Park(ctx, tx, letter); err != nil {
		return err
	}
	b := &pgx.Batch{}
	h.queueMark(b, rec)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("consumer %s: %w", h.name, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("consumer %s: commit: %w", h.name, err)
	}
	h.logger.Error("event dead-lettered after its retries; its stream is parked for this consumer",
		"tenant", rec.Tenant, "stream", rec.Stream, "version", rec.Version, "event_id", rec.ID,
		"attempts", letter.Attempts, "reason", letter.Reason)
	return nil
}

// parker is the Publisher PoisonQueue publishes to: it parks messages in
// the dead-letter store instead of publishing them to a poison topic. When
// parking fails, PoisonQueue returns the error and the message is nacked.
type parker struct{ h *handler }

func (p parker) Publish(_ string, msgs ...*message.Message) error {
	for _, m := range msgs {
		if err := p.h.park(m); err != nil {
			return err
		}
	}
	return nil
}

func (parker) Close() error { return nil }

func rollback(ctx context.Context, tx pgx.Tx) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = tx.Rollback(rctx)
}
