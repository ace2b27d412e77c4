package projections

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/strata-es/strata/domain/event"
)

// maxBatchLinks bounds the links of a batch span: one per distinct trace
// among the batch's events.
const maxBatchLinks = 64

var traceContext = propagation.TraceContext{}

// startBatchSpan starts the span of one projection batch. Each event
// carries the trace context of the command that wrote it (event metadata),
// so the span links back to those traces: from a request's trace one can
// find the batch that applied its events, and the other way round. With no
// tracer provider installed this costs next to nothing.
func startBatchSpan(ctx context.Context, projection string, recs []event.Record) (context.Context, trace.Span) {
	tracer := otel.Tracer("github.com/strata-es/strata/projections")
	var links []trace.Link
	seen := map[trace.TraceID]bool{}
	for _, rec := range recs {
		if rec.Metadata.TraceParent == "" || len(links) == maxBatchLinks {
			continue
		}
		carrier := propagation.MapCarrier{"traceparent": rec.Metadata.TraceParent, "tracestate": rec.Metadata.TraceState}
		sc := trace.SpanContextFromContext(traceContext.Extract(context.Background(), carrier))
		if !sc.IsValid() || seen[sc.TraceID()] {
			continue
		}
		seen[sc.TraceID()] = true
		links = append(links, trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{
			attribute.String("strata.stream", rec.Stream), attribute.Int64("strata.version", rec.Version)}})
	}
	return tracer.Start(ctx, "projection.batch "+projection, trace.WithLinks(links...), trace.WithAttributes(
		attribute.String("strata.projection", projection),
		attribute.Int("strata.events", len(recs)),
		attribute.String("strata.from", recs[0].Position.String()),
		attribute.String("strata.to", recs[len(recs)-1].Position.String()),
	))
}

func endBatchSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "batch failed")
	}
	span.End()
}
