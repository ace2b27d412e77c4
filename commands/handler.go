package commands

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
)

// Errors of command handling, beyond the domain's rule errors.
var (
	// ErrVersionConflict: the aggregate changed since the version the
	// client named in If-Match, or conflicts outlasted the retries.
	ErrVersionConflict = eventstore.ErrVersionConflict
	// ErrIdempotencyKeyReused: the key was used before with another request.
	ErrIdempotencyKeyReused = errors.New("idempotency key was used with a different request")
)

// Config tunes a Handler.
type Config struct {
	// Registry encodes the events commands decide and decodes the histories
	// they load. Required: the process's one registry, holding every
	// module's codecs.
	Registry *event.Registry
	// MaxAttempts bounds how often a command is decided and appended when
	// concurrent writers keep moving the aggregate (no If-Match). Default
	// 10: each conflict is another writer's success, so n concurrent
	// commands on one aggregate all succeed when MaxAttempts >= n.
	MaxAttempts int
	// Now is the clock (tests inject one). Default time.Now.
	Now func() time.Time
	// Middleware wraps the execution of every command, outermost first
	// (telemetry's spans and metrics). It sees every aggregate's commands
	// alike, through Named.
	Middleware []Middleware
	// CacheBytes bounds the recently written streams' histories kept in
	// memory, saving the read before the append of the next command on the
	// same aggregate (default 2 MiB per aggregate type, for the streams
	// being written now: about 600 of the soak's orders; negative
	// disables). Correctness does not depend on it: appends carry the exact
	// expected version. It was 2,048 streams whatever their size: 7 MiB of
	// the soak's orders (the heap profile), the largest part of a serving
	// process's heap, and minutes of filling (R18).
	CacheBytes int
}

func (c *Config) setDefaults() {
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 10
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.CacheBytes == 0 {
		c.CacheBytes = 2 << 20
	}
}

// Validate reports every invalid setting.
func (c Config) Validate() error {
	if c.Registry == nil {
		return errors.New("commands: Config.Registry is required (the process's event registry)")
	}
	return nil
}

// Handler executes commands on aggregates of one type against the event
// store: load (or take the cached history), decide, append with the loaded
// version as the expected one, retry conflicts, and record idempotency
// outcomes atomically with the append.
type Handler[A any] struct {
	runner
	agg   Aggregate[A]
	store eventstore.Store
	cache *historyCache
	// snaps is the store's snapshots when the aggregate keeps them
	// (snapshots.go); the history cache is then off.
	snaps eventstore.SnapshotStore
}

var _ Executor[int] = (*Handler[int])(nil)

// NewHandler returns a handler for the aggregate agg. idem may be nil when
// idempotency keys are not supported by the deployment (requests with a
// key then fail).
func NewHandler[A any](agg Aggregate[A], store eventstore.Store, idem eventstore.IdempotencyStore, cfg Config) (*Handler[A], error) {
	cfg.setDefaults()
	if err := errors.Join(agg.Validate(), cfg.Validate()); err != nil {
		return nil, err
	}
	h := &Handler[A]{runner: runner{idem: idem, cfg: cfg}, agg: agg, store: store}
	if snaps, ok := store.(eventstore.SnapshotStore); ok && agg.Snapshots != nil {
		h.snaps = snaps
	} else {
		h.cache = newHistoryCache(cfg.CacheBytes)
	}
	return h, nil
}

// Idempotency carries an Idempotency-Key and how to render the outcome
// stored under it.
type Idempotency struct {
	Key string
	// RequestHash fingerprints the request (method, route, parameters and
	// canonical body); a reused key with another hash is rejected.
	RequestHash string
	// Respond renders what the client receives for res (err == nil) or for
	// a definite rejection err. The bytes are stored and replayed verbatim.
	Respond func(res Result, err error) ([]byte, error)
}

// Options are the per-request inputs beside the command.
type Options struct {
	// ExpectedVersion, when set (If-Match), makes a version mismatch an
	// immediate ErrVersionConflict instead of a retry.
	ExpectedVersion *int64
	Idempotency     *Idempotency
	// Metadata is stamped on every event (correlation, actor, trace
	// context); CommandID is filled in by the handler.
	Metadata event.Metadata
}

// Result is the outcome of a command.
type Result struct {
	// ID is the aggregate's (the command's target).
	ID       string
	Version  int64
	Position event.Position
	// Replayed holds the stored response when the command was already
	// executed under the same idempotency key; nothing was executed now.
	Replayed []byte
}

// eventIDSpace namespaces the deterministic event IDs derived from a
// command ID.
var eventIDSpace = uuid.MustParse("6f1c1b3a-5d1e-4f5e-9a0b-2c7d8e9f0a1b")

