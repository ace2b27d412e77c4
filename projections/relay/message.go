package relay

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/strata-es/strata/domain/event"
)

// Metadata keys of a relayed event. The key names are part of the wire
// format: consumers outside strata read them.
const (
	// MetaTenant is the event's tenant.
	MetaTenant = "tenant"
	// MetaEventID is the event's own ID: stable across re-publication, so
	// consumers deduplicate on it (with the tenant: an event ID is unique
	// per tenant only). The message UUID is MessageID(tenant, event ID).
	MetaEventID = "event_id"
	// MetaStream and MetaVersion place the event in its stream (versions
	// start at 1 and are contiguous).
	MetaStream  = "stream"
	MetaVersion = "version"
	// MetaType and MetaSchemaVersion name the payload's schema, e.g.
	// order.placed v1. The payload is the event's JSON as stored (not
	// upcast).
	MetaType          = "type"
	MetaSchemaVersion = "schema_version"
	// MetaPosition is the event's place in the global log as a consistency
	// token (event.Position.Token): the query API accepts it in
	// X-Consistency-Token.
	MetaPosition = "position"
	// MetaRecordedAt is when the store recorded the event (RFC 3339, UTC).
	MetaRecordedAt = "recorded_at"
	// MetaCommandID, MetaCorrelationID, MetaCausationID and MetaActor copy
	// the event's metadata. MetaCorrelationID is watermill's own
	// correlation key (middleware.CorrelationIDMetadataKey).
	MetaCommandID     = "command_id"
	MetaCorrelationID = "correlation_id"
	MetaCausationID   = "causation_id"
	MetaActor         = "actor"
	// MetaTraceParent and MetaTraceState carry the W3C trace context of the
	// request that wrote the event, under the keys the W3C propagator uses,
	// so propagation.MapCarrier(msg.Metadata) continues the trace.
	MetaTraceParent = "traceparent"
	MetaTraceState  = "tracestate"
)

// ErrBadMessage: a message is not a relayed event (a required metadata key
// is missing or malformed).
var ErrBadMessage = errors.New("not a relayed event")

// messageIDSpace is the UUIDv5 namespace of message IDs: the SHA-1 name
// UUID of "github.com/strata-es/strata/relay/message-id" in the URL
// namespace. Part of the wire format: changing it changes every message
// ID, and JetStream would take re-publications for new messages.
var messageIDSpace = uuid.MustParse("6176ed57-387b-5961-893a-30e7274c5adc")

// MessageID is the message UUID of the event id of tenant: the UUIDv5 of
// "<tenant>/<event ID>" under a fixed namespace. An event ID is unique
// within its tenant only (an archive imported under another tenant ID may
// keep its IDs), and the message UUID is JetStream's de-duplication key
// (Nats-Msg-Id): keyed on the bare event ID, a second tenant's event was
// taken for a re-publication of the first and dropped. Derived, not
// random, so that a re-publication of the same event (after a crash
// between the broker's ack and the checkpoint) keeps its ID and is still
// deduplicated.
func MessageID(tenant, id string) string {
	return uuid.NewSHA1(messageIDSpace, []byte(tenant+"/"+id)).String()
}

// NewMessage turns a stored event into a message: the payload is the
// event's JSON, the UUID MessageID(tenant, event ID), and the metadata
// carry everything else (the event's own ID in MetaEventID).
func NewMessage(rec event.Record) *message.Message {
	msg := message.NewMessage(MessageID(rec.Tenant, rec.ID), message.Payload(rec.Data))
	md := msg.Metadata
	md.Set(MetaTenant, rec.Tenant)
	md.Set(MetaEventID, rec.ID)
	md.Set(MetaStream, rec.Stream)
	md.Set(MetaVersion, strconv.FormatInt(rec.Version, 10))
	md.Set(MetaType, rec.Type)
	md.Set(MetaSchemaVersion, strconv.Itoa(rec.SchemaVersion))
	md.Set(MetaPosition, rec.Position.Token())
	if !rec.RecordedAt.IsZero() {
		md.Set(MetaRecordedAt, rec.RecordedAt.UTC().Format(time.RFC3339Nano))
	}
	for k, v := range map[string]string{
		MetaCommandID:     rec.Metadata.CommandID,
		MetaCorrelationID: rec.Metadata.CorrelationID,
		MetaCausationID:   rec.Metadata.CausationID,
		MetaActor:         rec.Metadata.Actor,
		MetaTraceParent:   rec.Metadata.TraceParent,
		MetaTraceState:    rec.Metadata.TraceState,
	} {
		if v != "" {
			md.Set(k, v)
		}
	}
	return msg
}

var tenantPattern = regexp.MustCompile(`^[a-z0-9-]{1,63}$`)

// RecordFromMessage is the inverse of NewMessage. Errors wrap ErrBadMessage.
func RecordFromMessage(msg *message.Message) (event.Record, error) {
	md := msg.Metadata
	bad := func(format string, args ...any) (event.Record, error) {
		return event.Record{}, fmt.Errorf("%w: message %s: %s", ErrBadMessage, msg.UUID, fmt.Sprintf(format, args...))
	}
	rec := event.Record{
		ID:     md.Get(MetaEventID),
		Tenant: md.Get(MetaTenant),
		Stream: md.Get(MetaStream),
		Type:   md.Get(MetaType),
		Data:   json.RawMessage(msg.Payload),
		Metadata: event.Metadata{
			CommandID:     md.Get(MetaCommandID),
			CorrelationID: md.Get(MetaCorrelationID),
			CausationID:   md.Get(MetaCausationID),
			Actor:         md.Get(MetaActor),
			TraceParent:   md.Get(MetaTraceParent),
			TraceState:    md.Get(MetaTraceState),
		},
	}
	if _, err := uuid.Parse(rec.ID); err != nil {
		return bad("%s %q is not a UUID", MetaEventID, rec.ID)
	}
	if !tenantPattern.MatchString(rec.Tenant) {
		return bad("%s %q is not a tenant ID", MetaTenant, rec.Tenant)
	}
	// A message published before message IDs named the tenant has the bare
	// event ID as its UUID; both identify the event.
	if msg.UUID != MessageID(rec.Tenant, rec.ID) && msg.UUID != rec.ID {
		return bad("message UUID is neither MessageID(%s, %s) nor the event ID", rec.Tenant, rec.ID)
	}
	if rec.Stream == "" || len(rec.Stream) > 200 {
		return bad("%s %q: want 1 to 200 bytes", MetaStream, rec.Stream)
	}
	if rec.Type == "" {
		return bad("no %s", MetaType)
	}
	var err error
	if rec.Version, err = strconv.ParseInt(md.Get(MetaVersion), 10, 64); err != nil || rec.Version < 1 {
		return bad("%s %q: want a positive integer", MetaVersion, md.Get(MetaVersion))
	}
	sv, err := strconv.Atoi(md.Get(MetaSchemaVersion))
	if err != nil || sv < 1 {
		return bad("%s %q: want a positive integer", MetaSchemaVersion, md.Get(MetaSchemaVersion))
	}
	rec.SchemaVersion = sv
	if rec.Position, err = event.ParseToken(md.Get(MetaPosition)); err != nil {
		return bad("%s %q: %v", MetaPosition, md.Get(MetaPosition), err)
	}
	if at := md.Get(MetaRecordedAt); at != "" {
		if rec.RecordedAt, err = time.Parse(time.RFC3339Nano, at); err != nil {
			return bad("%s %q: %v", MetaRecordedAt, at, err)
		}
	}
	return rec, nil
}
