package telemetry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/strata-es/strata/commands"
	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
)

// CommandMiddleware gives every command, of any aggregate, a span and the
// strata_commands_total / strata_command_duration_seconds metrics
// (commands.Config.Middleware).
func CommandMiddleware(m *Metrics) commands.Middleware {
	return func(next commands.HandleFunc) commands.HandleFunc {
		c := commandExecutor{next: next, m: m}
		return c.Handle
	}
}

type commandExecutor struct {
	next commands.HandleFunc
	m    *Metrics
}

func (c *commandExecutor) Handle(ctx context.Context, cmd commands.Named, opts commands.Options) (commands.Result, error) {
	tenant, _ := domain.TenantFromContext(ctx)
	ctx, span := Tracer().Start(ctx, "command "+cmd.Name(), trace.WithAttributes(
		attribute.String("strata.command", cmd.Name()),
		attribute.String("strata.tenant", string(tenant)),
		attribute.String("strata.aggregate_id", cmd.Target()),
		attribute.Bool("strata.idempotency_key", opts.Idempotency != nil),
	))
	defer span.End()
	start := time.Now()
	// The events this command appends carry the trace context of this
	// span, so a projection batch applying them can link back to it.
	if sc := span.SpanContext(); sc.IsValid() {
		opts.Metadata.TraceParent = traceparent(sc)
		opts.Metadata.TraceState = sc.TraceState().String()
	}
	res, err := c.next(ctx, cmd, opts)
	outcome := Outcome(res, err)
	c.m.Commands.WithLabelValues(cmd.Name(), outcome).Inc()
	c.m.tenants.Load().command(ctx, outcome)
	c.m.CommandDuration.WithLabelValues(cmd.Name()).Observe(time.Since(start).Seconds())
	if outcome == "replayed" {
		c.m.IdempotencyReplays.Inc()
	}
	span.SetAttributes(attribute.String("strata.outcome", outcome))
	if err != nil && outcome == "error" {
		span.RecordError(err)
		span.SetStatus(codes.Error, "command failed")
	} else if err == nil {
		span.SetAttributes(attribute.Int64("strata.version", res.Version))
	}
	return res, err
}

// Outcome classifies a command's result for metrics.
func Outcome(res commands.Result, err error) string {
	switch {
	case err == nil && res.Replayed != nil:
		return "replayed"
	case err == nil:
		return "ok"
	case errors.Is(err, eventstore.ErrVersionConflict):
		return "conflict"
	case errors.Is(err, commands.ErrIdempotencyKeyReused):
		return "idempotency_key_reused"
	case errors.Is(err, domain.ErrNotFound):
		return "not_found"
	case errors.Is(err, domain.ErrRejected):
		return "rejected"
	case errors.Is(err, domain.ErrInvalid):
		return "invalid"
	case errors.Is(err, eventstore.ErrUnavailable), db.IsUnavailable(err):
		return "unavailable"
	}
	return "error"
}

func traceparent(sc trace.SpanContext) string {
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

// InstrumentStore wraps an event store with spans for appends and reads
// and counts appended events.
func InstrumentStore(s eventstore.Store, m *Metrics) eventstore.Store {
	return &store{next: s, m: m}
}

type store struct {
	next eventstore.Store
	m    *Metrics
}

func (s *store) Append(ctx context.Context, req eventstore.AppendRequest) (eventstore.AppendResult, error) {
	ctx, span := Tracer().Start(ctx, "eventstore.append", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("strata.tenant", req.Tenant),
		attribute.String("strata.stream", req.Stream),
		attribute.Int("strata.events", len(req.Events)),
		attribute.String("strata.expected_version", req.Expected.String()),
	))
	defer span.End()
	res, err := s.next.Append(ctx, req)
	if err != nil {
		if !errors.Is(err, eventstore.ErrVersionConflict) && !errors.Is(err, eventstore.ErrIdempotencyKeyExists) {
			span.RecordError(err)
			span.SetStatus(codes.Error, "append failed")
		}
		span.SetAttributes(attribute.String("strata.outcome", err.Error()))
		return res, err
	}
	s.m.EventsAppended.Add(float64(len(req.Events)))
	s.m.tenants.Load().appended(domain.TenantID(req.Tenant), len(req.Events))
	span.SetAttributes(attribute.Int64("strata.version", res.LastVersion), attribute.String("strata.position", res.Position.String()))
	return res, nil
}

