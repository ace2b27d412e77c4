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

// A command that spans aggregates (issue 31 §1): it loads several
// aggregates of a tenant, of one type or several, decides over all of
// them, and appends to each stream it changes, each at the version it
// loaded, all or nothing (eventstore.MultiAppender). "Move 5 units from
// one warehouse's stock to another's" holds without a saga.

// SpanningCommand is a command over several aggregates. Decide loads what
// it needs with Load and records its events with Emit; it returns nil or a
// rule error. A spanning command may also be Guarded.
type SpanningCommand interface {
	// Name is a stable identifier, e.g. "inventory.transfer".
	Name() string
	// Target names the aggregate the answer reports the version of; the
	// command must Emit to it.
	Target() string
	Decide(s *Span, now time.Time) error
}

// Span is what a spanning command's Decide sees: the aggregates it loads
// and the events it emits, for one attempt.
type Span struct {
	ctx     context.Context
	tenant  string
	store   eventstore.Store
	reg     *event.Registry
	streams map[string]*spanStream
	loaded  []string // streams in the order of their Load
	order   []string // streams in the order of their first Emit
}

type spanStream struct {
	id      string // the aggregate's
	version int64
	history []event.Record
	events  []event.Payload
}

// Load loads the aggregate agg with the given ID (once per attempt: a
// second Load of one stream is an error, as the state it gives would not
// include the events already emitted).
func Load[A any](s *Span, agg Aggregate[A], id string) (A, error) {
	var zero A
	stream := agg.Stream(id)
	if _, loaded := s.streams[stream]; loaded {
		return zero, fmt.Errorf("%s %s loaded twice by one command", agg.Kind, id)
	}
	history, err := s.store.ReadStream(s.ctx, s.tenant, stream, 0)
	if err != nil {
		return zero, fmt.Errorf("load %s: %w", stream, err)
	}
	payloads := make([]event.Payload, len(history))
	for i, rec := range history {
		if payloads[i], err = s.reg.DecodeRecord(rec); err != nil {
			return zero, fmt.Errorf("load %s: %w", stream, err)
		}
	}
	state, err := agg.Load(payloads)
	if err != nil {
		return zero, fmt.Errorf("load %s: %w", stream, err)
	}
	s.streams[stream] = &spanStream{id: id, version: agg.Version(state), history: history}
	s.loaded = append(s.loaded, stream)
	return state, nil
}

// Emit records events of the aggregate agg with the given ID, which Decide
// loaded first: they are appended at the version it was loaded at.
func Emit[A any](s *Span, agg Aggregate[A], id string, events ...event.Payload) error {
	st, loaded := s.streams[agg.Stream(id)]
	if !loaded {
		return fmt.Errorf("%s %s emits events without being loaded", agg.Kind, id)
	}
	if len(st.events) == 0 && len(events) > 0 {
		s.order = append(s.order, agg.Stream(id))
	}
	st.events = append(st.events, events...)
	return nil
}

// Spanner executes spanning commands: the retries, idempotency and
// telemetry of a Handler, over a store with multi-stream appends.
type Spanner struct {
	runner
	store eventstore.Store
	multi eventstore.MultiAppender
}

// NewSpanner returns an executor of spanning commands; store must append
// to several streams at once (eventstore.MultiAppender).
func NewSpanner(store eventstore.Store, idem eventstore.IdempotencyStore, cfg Config) (*Spanner, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	multi, ok := store.(eventstore.MultiAppender)
	if !ok {
		return nil, fmt.Errorf("commands: %T has no multi-stream appends (use PostgreSQL, or EventStoreDB on KurrentDB 25.1 or later)", store)
	}
	return &Spanner{runner: runner{idem: idem, cfg: cfg}, store: store, multi: multi}, nil
}

// Handle executes cmd for the tenant in ctx, through the middleware. The
// result's Version is the Target's stream's; opts.ExpectedVersion (If-Match)
// is the Target's version, checked like a Handler's.
func (x *Spanner) Handle(ctx context.Context, cmd SpanningCommand, opts Options) (Result, error) {
	next := HandleFunc(func(ctx context.Context, _ Named, opts Options) (Result, error) { return x.handle(ctx, cmd, opts) })
	for i := len(x.cfg.Middleware) - 1; i >= 0; i-- {
		next = x.cfg.Middleware[i](next)
	}
	return next(ctx, cmd, opts)
}

func (x *Spanner) handle(ctx context.Context, cmd SpanningCommand, opts Options) (Result, error) {
	ex, res, done, err := x.start(ctx, opts)
	if done || err != nil {
		return res, err
	}
	return x.execute(ctx, ex, opts, func(first bool) (Result, error) { return x.attempt(ctx, ex, cmd, opts, first) })
}