// CommandID is the ID of the command tenant sent with the idempotency key
// key: stamped as command_id on the metadata of every event it appends, and
// the root of their event IDs.
func CommandID(tenant, key string) string {
	return uuid.NewSHA1(eventIDSpace, []byte(tenant+"\x00"+key)).String()
}

// HandleFunc executes one command.
type HandleFunc func(ctx context.Context, cmd Named, opts Options) (Result, error)

// Middleware wraps a HandleFunc: it may change the context and options
// (e.g. the trace context events carry) and observe the outcome.
type Middleware func(next HandleFunc) HandleFunc

// Handle executes cmd for the tenant in ctx, through the middleware.
func (h *Handler[A]) Handle(ctx context.Context, cmd Command[A], opts Options) (Result, error) {
	if len(h.cfg.Middleware) == 0 {
		return h.handle(ctx, cmd, opts)
	}
	next := HandleFunc(func(ctx context.Context, _ Named, opts Options) (Result, error) { return h.handle(ctx, cmd, opts) })
	for i := len(h.cfg.Middleware) - 1; i >= 0; i-- {
		next = h.cfg.Middleware[i](next)
	}
	return next(ctx, cmd, opts)
}

func (h *Handler[A]) handle(ctx context.Context, cmd Command[A], opts Options) (Result, error) {
	x, res, done, err := h.start(ctx, opts)
	if done || err != nil {
		return res, err
	}
	stream := h.agg.Stream(cmd.Target())
	return h.execute(ctx, x, opts, func(first bool) (Result, error) {
		return h.attempt(ctx, x.tenant, stream, cmd, opts, x.meta, x.commandID, first)
	})
}

func startsStream(cmd any) bool {
	s, ok := cmd.(StreamStarter)
	return ok && s.StartsStream()
}

// load returns the stream's history: the records read from the store
// (nil when it came from the cache), their payloads, and the history
// packed for the cache (nil without one).
func (h *Handler[A]) load(ctx context.Context, key cacheKey, cmd Command[A], opts Options, first bool) ([]event.Record, []event.Payload, packedHistory, error) {
	if first && opts.ExpectedVersion == nil && opts.Idempotency == nil {
		if packed, ok := h.cache.get(key); ok {
			payloads, err := packed.decode(h.cfg.Registry, key)
			if err == nil {
				return nil, payloads, packed, nil
			}
			// Whatever failed, the store's copy decides (and reports it).
		} else if startsStream(cmd) {
			return nil, nil, nil, nil
		}
	}
	h.cache.drop(key)
	history, err := h.store.ReadStream(ctx, key.tenant, key.stream, 0)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("load %s: %w", key.stream, err)
	}
	payloads := make([]event.Payload, len(history))
	for i, rec := range history {
		if payloads[i], err = h.cfg.Registry.DecodeRecord(rec); err != nil {
			return nil, nil, nil, fmt.Errorf("load %s: %w", key.stream, err)
		}
	}
	var packed packedHistory
	if h.cache != nil {
		packed = packRecords(history)
	}
	return history, payloads, packed, nil
}

