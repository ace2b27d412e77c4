package esdb

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	api "github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/google/uuid"
	v2 "github.com/kurrent-io/KurrentDB-Client-Go/protos/kurrentdb/protocols/v2/streams/streams"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fakeServer is an in-process stand-in for the EventStoreDB gRPC Streams
// API, for testing the adapter's plumbing where no server can run. It
// models what the adapter relies on, after the server's source:
// IndexWriter.CheckCommit (expected versions and event-ID idempotency: an
// in-memory ID cache for Any/StreamExists, the stream itself for exact
// revisions, nothing when expected == current), one log position per event
// (commit == prepare), exclusive $all positions, stream-prefix filtered
// subscriptions with checkpoints and CaughtUp, and KurrentDB's v2
// AppendRecords (fakerecords_test.go). It also writes a system
// event now and then, so that $all is never only ours. It is not a
// substitute for the conformance run against a real server.
type fakeServer struct {
	api.UnimplementedStreamsServer

	mu      sync.Mutex
	log     []fakeEvent
	streams map[string][]int // stream -> indexes into log
	ids     map[uuid.UUID]fakeID
	next    uint64
	appends int
	changed chan struct{} // closed and replaced on every append
	drop    chan struct{} // closed to drop every subscription

	// multiPosition, when set, makes a multi-event append answer with its
	// first event's position (an answer the adapter must not trust).
	multiFirstPosition bool
	// noCaughtUp makes subscriptions never say they caught up (servers
	// before 23.10).
	noCaughtUp bool
	// noCheckpoints makes filtered subscriptions send no checkpoints.
	noCheckpoints bool
	// scanDelay is how long a subscription takes over each event of $all.
	scanDelay time.Duration
	// v1Only serves no v2 StreamsService (servers before KurrentDB 25.1);
	// read by serve.
	v1Only bool
	// follower, the leader's address, makes AppendRecords answer
	// NOT_LEADER_NODE naming it; read by serve.
	follower string
}

type fakeEvent struct {
	id          uuid.UUID
	stream      string
	number      uint64
	typ         string
	contentType string
	data, meta  []byte
	pos         uint64
	created     time.Time
}

type fakeID struct {
	stream string
	number uint64
}

// ESDB's internal expected versions.
const (
	fakeNoStream     = -1
	fakeAny          = -2
	fakeStreamExists = -4
)

func newFakeServer() *fakeServer {
	return &fakeServer{streams: map[string][]int{}, ids: map[uuid.UUID]fakeID{}, next: 1000,
		changed: make(chan struct{}), drop: make(chan struct{}), multiFirstPosition: true}
}