func (x *Spanner) attempt(ctx context.Context, ex execution, cmd SpanningCommand, opts Options, first bool) (Result, error) {
	s := &Span{ctx: ctx, tenant: string(ex.tenant), store: x.store, reg: x.cfg.Registry, streams: map[string]*spanStream{}}
	cond, blind, err := x.admit(ctx, x.store, ex.tenant, cmd, first)
	if err != nil {
		return Result{}, err
	}
	if err := cmd.Decide(s, x.cfg.Now()); err != nil {
		return Result{}, err
	}
	target := s.streams[x.targetStream(s, cmd)]
	if exp := opts.ExpectedVersion; exp != nil && (target == nil || target.version != *exp) {
		var v int64
		if target != nil {
			v = target.version
		}
		return Result{}, fmt.Errorf("%s is at version %d, not %d: %w", cmd.Target(), v, *exp, ErrVersionConflict)
	}
	if len(s.order) == 0 {
		if target == nil {
			return Result{}, errors.New(cmd.Name() + ": decided nothing and did not load its target")
		}
		var last event.Position
		if n := len(target.history); n > 0 {
			last = target.history[n-1].Position
		}
		return x.unchanged(ctx, ex.tenant, cmd.Target(), target.version, last, opts.Idempotency)
	}
	req := eventstore.MultiAppendRequest{Tenant: string(ex.tenant), Condition: cond}
	targetPart := -1
	n := 0
	for i, stream := range s.order {
		st := s.streams[stream]
		part := eventstore.StreamAppend{Stream: stream, Expected: eventstore.Exact(st.version), Events: make([]eventstore.NewEvent, len(st.events))}
		streamKey := x.streamKey(ctx, s.tenant, st)
		for j, p := range st.events {
			if part.Events[j], err = x.newEvent(ctx, s.tenant, stream, p, ex, n, streamKey); err != nil {
				return Result{}, err
			}
			n++
		}
		req.Streams = append(req.Streams, part)
		if st == target {
			targetPart = i
		}
	}
	if targetPart < 0 {
		return Result{}, fmt.Errorf("%s: emitted no event of its target %s", cmd.Name(), cmd.Target())
	}
	if idem := opts.Idempotency; idem != nil {
		req.Idempotency = &eventstore.MultiIdempotency{Key: idem.Key, RequestHash: idem.RequestHash,
			Response: func(mr eventstore.MultiAppendResult) ([]byte, error) {
				return idem.Respond(Result{ID: cmd.Target(), Version: mr.Streams[targetPart].LastVersion, Position: mr.Position}, nil)
			}}
	}
	mr, err := x.multi.AppendMulti(ctx, req)
	if readAfterBlind(blind, err) {
		return x.attempt(ctx, ex, cmd, opts, false)
	}
	if err != nil {
		return Result{}, err
	}
	return Result{ID: cmd.Target(), Version: mr.Streams[targetPart].LastVersion, Position: mr.Position}, nil
}

// targetStream is the stream of cmd's Target: the first one emitted to
// (or else loaded) of an aggregate loaded with that ID.
func (x *Spanner) targetStream(s *Span, cmd SpanningCommand) string {
	for _, streams := range [][]string{s.order, s.loaded} {
		for _, stream := range streams {
			if s.streams[stream].id == cmd.Target() {
				return stream
			}
		}
	}
	return ""
}

// newEvent encodes, seals and tags the i-th event of the command.
func (x *Spanner) newEvent(ctx context.Context, tenant, stream string, p event.Payload, ex execution, i int, streamKey func() (string, error)) (eventstore.NewEvent, error) {
	typ, sv, data, err := x.cfg.Registry.Encode(p)
	if err != nil {
		return eventstore.NewEvent{}, err
	}
	if data, err = x.cfg.Registry.Seal(ctx, tenant, stream, typ, data, streamKey); err != nil {
		if errors.Is(err, event.ErrShredded) {
			return eventstore.NewEvent{}, fmt.Errorf("%w: %s belongs to a data subject who was forgotten: its personal data cannot be written", domain.ErrRejected, stream)
		}
		return eventstore.NewEvent{}, err
	}
	meta := ex.meta
	if meta.Tags, err = x.cfg.Registry.Tags(p); err != nil {
		return eventstore.NewEvent{}, err
	}
	return eventstore.NewEvent{ID: uuid.NewSHA1(eventIDSpace, fmt.Appendf(nil, "%s/%d", ex.commandID, i)).String(),
		Type: typ, SchemaVersion: sv, Data: data, Metadata: meta}, nil
}

// streamKey finds the key of the stream's data subject from its history.
func (x *Spanner) streamKey(ctx context.Context, tenant string, st *spanStream) func() (string, error) {
	return func() (string, error) {
		return x.cfg.Registry.StreamKey(ctx, tenant, func(yield func(string, []byte) bool) {
			for _, r := range st.history {
				if !yield(r.Type, r.Data) {
					return
				}
			}
		})
	}
}
