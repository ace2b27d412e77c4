// Package telemetry wires OpenTelemetry tracing (configured by the standard
// OTEL_* variables; no exporter configured means a no-op provider and no
// cost) and the Prometheus metrics served on /metrics, plus the decorators
// that instrument the command handler, the event store and SQL. It is used
// by the composition root only.
package telemetry
