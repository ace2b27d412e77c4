package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// TracerName is the instrumentation scope of strata's own spans.
const TracerName = "github.com/strata-es/strata"

// Tracer returns strata's tracer from the global provider.
func Tracer() trace.Tracer { return otel.Tracer(TracerName) }

// EnvVars are the OpenTelemetry variables strata honours (the SDK and the
// OTLP exporter read them).
var EnvVars = []string{
	"OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_INSECURE", "OTEL_SERVICE_NAME",
	"OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
}

// SetupTracing installs a global tracer provider when the environment asks
// for an exporter: OTEL_TRACES_EXPORTER=otlp (or an OTLP endpoint set) or
// =console (spans as JSON on console). Otherwise the global provider stays
// the no-op one and tracing costs nothing; enabled reports which.
// The W3C trace-context propagator is installed either way, so trace
// context still flows from requests into event metadata.
func SetupTracing(ctx context.Context, getenv func(string) string, service string, console io.Writer) (shutdown func(context.Context) error, enabled bool, err error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	kind := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")))
	if kind == "" && (getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "") {
		kind = "otlp"
	}
	var exp sdktrace.SpanExporter
	switch kind {
	case "", "none":
		return func(context.Context) error { return nil }, false, nil
	case "otlp":
		exp, err = otlptracegrpc.New(ctx)
	case "console":
		exp, err = stdouttrace.New(stdouttrace.WithWriter(console))
	default:
		return nil, false, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: want otlp, console or none", kind)
	}
	if err != nil {
		return nil, false, fmt.Errorf("trace exporter: %w", err)
	}
	return Install(exp, service), true, nil
}

// Install sets a global tracer provider batching spans to exp and returns
// its shutdown. Tests pass an in-memory exporter.
func Install(exp sdktrace.SpanExporter, service string) func(context.Context) error {
	res, err := resource.Merge(resource.Default(), resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName(service)))
	if err != nil {
		res = resource.Default()
	}
	if envRes, err := resource.New(context.Background(), resource.WithFromEnv()); err == nil {
		if merged, err := resource.Merge(res, envRes); err == nil {
			res = merged
		}
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return func(ctx context.Context) error {
		return errors.Join(tp.ForceFlush(ctx), tp.Shutdown(ctx))
	}
}
