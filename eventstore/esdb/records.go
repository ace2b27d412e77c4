package esdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/google/uuid"
	streamerrors "github.com/kurrent-io/KurrentDB-Client-Go/protos/kurrentdb/protocols/v2/streams/errors"
	v2 "github.com/kurrent-io/KurrentDB-Client-Go/protos/kurrentdb/protocols/v2/streams/streams"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
)

// Appends through KurrentDB's v2 AppendRecords (records_conn.go): the
// multi-stream appends, and every append that writes tag markers or
// checks a condition (tags.go). Untagged single-stream appends keep the v1
// path (store.go). AppendRecords takes no per-stream expectation: each
// stream's expectation is a consistency check on it, and the checks on the
// condition's tag streams ride along; the server validates every check
// before it writes any record.

// ExpectedRevisionConstants of the v2 protocol's stream state checks.
const (
	stateNoStream = int64(v2.ExpectedRevisionConstants_EXPECTED_REVISION_CONSTANTS_NO_STREAM)
	stateExists   = int64(v2.ExpectedRevisionConstants_EXPECTED_REVISION_CONSTANTS_EXISTS)
)

// recordsPart is one stream's part of an append through AppendRecords.
type recordsPart struct {
	stream   string // the strata stream
	name     string // its ESDB name
	expected eventstore.ExpectedVersion
	events   []eventstore.NewEvent // tags normalized
	data     []esdb.EventData      // the v1 form, for the duplicate check
	tagged   bool
}

// newRecordsPart validates and encodes one stream's part.
func (s *Store) newRecordsPart(tenant, stream string, expected eventstore.ExpectedVersion, events []eventstore.NewEvent) (recordsPart, error) {
	name, err := s.names.encode(tenant, stream)
	if err != nil {
		return recordsPart{}, fmt.Errorf("%w: %w", ErrInvalidAppend, err)
	}
	if len(events) == 0 {
		return recordsPart{}, fmt.Errorf("%w: stream %s: no events", ErrInvalidAppend, stream)
	}
	if _, err := expectedRevision(expected); err != nil {
		return recordsPart{}, err
	}
	events = append([]eventstore.NewEvent(nil), events...)
	tagged, err := normalizeTags(events)
	if err != nil {
		return recordsPart{}, err
	}
	p := recordsPart{stream: stream, name: name, expected: expected, events: events, tagged: tagged, data: make([]esdb.EventData, len(events))}
	for i, e := range events {
		if p.data[i], err = eventData(tenant, e); err != nil {
			return recordsPart{}, err
		}
	}
	return p, nil
}

// checkKind says what a consistency check of a request stands for.
type checkKind struct {
	part   int  // the part it checks, -1 for a tag stream
	pinned bool // an Any or StreamExists part pinned at the revision read
}

// maxPinnedRetries bounds the retries of an append whose Any (or
// StreamExists) parts were pinned at a revision that moved meanwhile.
const maxPinnedRetries = 10

