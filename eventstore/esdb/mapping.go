package esdb

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/google/uuid"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
)

// Versions and revisions: strata versions are 1-based (version n is the
// stream's n-th event, 0 means empty), ESDB revisions (EventNumber) are
// 0-based. Version n is revision n-1.

// expectedRevision maps the port's expected version onto ESDB's. An exact
// version 0 (the stream is empty) is NoStream; an exact version n > 0 is
// "the last event is revision n-1".
func expectedRevision(e eventstore.ExpectedVersion) (esdb.ExpectedRevision, error) {
	switch {
	case e == eventstore.Any:
		return esdb.Any{}, nil
	case e == eventstore.NoStream, e == 0:
		return esdb.NoStream{}, nil
	case e == eventstore.StreamExists:
		return esdb.StreamExists{}, nil
	case e > 0:
		return esdb.Revision(uint64(e) - 1), nil
	}
	return nil, fmt.Errorf("%w: expected version %d", ErrInvalidAppend, int64(e))
}

// versionOf returns the strata version of the event at revision rev.
func versionOf(rev uint64) int64 { return int64(rev) + 1 }

// readFrom returns where a forward read starts to return the events with
// version > after: version after+1 is revision after.
func readFrom(after int64) esdb.StreamPosition {
	if after <= 0 {
		return esdb.Start{}
	}
	return esdb.Revision(uint64(after))
}

// positionOf maps an ESDB $all position: Major is the commit position,
// Minor the prepare position, so event.Position orders exactly as $all.
// Servers before 22.6 report no position in stream reads (both parts all
// ones); that maps to the zero position, "unknown".
func positionOf(p esdb.Position) event.Position {
	if p.Commit == math.MaxUint64 {
		return event.Position{}
	}
	return event.Position{Major: p.Commit, Minor: p.Prepare}
}

// allFrom is where a subscription resumes after p: the start of $all for
// the zero position, otherwise p itself (the server delivers events after
// it; the reader also drops anything at or before p).
func allFrom(p event.Position) esdb.AllPosition {
	if p.IsZero() {
		return esdb.Start{}
	}
	return esdb.Position{Commit: p.Major, Prepare: p.Minor}
}

// plausibleCheckpoint rejects checkpoint positions that no event can have:
// prepare after commit, or the shape (commit>0, prepare=0) that KurrentDB
// before 25.0.1 sent from filtered subscriptions at the end of the log
// (resuming from it could skip an event).
func plausibleCheckpoint(p esdb.Position) bool {
	if p.Prepare > p.Commit {
		return false
	}
	return !(p.Commit > 0 && p.Prepare == 0)
}

// wireMetadata is the user metadata stored with every event: the tenant and
// schema version (so an event is self-describing even outside its stream
// name), the event.Metadata fields flattened beside them, and ESDB's own
// $correlationId/$causationId keys so that the server's $by_correlation_id
// projection and the UI understand them. Field names are a stored format.
type wireMetadata struct {
	Tenant        string `json:"tenant"`
	SchemaVersion int    `json:"schema_version"`
	event.Metadata
	ESCorrelationID string `json:"$correlationId,omitempty"`
	ESCausationID   string `json:"$causationId,omitempty"`
}

func encodeMetadata(tenant string, schemaVersion int, m event.Metadata) ([]byte, error) {
	return json.Marshal(wireMetadata{
		Tenant:          tenant,
		SchemaVersion:   schemaVersion,
		Metadata:        m,
		ESCorrelationID: m.CorrelationID,
		ESCausationID:   m.CausationID,
	})
}

// errBadMetadata marks an event of a strata stream whose metadata is not
// ours: the global log stops there rather than deliver an event whose
// tenant it cannot vouch for.
var errBadMetadata = errors.New("malformed strata event metadata")

func decodeMetadata(b []byte) (tenant string, schemaVersion int, m event.Metadata, err error) {
	var w wireMetadata
	if err := json.Unmarshal(b, &w); err != nil {
		if err = json.Unmarshal(synthesizedMetadata(b), &w); err != nil {
			return "", 0, event.Metadata{}, fmt.Errorf("%w: %v", errBadMetadata, err)
		}
	}
	if w.Tenant == "" || w.SchemaVersion < 1 {
		return "", 0, event.Metadata{}, fmt.Errorf("%w: tenant and schema_version are required", errBadMetadata)
	}
	return w.Tenant, w.SchemaVersion, w.Metadata, nil
}