// serve listens on addr ("127.0.0.1:0" for any port) and returns the
// address; the server stops at the end of the test.
func (f *fakeServer) serve(t *testing.T, addr string) string {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	api.RegisterStreamsServer(g, f)
	switch {
	case f.follower != "":
		host, port, _ := net.SplitHostPort(f.follower)
		p, _ := strconv.Atoi(port)
		v2.RegisterStreamsServiceServer(g, fakeFollower{leaderHost: host, leaderPort: int32(p)})
	case !f.v1Only:
		v2.RegisterStreamsServiceServer(g, fakeRecords{f: f})
	}
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// dropSubscriptions ends every running subscription with Unavailable.
func (f *fakeServer) dropSubscriptions() {
	f.mu.Lock()
	close(f.drop)
	f.drop = make(chan struct{})
	f.mu.Unlock()
}

// forgetIDs empties the event-ID cache, as a server restart does.
func (f *fakeServer) forgetIDs() {
	f.mu.Lock()
	f.ids = map[uuid.UUID]fakeID{}
	f.mu.Unlock()
}

func (f *fakeServer) write(stream string, typ, contentType string, id uuid.UUID, data, meta []byte) fakeEvent {
	e := fakeEvent{id: id, stream: stream, number: uint64(len(f.streams[stream])), typ: typ, contentType: contentType,
		data: data, meta: meta, pos: f.next, created: time.Now()}
	f.next += 100 + uint64(len(data)+len(meta))
	f.streams[stream] = append(f.streams[stream], len(f.log))
	f.log = append(f.log, e)
	if !strings.HasPrefix(stream, "$") {
		f.ids[id] = fakeID{stream, e.number}
	}
	return e
}

func (f *fakeServer) Append(srv api.Streams_AppendServer) error {
	first, err := srv.Recv()
	if err != nil {
		return err
	}
	opts := first.GetOptions()
	if opts == nil {
		return status.Error(codes.InvalidArgument, "options first")
	}
	stream := string(opts.GetStreamIdentifier().GetStreamName())
	var expected int64
	switch opts.GetExpectedStreamRevision().(type) {
	case *api.AppendReq_Options_Revision:
		expected = int64(opts.GetRevision())
	case *api.AppendReq_Options_NoStream:
		expected = fakeNoStream
	case *api.AppendReq_Options_Any:
		expected = fakeAny
	case *api.AppendReq_Options_StreamExists:
		expected = fakeStreamExists
	}
	var msgs []*api.AppendReq_ProposedMessage
	for {
		req, err := srv.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		msgs = append(msgs, req.GetProposedMessage())
	}
	ids := make([]uuid.UUID, len(msgs))
	for i, m := range msgs {
		s := m.GetId().GetStructured()
		ids[i], _ = esdb.ParseUUIDFromInt64(s.GetMostSignificantBits(), s.GetLeastSignificantBits())
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	cur := int64(len(f.streams[stream])) - 1
	decision, firstN, lastN := f.check(stream, expected, cur, ids)
	switch decision {
	case "wrong":
		w := &api.AppendResp_WrongExpectedVersion{}
		if cur < 0 {
			w.CurrentRevisionOption = &api.AppendResp_WrongExpectedVersion_CurrentNoStream{CurrentNoStream: &shared.Empty{}}
		} else {
			w.CurrentRevisionOption = &api.AppendResp_WrongExpectedVersion_CurrentRevision{CurrentRevision: uint64(cur)}
		}
		return srv.SendAndClose(&api.AppendResp{Result: &api.AppendResp_WrongExpectedVersion_{WrongExpectedVersion: w}})
	case "idempotent":
		// The server may answer a deduplicated append without a position.
		return srv.SendAndClose(&api.AppendResp{Result: &api.AppendResp_Success_{Success: &api.AppendResp_Success{
			CurrentRevisionOption: &api.AppendResp_Success_CurrentRevision{CurrentRevision: uint64(lastN)},
			PositionOption:        &api.AppendResp_Success_NoPosition{NoPosition: &shared.Empty{}},
		}}})
	}
	_ = firstN
	var written []fakeEvent
	for i, m := range msgs {
		md := m.GetMetadata()
		written = append(written, f.write(stream, md["type"], md["content-type"], ids[i], m.GetData(), m.GetCustomMetadata()))
	}
	f.appends++
	if f.appends%3 == 0 {
		f.write("$stats-127.0.0.1:2113", "$statsCollected", "application/json", uuid.New(), []byte(`{}`), nil)
	}
	close(f.changed)
	f.changed = make(chan struct{})
	last := written[len(written)-1]
	p := last.pos
	if f.multiFirstPosition {
		p = written[0].pos
	}
	return srv.SendAndClose(&api.AppendResp{Result: &api.AppendResp_Success_{Success: &api.AppendResp_Success{
		CurrentRevisionOption: &api.AppendResp_Success_CurrentRevision{CurrentRevision: last.number},
		PositionOption:        &api.AppendResp_Success_Position{Position: &api.AppendResp_Position{CommitPosition: p, PreparePosition: p}},
	}}})
}

// check follows IndexWriter.CheckCommit. It returns "ok", "wrong" or
// "idempotent" with the first and last revisions of the earlier write.
func (f *fakeServer) check(stream string, expected, cur int64, ids []uuid.UUID) (string, int64, int64) {
	if expected == fakeStreamExists && cur < 0 {
		return "wrong", 0, 0
	}
	if expected == fakeAny || expected == fakeStreamExists {
		var firstN, lastN int64
		for i, id := range ids {
			info, ok := f.ids[id]
			if !ok || info.stream != stream {
				if i == 0 {
					return "ok", 0, 0
				}
				return "wrong", 0, 0 // CorruptedIdempotency
			}
			if i == 0 {
				firstN = int64(info.number)
			}
			lastN = int64(info.number)
		}
		return "idempotent", firstN, lastN
	}
	if expected < cur {
		n := expected
		for i, id := range ids {
			n++
			if n <= cur && f.log[f.streams[stream][n]].id == id {
				continue
			}
			_ = i
			return "wrong", 0, 0
		}
		return "idempotent", expected + 1, n
	}
	if expected > cur {
		return "wrong", 0, 0
	}
	return "ok", 0, 0
}

func (f *fakeServer) Read(req *api.ReadReq, srv api.Streams_ReadServer) error {
	o := req.GetOptions()
	backwards := o.GetReadDirection() == api.ReadReq_Options_Backwards
	if s := o.GetStream(); s != nil {
		return f.readStream(srv, s, backwards, o.GetCount())
	}
	all := o.GetAll()
	if o.GetSubscription() != nil {
		return f.subscribeAll(srv, all, o.GetFilter())
	}
	if !backwards {
		return status.Error(codes.Unimplemented, "the fake reads $all backwards only")
	}
	f.mu.Lock()
	end := uint64(1<<63 - 1)
	if p := all.GetPosition(); p != nil {
		end = p.GetCommitPosition()
	}
	var out []fakeEvent
	for i := len(f.log) - 1; i >= 0 && uint64(len(out)) < o.GetCount(); i-- {
		if f.log[i].pos < end {
			out = append(out, f.log[i])
		}
	}
	f.mu.Unlock()
	for _, e := range out {
		if err := srv.Send(eventResp(e)); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeServer) readStream(srv api.Streams_ReadServer, s *api.ReadReq_Options_StreamOptions, backwards bool, count uint64) error {
	name := string(s.GetStreamIdentifier().GetStreamName())
	f.mu.Lock()
	idx, found := f.streams[name]
	var out []fakeEvent
	if found {
		if backwards {
			from := len(idx) - 1
			if _, ok := s.GetRevisionOption().(*api.ReadReq_Options_StreamOptions_Revision); ok && int(s.GetRevision()) < from {
				from = int(s.GetRevision())
			}
			for n := from; n >= 0 && uint64(len(out)) < count; n-- {
				out = append(out, f.log[idx[n]])
			}
		} else {
			from := 0
			if _, ok := s.GetRevisionOption().(*api.ReadReq_Options_StreamOptions_Revision); ok {
				from = int(s.GetRevision())
			}
			for n := from; n < len(idx) && uint64(len(out)) < count; n++ {
				out = append(out, f.log[idx[n]])
			}
		}
	}
	f.mu.Unlock()
	if !found {
		return srv.Send(&api.ReadResp{Content: &api.ReadResp_StreamNotFound_{StreamNotFound: &api.ReadResp_StreamNotFound{
			StreamIdentifier: &shared.StreamIdentifier{StreamName: []byte(name)}}}})
	}
	for _, e := range out {
		if err := srv.Send(eventResp(e)); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeServer) subscribeAll(srv api.Streams_ReadServer, all *api.ReadReq_Options_AllOptions, filter *api.ReadReq_Options_FilterOptions) error {
	if err := srv.Send(&api.ReadResp{Content: &api.ReadResp_Confirmation{Confirmation: &api.ReadResp_SubscriptionConfirmation{SubscriptionId: uuid.NewString()}}}); err != nil {
		return err
	}
	var after uint64
	if p := all.GetPosition(); p != nil {
		after = p.GetCommitPosition()
	} else if all.GetEnd() != nil {
		return status.Error(codes.Unimplemented, "the fake subscribes from a position or the start only")
	}
	prefixes := filter.GetStreamIdentifier().GetPrefix()
	every := uint64(filter.GetMax()) * uint64(max(filter.GetCheckpointIntervalMultiplier(), 1))
	if every == 0 {
		every = 32
	}
	next := 0 // index into the log
	var scanned uint64
	caughtUp := false
	for {
		f.mu.Lock()
		batch := append([]fakeEvent(nil), f.log[next:]...)
		changed, drop := f.changed, f.drop
		noCaughtUp, noCheckpoints, scanDelay := f.noCaughtUp, f.noCheckpoints, f.scanDelay
		f.mu.Unlock()
		for _, e := range batch {
			if scanDelay > 0 {
				time.Sleep(scanDelay)
			}
			next++
			if e.pos <= after {
				continue
			}
			after = e.pos
			if matches(e.stream, prefixes) {
				if err := srv.Send(eventResp(e)); err != nil {
					return err
				}
			}
			scanned++
			if scanned%every == 0 && !noCheckpoints {
				if err := srv.Send(&api.ReadResp{Content: &api.ReadResp_Checkpoint_{Checkpoint: &api.ReadResp_Checkpoint{
					CommitPosition: e.pos, PreparePosition: e.pos}}}); err != nil {
					return err
				}
			}
		}
		if !caughtUp && !noCaughtUp {
			caughtUp = true
			if err := srv.Send(&api.ReadResp{Content: &api.ReadResp_CaughtUp_{CaughtUp: &api.ReadResp_CaughtUp{}}}); err != nil {
				return err
			}
		}
		select {
		case <-changed:
		case <-drop:
			return status.Error(codes.Unavailable, "subscription dropped by the test")
		case <-srv.Context().Done():
			return srv.Context().Err()
		}
	}
}

func matches(stream string, prefixes []string) bool {
	if len(prefixes) == 0 {
		return true
	}
	for _, p := range prefixes {
		if strings.HasPrefix(stream, p) {
			return true
		}
	}
	return false
}

func eventResp(e fakeEvent) *api.ReadResp {
	return &api.ReadResp{Content: &api.ReadResp_Event{Event: &api.ReadResp_ReadEvent{
		Event: &api.ReadResp_ReadEvent_RecordedEvent{
			Id:               &shared.UUID{Value: &shared.UUID_String_{String_: e.id.String()}},
			StreamIdentifier: &shared.StreamIdentifier{StreamName: []byte(e.stream)},
			StreamRevision:   e.number,
			PreparePosition:  e.pos,
			CommitPosition:   e.pos,
			Metadata: map[string]string{
				"type":         e.typ,
				"content-type": e.contentType,
				"created":      strconv.FormatInt(e.created.UnixNano()/100, 10),
			},
			CustomMetadata: e.meta,
			Data:           e.data,
		},
		Position: &api.ReadResp_ReadEvent_CommitPosition{CommitPosition: e.pos},
	}}}
}

func (e fakeEvent) String() string { return fmt.Sprintf("%s@%d", e.stream, e.number) }