// appendRecords appends parts, guarded by cond, in one AppendRecords
// transaction. The results are in the parts' order; the position is the
// last of theirs.
func (s *Store) appendRecords(ctx context.Context, op, tenant string, parts []recordsPart, cond *eventstore.AppendCondition) ([]eventstore.AppendResult, event.Position, error) {
	for _, p := range parts {
		if err := s.checkDuplicates(ctx, op, p.name, p.expected, p.data); err != nil {
			return nil, event.Position{}, err
		}
	}
	for attempt := 0; ; attempt++ {
		req := &v2.AppendRecordsRequest{}
		var kinds []checkKind
		first := make([]int64, len(parts)) // each part's first revision, when known
		for i, p := range parts {
			state, pinned, err := s.partState(ctx, op, p)
			if err != nil {
				return nil, event.Position{}, err
			}
			first[i] = -1
			if state >= stateNoStream {
				first[i] = state + 1
			}
			if state != int64(v2.ExpectedRevisionConstants_EXPECTED_REVISION_CONSTANTS_ANY) {
				req.Checks = append(req.Checks, streamCheck(p.name, state))
				kinds = append(kinds, checkKind{part: i, pinned: pinned})
			}
		}
		if cond != nil {
			checks, held, err := s.checkCondition(ctx, op, tenant, cond)
			if err != nil {
				return nil, event.Position{}, err
			}
			if !held {
				// A stale expectation is named first, as a failed check
				// on a written stream is (PostgreSQL checks the streams
				// first too).
				if err := s.expectationsHold(ctx, op, parts); err != nil {
					return nil, event.Position{}, err
				}
				return nil, event.Position{}, fmt.Errorf("%s: %w", op, eventstore.ErrConditionFailed)
			}
			for _, c := range checks {
				req.Checks = append(req.Checks, streamCheck(c.stream, c.rev))
				kinds = append(kinds, checkKind{part: -1})
			}
		}
		for i, p := range parts {
			for j, e := range p.events {
				rec, err := eventRecord(p.name, tenant, e)
				if err != nil {
					return nil, event.Position{}, fmt.Errorf("%s: %w", op, err)
				}
				req.Records = append(req.Records, rec)
				for _, tag := range e.Metadata.Tags {
					m, err := markerRecord(s.names.tagStream(tenant, tag), tag, p, j, first[i], e)
					if err != nil {
						return nil, event.Position{}, fmt.Errorf("%s: %w", op, err)
					}
					req.Records = append(req.Records, m)
				}
			}
		}
		if tagged := slices.ContainsFunc(parts, func(p recordsPart) bool { return p.tagged }); tagged {
			// Last, after every event and marker: the tag log's record,
			// whose position ReadTagged reads (tags.go).
			id := uuid.NewSHA1(parts[0].data[0].EventID, []byte("strata-tag-log/v1")).String()
			req.Records = append(req.Records, &v2.AppendRecord{RecordId: &id, Stream: s.names.tagLog(tenant),
				Schema: &v2.SchemaInfo{Format: v2.SchemaFormat_SCHEMA_FORMAT_JSON, Name: tagLogType}, Data: []byte("{}")})
		}
		resp, err := s.records.appendRecords(ctx, req)
		if err == nil {
			return s.recordsResults(ctx, op, parts, resp)
		}
		violated, ok := violations(err)
		if !ok {
			return nil, event.Position{}, s.translateRecordsErr(op, err)
		}
		for _, v := range violated {
			if int(v.GetCheckIndex()) >= len(kinds) || v.GetCheckIndex() < 0 {
				return nil, event.Position{}, fmt.Errorf("%s: the server reported a violation of check %d of %d", op, v.GetCheckIndex(), len(kinds))
			}
			if k := kinds[v.GetCheckIndex()]; k.part >= 0 && !k.pinned {
				p := parts[k.part]
				return nil, event.Position{}, fmt.Errorf("%s: %w: stream %s is not at %s (%s)", op, eventstore.ErrVersionConflict, p.stream, p.expected, describeState(v.GetStreamState().GetActualState()))
			}
		}
		for _, v := range violated {
			if kinds[v.GetCheckIndex()].part < 0 {
				return nil, event.Position{}, fmt.Errorf("%s: %w: a tagged event was appended meanwhile", op, eventstore.ErrConditionFailed)
			}
		}
		if attempt < maxPinnedRetries {
			continue // only pinned revisions moved: read them again
		}
		return nil, event.Position{}, fmt.Errorf("%s: %w: the streams kept changing while the tagged append was tried %d times", op, eventstore.ErrVersionConflict, attempt+1)
	}
}