// eventData builds the ESDB event for e, written by tenant.
func eventData(tenant string, e eventstore.NewEvent) (esdb.EventData, error) {
	id, err := uuid.Parse(e.ID)
	if err != nil || len(e.ID) != 36 {
		return esdb.EventData{}, fmt.Errorf("%w: event id %q is not a UUID", ErrInvalidAppend, e.ID)
	}
	if e.Type == "" || e.SchemaVersion < 1 {
		return esdb.EventData{}, fmt.Errorf("%w: event type and schema version are required", ErrInvalidAppend)
	}
	if !json.Valid(e.Data) {
		return esdb.EventData{}, fmt.Errorf("%w: data of event %s is not JSON", ErrInvalidAppend, e.ID)
	}
	meta, err := encodeMetadata(tenant, e.SchemaVersion, e.Metadata)
	if err != nil {
		return esdb.EventData{}, fmt.Errorf("encode metadata of event %s: %w", e.ID, err)
	}
	return esdb.EventData{
		EventID:     id,
		EventType:   e.Type,
		ContentType: esdb.ContentTypeJson,
		Data:        e.Data,
		Metadata:    meta,
	}, nil
}

// record turns a stored event into the port's Record. ok is false when the
// event's stream is not one of this namespace's strata streams (the caller
// skips it); err is set when it is, but its content is not what this
// adapter writes (wrong tenant in the metadata, not JSON).
func (n naming) record(ev *esdb.RecordedEvent) (rec event.Record, ok bool, err error) {
	tenant, stream, ok := n.decode(ev.StreamID)
	if !ok {
		return event.Record{}, false, nil
	}
	where := fmt.Sprintf("event %d of %s", ev.EventNumber, ev.StreamID)
	if ev.ContentType != "application/json" {
		return event.Record{}, true, fmt.Errorf("%s: %w: content type %q", where, errBadMetadata, ev.ContentType)
	}
	metaTenant, sv, meta, err := decodeMetadata(ev.UserMetadata)
	if err != nil {
		return event.Record{}, true, fmt.Errorf("%s: %w", where, err)
	}
	if metaTenant != tenant {
		return event.Record{}, true, fmt.Errorf("%s: %w: metadata names tenant %q", where, errBadMetadata, metaTenant)
	}
	return event.Record{
		ID:            ev.EventID.String(),
		Tenant:        tenant,
		Stream:        stream,
		Version:       versionOf(ev.EventNumber),
		Type:          ev.EventType,
		SchemaVersion: sv,
		Data:          json.RawMessage(ev.Data),
		Metadata:      meta,
		RecordedAt:    ev.CreatedDate,
		Position:      positionOf(ev.Position),
	}, true, nil
}

// synthesizedMetadata rewrites, in the metadata the server synthesizes for
// a v1 read of an event appended through AppendRecords (from the record's
// properties, records.go), the shapes a property may take there and
// wireMetadata does not read: schema_version as a number with a fraction
// ("1.0") or as a string, and tags as a string holding their JSON list.
// Anything else is returned as it is (and fails as it would have).
func synthesizedMetadata(b []byte) []byte {
	var fields map[string]json.RawMessage
	if json.Unmarshal(b, &fields) != nil {
		return b
	}
	if raw, ok := fields["schema_version"]; ok {
		var f float64
		var str string
		if json.Unmarshal(raw, &str) == nil {
			raw = json.RawMessage(str)
		}
		if json.Unmarshal(raw, &f) == nil && f == math.Trunc(f) && f >= 1 && f <= math.MaxInt32 {
			fields["schema_version"] = json.RawMessage(strconv.FormatInt(int64(f), 10))
		}
	}
	if raw, ok := fields["tags"]; ok {
		var str string
		if json.Unmarshal(raw, &str) == nil && json.Valid([]byte(str)) {
			fields["tags"] = json.RawMessage(str)
		}
	}
	out, err := json.Marshal(fields)
	if err != nil {
		return b
	}
	return out
}
