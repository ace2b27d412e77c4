package telemetry

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// PgxTracer creates a span per SQL statement and per pipelined batch. It
// records the statement text (parameterised: values are never recorded)
// and errors. Install it only when tracing is enabled: it is not free.
type PgxTracer struct{}

var (
	_ pgx.QueryTracer = PgxTracer{}
	_ pgx.BatchTracer = PgxTracer{}
)

type spanKey struct{}

func (PgxTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if !trace.SpanFromContext(ctx).SpanContext().IsValid() {
		return ctx // only trace SQL inside an operation that is traced
	}
	ctx, span := Tracer().Start(ctx, "sql "+verb(data.SQL), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("db.system", "postgresql"), attribute.String("db.statement", compact(data.SQL))))
	return context.WithValue(ctx, spanKey{}, span)
}

func (PgxTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	span, ok := ctx.Value(spanKey{}).(trace.Span)
	if !ok {
		return
	}
	if data.Err != nil {
		span.RecordError(data.Err)
		span.SetStatus(codes.Error, "statement failed")
	}
	span.SetAttributes(attribute.Int64("db.rows_affected", data.CommandTag.RowsAffected()))
	span.End()
}

func (PgxTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	if !trace.SpanFromContext(ctx).SpanContext().IsValid() {
		return ctx
	}
	n := 0
	if data.Batch != nil {
		n = data.Batch.Len()
	}
	ctx, span := Tracer().Start(ctx, "sql batch", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("db.system", "postgresql"), attribute.Int("db.batch_size", n)))
	return context.WithValue(ctx, spanKey{}, span)
}

func (PgxTracer) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	span, ok := ctx.Value(spanKey{}).(trace.Span)
	if !ok {
		return
	}
	span.AddEvent("statement", trace.WithAttributes(attribute.String("db.statement", compact(data.SQL))))
	if data.Err != nil {
		span.RecordError(data.Err)
	}
}

func (PgxTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchEndData) {
	span, ok := ctx.Value(spanKey{}).(trace.Span)
	if !ok {
		return
	}
	if data.Err != nil {
		span.RecordError(data.Err)
		span.SetStatus(codes.Error, "batch failed")
	}
	span.End()
}

func verb(sql string) string {
	f := strings.Fields(sql)
	if len(f) == 0 {
		return "statement"
	}
	v := strings.ToUpper(f[0])
	if v == "WITH" {
		for _, w := range f[1:] {
			switch u := strings.ToUpper(w); u {
			case "INSERT", "UPDATE", "DELETE", "SELECT":
				return u
			}
		}
	}
	return v
}

func compact(sql string) string {
	s := strings.Join(strings.Fields(sql), " ")
	if len(s) > 2000 {
		s = s[:2000] + "..."
	}
	return s
}