// partState returns the stream state check of a part: its expectation, or,
// for a tagged part whose expectation names no revision (Any,
// StreamExists), the revision it is at now (pinned: its markers must name
// the versions its events will get).
func (s *Store) partState(ctx context.Context, op string, p recordsPart) (state int64, pinned bool, err error) {
	e := p.expected
	switch {
	case e == eventstore.NoStream || e == 0:
		return stateNoStream, false, nil
	case e > 0:
		return int64(e) - 1, false, nil
	case !p.tagged && e == eventstore.StreamExists:
		return stateExists, false, nil
	case !p.tagged:
		return int64(v2.ExpectedRevisionConstants_EXPECTED_REVISION_CONSTANTS_ANY), false, nil
	}
	rev, _, err := s.tail(ctx, op, p.name)
	if err != nil {
		return 0, false, err
	}
	if e == eventstore.StreamExists && rev < 0 {
		return 0, false, fmt.Errorf("%s: %w: stream %s does not exist", op, eventstore.ErrVersionConflict, p.stream)
	}
	return rev, true, nil
}

// expectationsHold reads the head of every part whose expectation is not
// Any, and names the first one it finds unsatisfied.
func (s *Store) expectationsHold(ctx context.Context, op string, parts []recordsPart) error {
	for _, p := range parts {
		if p.expected == eventstore.Any {
			continue
		}
		rev, _, err := s.tail(ctx, op, p.name)
		if err != nil {
			return err
		}
		if !p.expected.Satisfied(rev + 1) {
			return fmt.Errorf("%s: %w: stream %s is not at %s", op, eventstore.ErrVersionConflict, p.stream, p.expected)
		}
	}
	return nil
}

func streamCheck(stream string, state int64) *v2.ConsistencyCheck {
	return &v2.ConsistencyCheck{Type: &v2.ConsistencyCheck_StreamState{StreamState: &v2.ConsistencyCheck_StreamStateCheck{
		Stream: stream, ExpectedState: state}}}
}

func describeState(s int64) string {
	switch {
	case s >= 0:
		return fmt.Sprintf("it is at %d", s+1)
	case s == stateNoStream:
		return "it has no events"
	}
	return fmt.Sprintf("its state is %d", s)
}

// violations returns the failed checks of an AppendRecords error.
func violations(err error) ([]*streamerrors.ConsistencyViolation, bool) {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.FailedPrecondition {
		return nil, false
	}
	for _, d := range st.Details() {
		if v, ok := d.(*streamerrors.AppendConsistencyViolationErrorDetails); ok && len(v.GetViolations()) > 0 {
			return v.GetViolations(), true
		}
	}
	return nil, false
}

// translateRecordsErr maps an AppendRecords error onto the port's.
func (s *Store) translateRecordsErr(op string, err error) error {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w", op, contextErr(err))
	case errors.Is(err, ErrClosed), errors.Is(err, errServerTooOld), errors.Is(err, ErrUnsupported):
		return fmt.Errorf("%s: %w", op, err)
	}
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("%s: %s", op, s.conn.red.redact(err.Error()))
	}
	detail := s.conn.red.redact(st.Message())
	switch st.Code() {
	case codes.Canceled:
		return fmt.Errorf("%s: %w", op, context.Canceled)
	case codes.Unavailable, codes.DeadlineExceeded:
		return fmt.Errorf("%s: %w: %s", op, eventstore.ErrUnavailable, detail)
	case codes.Unauthenticated, codes.PermissionDenied:
		return fmt.Errorf("%s: %w: %s", op, ErrAccessDenied, detail)
	case codes.InvalidArgument:
		return fmt.Errorf("%s: %w: the server refused the request: %s", op, ErrInvalidAppend, detail)
	case codes.FailedPrecondition:
		for _, d := range st.Details() {
			if t, ok := d.(*streamerrors.StreamTombstonedErrorDetails); ok {
				return fmt.Errorf("%s: %w: %s", op, ErrStreamDeleted, t.GetStream())
			}
		}
	}
	return fmt.Errorf("%s: %s: %s", op, st.Code(), detail)
}