func (h *Handler[A]) attempt(ctx context.Context, tenant domain.TenantID, stream string, cmd Command[A], opts Options, meta event.Metadata, commandID string, first bool) (Result, error) {
	key := cacheKey{string(tenant), stream}
	var (
		history []event.Record
		packed  packedHistory
		state   A
		snap    snapshotAt // the snapshot the state was resumed from, if any
		err     error
	)
	if h.snaps != nil {
		if state, history, snap, err = h.loadSnapshotted(ctx, tenant, stream); err != nil {
			return Result{}, err
		}
	} else {
		var payloads []event.Payload
		if history, payloads, packed, err = h.load(ctx, key, cmd, opts, first); err != nil {
			return Result{}, err
		}
		if state, err = h.agg.Load(payloads); err != nil {
			return Result{}, fmt.Errorf("load %s: %w", stream, err)
		}
	}
	version := h.agg.Version(state)
	if idem := opts.Idempotency; idem != nil {
		if res, ok := alreadyApplied(history, commandID, cmd.Target()); ok {
			// An earlier execution of this very command appended its events
			// but its outcome was never recorded (a store whose events and
			// idempotency records live apart, e.g. EventStoreDB, crashed in
			// between). Record it now instead of executing twice.
			return h.recordApplied(ctx, tenant, idem, res)
		}
	}
	if opts.ExpectedVersion != nil && version == 0 && !startsStream(cmd) {
		// A precondition on an aggregate that does not exist: it is
		// missing (404), not changed by someone else (409).
		return Result{}, h.agg.NotFound
	}
	if opts.ExpectedVersion != nil && *opts.ExpectedVersion != version {
		return Result{}, fmt.Errorf("%s is at version %d, not %d: %w", h.agg.Kind, version, *opts.ExpectedVersion, ErrVersionConflict)
	}
	cond, blind, err := h.admit(ctx, h.store, tenant, cmd, first)
	if err != nil {
		return Result{}, err
	}
	decided, err := cmd.Decide(state, h.cfg.Now())
	if err != nil {
		return Result{}, err
	}
	if len(decided) == 0 {
		// Nothing to append: the command is already in effect (a repeated
		// reservation, say). A state from the cache may be stale, and
		// "nothing to do" must be true of the stream as stored: decide
		// again on a fresh read.
		if history == nil && first {
			return h.attempt(ctx, tenant, stream, cmd, opts, meta, commandID, false)
		}
		last := snap.position
		if n := len(history); n > 0 {
			last = history[n-1].Position
		}
		return h.unchanged(ctx, tenant, cmd.Target(), version, last, opts.Idempotency)
	}
	events := make([]eventstore.NewEvent, len(decided))
	var appended []packedEvent
	if h.cache != nil {
		appended = make([]packedEvent, len(decided))
	}
	sealedKey := h.streamKey(ctx, tenant, history, packed, events)
	if snap.keyID != "" {
		// The snapshot was sealed with the stream's subject's key, which
		// events before it named.
		sealedKey = func() (string, error) { return snap.keyID, nil }
	}
	for i, p := range decided {
		typ, sv, data, err := h.cfg.Registry.Encode(p)
		if err != nil {
			return Result{}, err
		}
		if data, err = h.cfg.Registry.Seal(ctx, string(tenant), stream, typ, data, sealedKey); err != nil {
			if errors.Is(err, event.ErrShredded) {
				// The stream's data subject was forgotten: nothing of
				// theirs is written again under their destroyed key.
				return Result{}, fmt.Errorf("%w: %s %s belongs to a data subject who was forgotten: its personal data cannot be written", domain.ErrRejected, h.agg.Kind, cmd.Target())
			}
			return Result{}, err
		}
		if appended != nil {
			appended[i] = packedEvent{typ: typ, sv: sv, data: data}
		}
		tagged := meta
		if tagged.Tags, err = h.cfg.Registry.Tags(p); err != nil {
			return Result{}, err
		}
		events[i] = eventstore.NewEvent{
			ID:            uuid.NewSHA1(eventIDSpace, fmt.Appendf(nil, "%s/%d", commandID, i)).String(),
			Type:          typ,
			SchemaVersion: sv,
			Data:          data,
			Metadata:      tagged,
		}
	}
	req := eventstore.AppendRequest{
		Tenant:    string(tenant),
		Stream:    stream,
		Expected:  eventstore.Exact(version),
		Events:    events,
		Condition: cond,
	}
	id := cmd.Target()
	if idem := opts.Idempotency; idem != nil {
		req.Idempotency = &eventstore.Idempotency{
			Key:         idem.Key,
			RequestHash: idem.RequestHash,
			Response: func(ar eventstore.AppendResult) ([]byte, error) {
				return idem.Respond(Result{ID: id, Version: ar.LastVersion, Position: ar.Position}, nil)
			},
		}
	}
	ar, err := h.store.Append(ctx, req)
	if readAfterBlind(blind, err) {
		return h.attempt(ctx, tenant, stream, cmd, opts, meta, commandID, false)
	}
	if err != nil {
		h.cache.drop(key)
		return Result{}, err
	}
	if h.cache != nil {
		h.cache.put(key, packed.with(appended))
	}
	h.snapshotAfter(ctx, tenant, stream, state, decided, ar, snap, tailBytes(history, events), sealedKey)
	return Result{ID: id, Version: ar.LastVersion, Position: ar.Position}, nil
}

// streamKey finds the key of the stream's data subject for an event whose
// personal data is the stream's subject's (event.Registry.StreamKey): from
// its history (as read, or as cached), then the events the command
// appends before it.
func (h *Handler[A]) streamKey(ctx context.Context, tenant domain.TenantID, history []event.Record, packed packedHistory, appending []eventstore.NewEvent) func() (string, error) {
	return func() (string, error) {
		return h.cfg.Registry.StreamKey(ctx, string(tenant), func(yield func(string, []byte) bool) {
			if history != nil {
				for _, r := range history {
					if !yield(r.Type, r.Data) {
						return
					}
				}
			} else {
				stop := errors.New("stop")
				_ = packed.each(func(typ string, _ int, data []byte) error {
					if !yield(typ, data) {
						return stop
					}
					return nil
				})
			}
			for _, e := range appending {
				if e.Data != nil && !yield(e.Type, e.Data) {
					return
				}
			}
		})
	}
}

// alreadyApplied finds the events a command with commandID appended in an
// earlier, unrecorded execution.
func alreadyApplied(history []event.Record, commandID, id string) (Result, bool) {
	var res Result
	found := false
	for _, rec := range history {
		if rec.Metadata.CommandID == commandID {
			res = Result{ID: id, Version: rec.Version, Position: rec.Position}
			found = true
		}
	}
	return res, found
}
