package esdb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/eventstore/storetest"
)

// The store is also the projections monitor's LogStats (declared there;
// this package may not import projections).
var _ interface {
	Head(context.Context) (event.Position, error)
	Lag(context.Context, event.Position) (int64, time.Time, error)
} = (*Store)(nil)

// memIdempotency is an in-memory eventstore.IdempotencyStore.
type memIdempotency struct {
	mu       sync.Mutex
	recs     map[[2]string]eventstore.IdempotencyRecord
	failSave error
}

func (m *memIdempotency) LookupIdempotency(_ context.Context, tenant, key string) (eventstore.IdempotencyRecord, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rec, ok := m.recs[[2]string{tenant, key}]
	return rec, ok, nil
}

func (m *memIdempotency) SaveIdempotency(_ context.Context, tenant, key, hash string, resp []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failSave != nil {
		return m.failSave
	}
	if m.recs == nil {
		m.recs = map[[2]string]eventstore.IdempotencyRecord{}
	}
	k := [2]string{tenant, key}
	if _, ok := m.recs[k]; ok {
		return eventstore.ErrIdempotencyKeyExists
	}
	m.recs[k] = eventstore.IdempotencyRecord{RequestHash: hash, Response: resp, CreatedAt: time.Now()}
	return nil
}

func openFake(t *testing.T, addr string, opts ...Option) *Store {
	t.Helper()
	opts = append([]Option{
		WithNamespace(uniqueNamespace(t)),
		WithLogger(slog.New(slog.NewTextHandler(t.Output(), nil))),
		WithPollWait(20 * time.Millisecond),
	}, opts...)
	s, err := Open(context.Background(), "esdb://admin:"+secret+"@"+addr+"?tls=false&maxDiscoverAttempts=1&discoveryInterval=10", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newEvents(n int) []eventstore.NewEvent {
	out := make([]eventstore.NewEvent, n)
	for i := range out {
		out[i] = eventstore.NewEvent{ID: storetest.NewID(), Type: "x.y", SchemaVersion: 1, Data: []byte(fmt.Sprintf(`{"n":%d}`, i)),
			Metadata: event.Metadata{CommandID: "cmd-1"}}
	}
	return out
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestFakeServerConformance runs the whole suite against the in-process
// fake: it exercises the adapter's plumbing (the cursors, Head, the
// duplicate check, the read-back, idempotency composition) on every run,
// and the suites of multi-stream appends and of tags and conditions
// against the fake's AppendRecords (the tag streams are ordinary streams
// there). Only TestConformance says anything about a real server.
func TestFakeServerConformance(t *testing.T) {
	f := newFakeServer()
	addr := f.serve(t, "127.0.0.1:0")
	harness := func(t *testing.T) storetest.Harness {
		s := openFake(t, addr, WithIdempotencyStore(&memIdempotency{}))
		return storetest.Harness{Store: s, Log: s, Idempotency: s, RaceIterations: 200}
	}
	storetest.Run(t, harness)
	t.Run("Multi", func(t *testing.T) { storetest.RunMulti(t, harness) })
	t.Run("Conditions", func(t *testing.T) { storetest.RunConditions(t, harness) })
}

// TestFakeServerRecoversFromFailedDiscovery: a store opened while the
// server is down works once it is up (the client library alone would stay
// closed for good).
func TestFakeServerRecoversFromFailedDiscovery(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	s := openFake(t, addr)
	req := eventstore.AppendRequest{Tenant: "t-a", Stream: "s", Expected: eventstore.NoStream, Events: newEvents(1)}
	if _, err := s.Append(ctxT(t), req); !errors.Is(err, eventstore.ErrUnavailable) {
		t.Fatalf("append with the server down: %v", err)
	}
	newFakeServer().serve(t, addr)
	if _, err := s.Append(ctxT(t), req); err != nil {
		t.Fatalf("append once the server is up: %v", err)
	}
}

// TestFakeServerSubscriptionDrop: a dropped subscription resumes where it
// was; the reader neither misses nor repeats an event.
func TestFakeServerSubscriptionDrop(t *testing.T) {
	t.Parallel()
	f := newFakeServer()
	s := openFake(t, f.serve(t, "127.0.0.1:0"))
	ctx := ctxT(t)
	appendN := func(n int) {
		for i := 0; i < n; i++ {
			if _, err := s.Append(ctx, eventstore.AppendRequest{Tenant: "t-a", Stream: fmt.Sprintf("s-%d", i%3), Expected: eventstore.Any, Events: newEvents(1)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	appendN(10)
	var seen []event.Record
	var at event.Position
	readUntil := func(want int) {
		deadline := time.Now().Add(10 * time.Second)
		for len(seen) < want {
			recs, err := s.ReadAll(ctx, at, 4)
			if err != nil && !errors.Is(err, eventstore.ErrUnavailable) {
				t.Fatal(err)
			}
			for _, r := range recs {
				if !at.Less(r.Position) {
					t.Fatalf("position %v after %v", r.Position, at)
				}
				at = r.Position
			}
			seen = append(seen, recs...)
			if time.Now().After(deadline) {
				t.Fatalf("read %d events, want %d", len(seen), want)
			}
		}
	}
	readUntil(6)
	f.dropSubscriptions()
	appendN(10)
	readUntil(20)
	if recs, err := s.ReadAll(ctx, at, 10); err != nil || len(recs) != 0 {
		t.Fatalf("after the last event: %d events, %v", len(recs), err)
	}
	ids := map[string]bool{}
	for _, r := range seen {
		if ids[r.ID] {
			t.Fatalf("event %s delivered twice", r.ID)
		}
		ids[r.ID] = true
	}
}

// TestFakeServerDuplicates walks the retries of one command through the
// server's idempotency and the store's duplicate check.
func TestFakeServerDuplicates(t *testing.T) {
	t.Parallel()
	f := newFakeServer()
	s := openFake(t, f.serve(t, "127.0.0.1:0"))
	ctx := ctxT(t)
	first := eventstore.AppendRequest{Tenant: "t-a", Stream: "order-1", Expected: eventstore.NoStream, Events: newEvents(2)}
	res, err := s.Append(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	recs, _ := s.ReadStream(ctx, "t-a", "order-1", 0)
	if len(recs) != 2 || res.Position != recs[1].Position || res.FirstVersion != 1 || res.LastVersion != 2 {
		t.Fatalf("append result %+v, stream %v", res, recs)
	}

	// A retry at the same expected version: the server recognises it
	// (durably, from the stream) and answers with the first write.
	again, err := s.Append(ctx, first)
	if err != nil || again != res {
		t.Fatalf("retry at the same version: %+v, %v; want %+v", again, err, res)
	}
	// Even after a restart emptied the server's ID cache.
	f.forgetIDs()
	if again, err := s.Append(ctx, first); err != nil || again != res {
		t.Fatalf("retry after a restart: %+v, %v; want %+v", again, err, res)
	}

	// A retry that reloaded the stream expects version 2, where the server
	// would store the events again: the store refuses.
	reloaded := first
	reloaded.Expected = eventstore.Exact(2)
	if _, err := s.Append(ctx, reloaded); !errors.Is(err, eventstore.ErrVersionConflict) {
		t.Fatalf("retry at the new head: %v, want ErrVersionConflict", err)
	}
	// With Any, after a restart (the server's cache is empty) as well.
	reloaded.Expected = eventstore.Any
	if _, err := s.Append(ctx, reloaded); !errors.Is(err, eventstore.ErrVersionConflict) {
		t.Fatalf("retry with any: %v, want ErrVersionConflict", err)
	}
	if recs, _ := s.ReadStream(ctx, "t-a", "order-1", 0); len(recs) != 2 {
		t.Fatalf("stream has %d events, want 2", len(recs))
	}

	// Beyond the window the check cannot see: documented.
	narrow := openFake(t, f.serve(t, "127.0.0.1:0"), WithDuplicateWindow(1))
	evs := newEvents(1)
	mustAppend := func(st *Store, exp eventstore.ExpectedVersion, e []eventstore.NewEvent) {
		t.Helper()
		if _, err := st.Append(ctx, eventstore.AppendRequest{Tenant: "t-a", Stream: "o", Expected: exp, Events: e}); err != nil {
			t.Fatal(err)
		}
	}
	mustAppend(narrow, eventstore.NoStream, evs)
	mustAppend(narrow, eventstore.Exact(1), newEvents(1))
	mustAppend(narrow, eventstore.Exact(2), evs) // stored twice: the handler's CommandID check covers this
}

// TestFakeServerIdempotencyRecordLost: the crash window. The append
// succeeds, the record cannot be saved: the command is reported as done,
// and its retry after a reload is refused instead of stored twice.
func TestFakeServerIdempotencyRecordLost(t *testing.T) {
	t.Parallel()
	f := newFakeServer()
	idem := &memIdempotency{failSave: errors.New("postgres is down")}
	s := openFake(t, f.serve(t, "127.0.0.1:0"), WithIdempotencyStore(idem))
	ctx := ctxT(t)
	evs := newEvents(1)
	key := &eventstore.Idempotency{Key: "k", RequestHash: "h", Response: func(r eventstore.AppendResult) ([]byte, error) {
		return []byte(fmt.Sprint(r.LastVersion)), nil
	}}
	res, err := s.Append(ctx, eventstore.AppendRequest{Tenant: "t-a", Stream: "o", Expected: eventstore.NoStream, Events: evs, Idempotency: key})
	if err != nil || res.LastVersion != 1 {
		t.Fatalf("append whose record is lost: %+v, %v", res, err)
	}
	idem.mu.Lock()
	idem.failSave = nil
	idem.mu.Unlock()
	if _, err := s.Append(ctx, eventstore.AppendRequest{Tenant: "t-a", Stream: "o", Expected: eventstore.Exact(1), Events: evs, Idempotency: key}); !errors.Is(err, eventstore.ErrVersionConflict) {
		t.Fatalf("retry after reload: %v, want ErrVersionConflict", err)
	}
	if _, found, _ := s.LookupIdempotency(ctx, "t-a", "k"); found {
		t.Fatal("a refused retry recorded an outcome")
	}
}

// TestFakeServerHeadAndCheckpoints: Head pages back over foreign events and
// reuses its last scan; LatestCheckpoint moves past foreign events.
func TestFakeServerHeadAndCheckpoints(t *testing.T) {
	t.Parallel()
	f := newFakeServer()
	addr := f.serve(t, "127.0.0.1:0")
	ours := openFake(t, addr)
	other := openFake(t, addr)
	ctx := ctxT(t)
	if h, err := ours.Head(ctx); err != nil || !h.IsZero() {
		t.Fatalf("empty head %v, %v", h, err)
	}
	res, err := ours.Append(ctx, eventstore.AppendRequest{Tenant: "t-a", Stream: "s", Expected: eventstore.NoStream, Events: newEvents(1)})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3*headPage; i++ {
		if _, err := other.Append(ctx, eventstore.AppendRequest{Tenant: "t-b", Stream: fmt.Sprintf("s-%d", i%5), Expected: eventstore.Any, Events: newEvents(1)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 2; i++ { // the second call stops at the first call's end
		if h, err := ours.Head(ctx); err != nil || h != res.Position {
			t.Fatalf("head %v, %v; want %v", h, err, res.Position)
		}
	}
	if h, err := other.Head(ctx); err != nil || !res.Position.Less(h) {
		t.Fatalf("other namespace's head %v, %v", h, err)
	}

	recs, err := ours.ReadAll(ctx, event.Position{}, 10)
	if err != nil || len(recs) != 1 {
		t.Fatalf("read all: %d, %v", len(recs), err)
	}
	if recs, err := ours.ReadAll(ctx, res.Position, 10); err != nil || len(recs) != 0 {
		t.Fatalf("read all after our only event: %d, %v", len(recs), err)
	}
	cp := ours.LatestCheckpoint(res.Position)
	if !res.Position.Less(cp) {
		t.Fatalf("latest checkpoint %v did not move past %d foreign events", cp, 3*headPage)
	}
	// Continuing from the checkpoint reuses the subscription and sees the
	// next event.
	next, err := ours.Append(ctx, eventstore.AppendRequest{Tenant: "t-a", Stream: "s", Expected: eventstore.Exact(1), Events: newEvents(1)})
	if err != nil {
		t.Fatal(err)
	}
	recs, err = ours.ReadAll(ctx, cp, 10)
	if err != nil || len(recs) != 1 || recs[0].Position != next.Position {
		t.Fatalf("from the checkpoint: %v, %v", recs, err)
	}

	// Lag counts our events after a position, through the foreign ones.
	for _, c := range []struct {
		after event.Position
		want  int64
	}{{event.Position{}, 2}, {res.Position, 1}, {next.Position, 0}} {
		n, oldest, err := ours.Lag(ctx, c.after)
		if err != nil || n != c.want || (n > 0) == oldest.IsZero() {
			t.Errorf("lag after %v: %d, %v, %v; want %d", c.after, n, oldest, err, c.want)
		}
	}
	if h, err := ours.Head(ctx); err != nil || h != next.Position {
		t.Fatalf("head after the second append: %v, %v; want %v", h, err, next.Position)
	}
}

// TestFakeServerTenantReadWithoutCaughtUp: on a server that never says a
// subscription caught up (before 23.10) and sends no checkpoint, ReadTenant still returns the tenant's events, and an empty answer
// only once it has read the namespace's events up to the head: the poll
// wait alone proves nothing there (the server may still be scanning other
// tenants' events).
func TestFakeServerTenantReadWithoutCaughtUp(t *testing.T) {
	t.Parallel()
	f := newFakeServer()
	addr := f.serve(t, "127.0.0.1:0")
	s := openFake(t, addr, func(c *config) { c.catchUpWait = 10 * time.Millisecond })
	ctx := ctxT(t)
	var mine []string
	for i := range 45 { // the last few are another tenant's: the head is none of ours
		tenant := "t-other"
		if i%13 == 0 {
			tenant = "t-mine"
		}
		evs := newEvents(1)
		if _, err := s.Append(ctx, eventstore.AppendRequest{Tenant: tenant, Stream: fmt.Sprintf("s-%d", i), Expected: eventstore.Any, Events: evs}); err != nil {
			t.Fatal(err)
		}
		if tenant == "t-mine" {
			mine = append(mine, evs[0].ID)
		}
	}
	// The server now scans slowly: the events between two of ours take
	// longer than the proof's wait.
	f.mu.Lock()
	f.noCaughtUp, f.noCheckpoints, f.scanDelay = true, true, 3*time.Millisecond
	f.mu.Unlock()
	var got []string
	var after event.Position
	for range 10 {
		recs, err := s.ReadTenant(ctx, "t-mine", after, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 {
			break
		}
		for _, r := range recs {
			if r.Tenant != "t-mine" {
				t.Fatalf("another tenant's event: %+v", r)
			}
			got = append(got, r.ID)
		}
		after = recs[len(recs)-1].Position
	}
	if !slices.Equal(got, mine) {
		t.Fatalf("read %v, want %v", got, mine)
	}
	if _, err := s.ReadTenant(ctx, "Not A Tenant", event.Position{}, 2); !errors.Is(err, ErrInvalidName) {
		t.Fatalf("an invalid tenant: %v", err)
	}
}
