package event

import (
	"encoding/json"
	"time"
)

// Metadata travels with every event. Field names are part of the stored
// format: rename them only with an upcaster.
type Metadata struct {
	// CommandID identifies the command execution that produced the event.
	// Every event of one command shares it; a retried command (same
	// idempotency key) keeps it.
	CommandID     string `json:"command_id,omitempty"`
	CorrelationID string `json:"correlation_id,omitempty"`
	CausationID   string `json:"causation_id,omitempty"`
	// Actor is the subject (sub claim) that issued the command.
	Actor string `json:"actor,omitempty"`
	// TraceParent and TraceState carry W3C trace context, so that a
	// projection's span can link back to the request that wrote the event.
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty"`
	// Tags name what the event is about beyond its stream (tags.go),
	// sorted, once each; stamped from the type's Codec.Tags.
	Tags []string `json:"tags,omitempty"`
}

// Record is one stored event as every store returns it.
type Record struct {
	// ID is a UUID chosen by the writer and stable across retries.
	ID            string
	Tenant        string
	Stream        string
	Version       int64 // 1-based position within the stream
	Type          string
	SchemaVersion int
	Data          json.RawMessage
	Metadata      Metadata
	RecordedAt    time.Time
	// Position is the event's place in the global log.
	Position Position
}