// recordsResults turns the answer into each part's result. The answer's
// revisions come in no particular order; its position is the last
// record's, which may be a marker's, so each part's last event is read
// back for its position (as the v1 path does for several events).
func (s *Store) recordsResults(ctx context.Context, op string, parts []recordsPart, resp *v2.AppendRecordsResponse) ([]eventstore.AppendResult, event.Position, error) {
	revs := make(map[string]int64, len(resp.GetRevisions()))
	for _, r := range resp.GetRevisions() {
		revs[r.GetStream()] = r.GetRevision()
	}
	out := make([]eventstore.AppendResult, len(parts))
	var last event.Position
	for i, p := range parts {
		rev, ok := revs[p.name]
		if !ok || rev < 0 {
			return nil, event.Position{}, fmt.Errorf("%s: appended, but the server reported no revision for %s", op, p.stream)
		}
		n := int64(len(p.events))
		out[i] = eventstore.AppendResult{FirstVersion: versionOf(uint64(rev)) - n + 1, LastVersion: versionOf(uint64(rev))}
		pos, err := s.readBackPosition(ctx, op, p.name, uint64(rev), p.data[n-1].EventID)
		if err != nil {
			// The events are written: report the append as the success it
			// is, with the answer's position (at or after the events').
			s.cfg.logger.Warn("eventstoredb: appended, but the last event's position could not be read back; the server's answer is used",
				"stream", p.name, "err", err)
			pos = event.Position{Major: uint64(resp.GetPosition()), Minor: uint64(resp.GetPosition())}
		}
		out[i].Position = pos
		if last.Less(pos) {
			last = pos
		}
	}
	return out, last, nil
}

// eventRecord is the v2 form of one strata event. Its metadata travels as
// properties, one per field of the v1 metadata (wireMetadata), from which
// the server synthesizes the metadata v1 reads return; ESDB's own
// $correlationId/$causationId are left out, as the v2 protocol reserves
// keys that start with '$' for the server.
func eventRecord(name, tenant string, e eventstore.NewEvent) (*v2.AppendRecord, error) {
	meta, err := encodeMetadata(tenant, e.SchemaVersion, e.Metadata)
	if err != nil {
		return nil, fmt.Errorf("encode metadata of event %s: %w", e.ID, err)
	}
	var fields map[string]any
	if err := json.Unmarshal(meta, &fields); err != nil {
		return nil, fmt.Errorf("encode metadata of event %s: %w", e.ID, err)
	}
	props := make(map[string]*structpb.Value, len(fields))
	for k, v := range fields {
		if strings.HasPrefix(k, "$") {
			continue
		}
		if props[k], err = structpb.NewValue(v); err != nil {
			return nil, fmt.Errorf("encode metadata of event %s: %w", e.ID, err)
		}
	}
	id := e.ID
	return &v2.AppendRecord{
		RecordId:   &id,
		Stream:     name,
		Schema:     &v2.SchemaInfo{Format: v2.SchemaFormat_SCHEMA_FORMAT_JSON, Name: e.Type},
		Data:       e.Data,
		Properties: props,
	}, nil
}

// markerRecord is the marker of the j-th event of part p in a tag stream;
// first is the revision the part's first event gets.
func markerRecord(stream, tag string, p recordsPart, j int, first int64, e eventstore.NewEvent) (*v2.AppendRecord, error) {
	if first < 0 {
		return nil, fmt.Errorf("stream %s: the versions of its tagged events are not known before the append", p.stream)
	}
	data, err := json.Marshal(tagMarker{Stream: p.stream, Version: first + int64(j) + 1, ID: e.ID, Type: e.Type, Tags: e.Metadata.Tags})
	if err != nil {
		return nil, err
	}
	id := markerID(uuid.MustParse(e.ID), tag).String()
	return &v2.AppendRecord{
		RecordId: &id,
		Stream:   stream,
		Schema:   &v2.SchemaInfo{Format: v2.SchemaFormat_SCHEMA_FORMAT_JSON, Name: markerType},
		Data:     data,
	}, nil
}
