package esdb

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"

	"github.com/google/uuid"
	rpcerrors "github.com/kurrent-io/KurrentDB-Client-Go/protos/kurrentdb/protocols/v2/errors"
	streamerrors "github.com/kurrent-io/KurrentDB-Client-Go/protos/kurrentdb/protocols/v2/streams/errors"
	v2 "github.com/kurrent-io/KurrentDB-Client-Go/protos/kurrentdb/protocols/v2/streams/streams"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

// fakeRecords is the fake's KurrentDB v2 StreamsService (AppendRecords,
// KurrentDB 25.1+), on the same gRPC server and the same log as the v1
// Streams API. It models what the adapter relies on, after the protocol
// (streams.proto, streams/errors.proto) and the server's command, which
// turns the request into one WriteEvents: the request is validated (stream
// names [A-Za-z0-9_.-], record IDs, check states: a revision, no-stream or
// exists, never any); then, under the fake's lock, every check is
// evaluated before any record is written, and a violated one fails the
// whole request with FAILED_PRECONDITION carrying
// AppendConsistencyViolationErrorDetails (every violated check, with its
// index, expected and actual state; -1 for a stream with no events).
// Records are written in the request's order, interleaved across streams
// as sent; the answer names each written stream's last revision, in no
// particular order, and the last record's position. A v1 read of a record
// returns metadata the server synthesizes: its properties as a JSON object,
// beside $schema.* keys. Not modelled: the server's event-ID
// deduplication for AppendRecords, size limits, deleted streams.
type fakeRecords struct {
	v2.UnimplementedStreamsServiceServer
	f *fakeServer
}

var v2StreamName = regexp.MustCompile(`^[a-zA-Z0-9_.-]+$`)

func (r fakeRecords) AppendRecords(_ context.Context, req *v2.AppendRecordsRequest) (*v2.AppendRecordsResponse, error) {
	f := r.f
	if len(req.GetRecords()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "at least one record is required")
	}
	type proposed struct {
		stream, typ, contentType string
		id                       uuid.UUID
		data, meta               []byte
	}
	records := make([]proposed, len(req.GetRecords()))
	for i, rec := range req.GetRecords() {
		if !v2StreamName.MatchString(rec.GetStream()) {
			return nil, status.Errorf(codes.InvalidArgument, "record %d: stream name %q must not be empty and can only contain alphanumeric characters, underscores, dashes, and periods", i, rec.GetStream())
		}
		id := uuid.New()
		if rec.RecordId != nil {
			var err error
			if id, err = uuid.Parse(rec.GetRecordId()); err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "record %d: record id %q is not a UUID", i, rec.GetRecordId())
			}
		}
		if rec.GetSchema().GetName() == "" || rec.GetSchema().GetFormat() == v2.SchemaFormat_SCHEMA_FORMAT_UNSPECIFIED {
			return nil, status.Errorf(codes.InvalidArgument, "record %d: schema name and format are required", i)
		}
		contentType := "application/octet-stream"
		if rec.GetSchema().GetFormat() == v2.SchemaFormat_SCHEMA_FORMAT_JSON {
			contentType = "application/json"
		}
		meta, err := synthesizeMetadata(rec)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "record %d: properties: %v", i, err)
		}
		records[i] = proposed{stream: rec.GetStream(), typ: rec.GetSchema().GetName(), contentType: contentType, id: id, data: rec.GetData(), meta: meta}
	}
	for i, c := range req.GetChecks() {
		ss := c.GetStreamState()
		if ss == nil {
			return nil, status.Errorf(codes.InvalidArgument, "check %d: each consistency check must specify a kind", i)
		}
		if !v2StreamName.MatchString(ss.GetStream()) {
			return nil, status.Errorf(codes.InvalidArgument, "check %d: stream name %q", i, ss.GetStream())
		}
		if e := ss.GetExpectedState(); e < 0 && e != fakeNoStream && e != fakeStreamExists {
			return nil, status.Errorf(codes.InvalidArgument, "check %d: expected revision must be a specific revision, NoStream, or Exists. Any is not allowed", i)
		}
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	var violated []*streamerrors.ConsistencyViolation
	for i, c := range req.GetChecks() {
		ss := c.GetStreamState()
		cur := int64(len(f.streams[ss.GetStream()])) - 1
		var ok bool
		switch e := ss.GetExpectedState(); {
		case e >= 0:
			ok = cur == e
		case e == fakeNoStream:
			ok = cur < 0
		default: // exists
			ok = cur >= 0
		}
		if !ok {
			violated = append(violated, &streamerrors.ConsistencyViolation{CheckIndex: int32(i),
				Type: &streamerrors.ConsistencyViolation_StreamState{StreamState: &streamerrors.ConsistencyViolation_StreamStateViolation{
					Stream: ss.GetStream(), ExpectedState: ss.GetExpectedState(), ActualState: cur}}})
		}
	}
	if len(violated) > 0 {
		st, err := status.New(codes.FailedPrecondition, fmt.Sprintf("%d consistency check(s) failed", len(violated))).
			WithDetails(&streamerrors.AppendConsistencyViolationErrorDetails{Violations: violated})
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		return nil, st.Err()
	}
	last := map[string]int64{}
	var pos uint64
	for _, p := range records {
		e := f.write(p.stream, p.typ, p.contentType, p.id, p.data, p.meta)
		last[p.stream], pos = int64(e.number), e.pos
	}
	f.appends++
	if f.appends%3 == 0 {
		f.write("$stats-127.0.0.1:2113", "$statsCollected", "application/json", uuid.New(), []byte(`{}`), nil)
	}
	close(f.changed)
	f.changed = make(chan struct{})
	resp := &v2.AppendRecordsResponse{Position: int64(pos)}
	for stream, rev := range last { // map order: "in no guaranteed order"
		resp.Revisions = append(resp.Revisions, &v2.StreamRevision{Stream: stream, Revision: rev})
	}
	return resp, nil
}

// synthesizeMetadata is the metadata a v1 read returns for a record: its
// properties as a JSON object, with the schema's name and format.
func synthesizeMetadata(rec *v2.AppendRecord) ([]byte, error) {
	props := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for k, v := range rec.GetProperties() {
		props.Fields[k] = v
	}
	props.Fields["$schema.name"] = structpb.NewStringValue(rec.GetSchema().GetName())
	props.Fields["$schema.format"] = structpb.NewStringValue(rec.GetSchema().GetFormat().String())
	b, err := protojson.Marshal(props)
	if err != nil {
		return nil, err
	}
	var compact json.RawMessage
	if err := json.Unmarshal(b, &compact); err != nil {
		return nil, err
	}
	return json.Marshal(compact)
}

// fakeFollower answers every AppendRecords with NOT_LEADER_NODE naming
// leader, as a follower does.
type fakeFollower struct {
	v2.UnimplementedStreamsServiceServer
	leaderHost string
	leaderPort int32
}

func (f fakeFollower) AppendRecords(context.Context, *v2.AppendRecordsRequest) (*v2.AppendRecordsResponse, error) {
	st, err := status.New(codes.FailedPrecondition, "not the leader").WithDetails(&rpcerrors.NotLeaderNodeErrorDetails{
		CurrentLeader: &rpcerrors.NotLeaderNodeErrorDetails_NodeInfo{Host: f.leaderHost, Port: f.leaderPort}})
	if err != nil {
		return nil, err
	}
	return nil, st.Err()
}