func (s *store) ReadStream(ctx context.Context, tenant, stream string, after int64) ([]event.Record, error) {
	ctx, span := Tracer().Start(ctx, "eventstore.read_stream", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("strata.tenant", tenant),
		attribute.String("strata.stream", stream),
	))
	defer span.End()
	recs, err := s.next.ReadStream(ctx, tenant, stream, after)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "read failed")
	}
	span.SetAttributes(attribute.Int("strata.events", len(recs)))
	return recs, err
}

// ReadTagged implements eventstore.TagReader for a store that keeps tags
// (and refuses otherwise), so that guarded commands reach it through the
// decorator.
func (s *store) ReadTagged(ctx context.Context, tenant string, q event.Query) ([]event.Record, event.Position, error) {
	tags, ok := s.next.(eventstore.TagReader)
	if !ok {
		return nil, event.Position{}, fmt.Errorf("%T keeps no event tags", s.next)
	}
	ctx, span := Tracer().Start(ctx, "eventstore.read_tagged", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("strata.tenant", tenant),
		attribute.Int("strata.query_items", len(q)),
	))
	defer span.End()
	recs, at, err := tags.ReadTagged(ctx, tenant, q)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "read failed")
	}
	span.SetAttributes(attribute.Int("strata.events", len(recs)), attribute.String("strata.position", at.String()))
	return recs, at, err
}

// AppendMulti implements eventstore.MultiAppender for a store that does
// (and refuses otherwise).
func (s *store) AppendMulti(ctx context.Context, req eventstore.MultiAppendRequest) (eventstore.MultiAppendResult, error) {
	m, ok := s.next.(eventstore.MultiAppender)
	if !ok {
		return eventstore.MultiAppendResult{}, fmt.Errorf("%T has no multi-stream appends", s.next)
	}
	ctx, span := Tracer().Start(ctx, "eventstore.append_multi", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("strata.tenant", req.Tenant),
		attribute.Int("strata.streams", len(req.Streams)),
	))
	defer span.End()
	res, err := m.AppendMulti(ctx, req)
	if err != nil {
		if !errors.Is(err, eventstore.ErrVersionConflict) && !errors.Is(err, eventstore.ErrIdempotencyKeyExists) {
			span.RecordError(err)
			span.SetStatus(codes.Error, "append failed")
		}
		return res, err
	}
	n := 0
	for _, sa := range req.Streams {
		n += len(sa.Events)
	}
	s.m.EventsAppended.Add(float64(n))
	s.m.tenants.Load().appended(domain.TenantID(req.Tenant), n)
	return res, nil
}

// ReadSnapshotted implements eventstore.SnapshotStore. Over a store that
// keeps no snapshots it reads the whole stream: such a store is one that
// lost them all, which the port allows.
func (s *store) ReadSnapshotted(ctx context.Context, tenant, stream, schema string) (eventstore.Snapshot, bool, []event.Record, error) {
	snaps, ok := s.next.(eventstore.SnapshotStore)
	if !ok {
		recs, err := s.ReadStream(ctx, tenant, stream, 0)
		return eventstore.Snapshot{}, false, recs, err
	}
	ctx, span := Tracer().Start(ctx, "eventstore.read_snapshotted", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("strata.tenant", tenant),
		attribute.String("strata.stream", stream),
	))
	defer span.End()
	snap, found, tail, err := snaps.ReadSnapshotted(ctx, tenant, stream, schema)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "read failed")
	}
	span.SetAttributes(attribute.Bool("strata.snapshot", found), attribute.Int64("strata.snapshot_version", snap.Version), attribute.Int("strata.events", len(tail)))
	return snap, found, tail, err
}

// SaveSnapshot implements eventstore.SnapshotStore (nothing, over a store
// that keeps no snapshots).
func (s *store) SaveSnapshot(ctx context.Context, tenant, stream string, snap eventstore.Snapshot) error {
	snaps, ok := s.next.(eventstore.SnapshotStore)
	if !ok {
		return nil
	}
	return snaps.SaveSnapshot(ctx, tenant, stream, snap)
}
