// Package storetest is the conformance suite of the event store port. Every
// adapter runs it from its own tests:
//
//	storetest.Run(t, func(t *testing.T) storetest.Harness { ... })
//
// It checks optimistic concurrency, atomic batches, ordering, tenant
// isolation, the global log and idempotency records, with real concurrency.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
)

// Harness is what a store hands the suite. Each call of the factory must
// return a store over an empty log.
type Harness struct {
	Store eventstore.Store
	Log   eventstore.Log
	// Idempotency is optional; its tests are skipped (with a log line) when
	// the store keeps idempotency records elsewhere.
	Idempotency eventstore.IdempotencyStore
	// RaceIterations sizes the per-stream ordering race (default 1000).
	RaceIterations int
}

// Run runs the whole suite.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	tests := []struct {
		name string
		fn   func(*testing.T, Harness)
	}{
		{"AppendAndReadStream", testAppendAndReadStream},
		{"ExpectedVersions", testExpectedVersions},
		{"BatchIsAtomic", testBatchIsAtomic},
		{"ReadStreamAfter", testReadStreamAfter},
		{"TenantIsolation", testTenantIsolation},
		{"NoTenantFailsClosed", testNoTenant},
		{"DuplicateEventID", testDuplicateEventID},
		{"GlobalLogOrderAndPaging", testGlobalLog},
		{"ConcurrentExactExpected", testConcurrentExact},
		{"ConcurrentAny", testConcurrentAny},
		{"RacingAppendsKeepStreamOrder", testRacingStreamOrder},
		{"IdempotencyRecords", testIdempotency},
		{"LocateVersions", testLocateVersions},
		{"StreamPositionsMatchLog", testStreamPositionsMatchLog},
		{"TenantLog", testTenantLog},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			if h.RaceIterations == 0 {
				h.RaceIterations = 1000
			}
			tc.fn(t, h)
		})
	}
}

// NewID returns a random UUID (v4) in text form.
func NewID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func newEvents(n int, typ string) []eventstore.NewEvent {
	out := make([]eventstore.NewEvent, n)
	for i := range out {
		out[i] = eventstore.NewEvent{
			ID:            NewID(),
			Type:          typ,
			SchemaVersion: 1,
			Data:          []byte(fmt.Sprintf(`{"n":%d,"s":"caf\u00e9"}`, i)),
			Metadata: event.Metadata{
				CommandID:     "cmd-" + NewID(),
				CorrelationID: "corr-1",
				CausationID:   "cause-1",
				Actor:         "user-1",
				TraceParent:   "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			},
		}
	}
	return out
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

func mustAppend(t *testing.T, s eventstore.Store, req eventstore.AppendRequest) eventstore.AppendResult {
	t.Helper()
	res, err := s.Append(ctx(t), req)
	if err != nil {
		t.Fatalf("append %s/%s (%s): %v", req.Tenant, req.Stream, req.Expected, err)
	}
	return res
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

func testAppendAndReadStream(t *testing.T, h Harness) {
	evs := newEvents(3, "test.happened")
	before := time.Now().Add(-time.Minute)
	res := mustAppend(t, h.Store, eventstore.AppendRequest{Tenant: "t-a", Stream: "s-1", Expected: eventstore.NoStream, Events: evs})
	if res.FirstVersion != 1 || res.LastVersion != 3 {
		t.Fatalf("versions %d..%d, want 1..3", res.FirstVersion, res.LastVersion)
	}
	if res.Position.IsZero() {
		t.Fatal("append returned a zero position")
	}
	got, err := h.Store.ReadStream(ctx(t), "t-a", "s-1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("read %d events, want 3", len(got))
	}
	var prev event.Position
	for i, r := range got {
		want := evs[i]
		if r.ID != want.ID || r.Tenant != "t-a" || r.Stream != "s-1" || r.Version != int64(i+1) ||
			r.Type != want.Type || r.SchemaVersion != want.SchemaVersion {
			t.Fatalf("event %d = %+v, want id %s type %s version %d", i, r, want.ID, want.Type, i+1)
		}
		if !jsonEqual(r.Data, want.Data) {
			t.Fatalf("event %d data %s, want %s", i, r.Data, want.Data)
		}
		if !reflect.DeepEqual(r.Metadata, want.Metadata) {
			t.Fatalf("event %d metadata %+v, want %+v", i, r.Metadata, want.Metadata)
		}
		if r.RecordedAt.Before(before) || r.RecordedAt.After(time.Now().Add(time.Minute)) {
			t.Fatalf("event %d recorded at %v", i, r.RecordedAt)
		}
		if !prev.Less(r.Position) {
			t.Fatalf("event %d position %v not after %v", i, r.Position, prev)
		}
		prev = r.Position
	}
	if got[2].Position != res.Position {
		t.Fatalf("append result position %v, last event at %v", res.Position, got[2].Position)
	}
	missing, err := h.Store.ReadStream(ctx(t), "t-a", "no-such-stream", 0)
	if err != nil || len(missing) != 0 {
		t.Fatalf("missing stream: %d events, err %v; want none, nil", len(missing), err)
	}
}

func testExpectedVersions(t *testing.T, h Harness) {
	s := h.Store
	app := func(stream string, exp eventstore.ExpectedVersion) error {
		_, err := s.Append(ctx(t), eventstore.AppendRequest{Tenant: "t-a", Stream: stream, Expected: exp, Events: newEvents(1, "x.y")})
		return err
	}
	cases := []struct {
		name  string
		setup int // events already in the stream
		exp   eventstore.ExpectedVersion
		ok    bool
	}{
		{"no-stream on empty", 0, eventstore.NoStream, true},
		{"no-stream on existing", 2, eventstore.NoStream, false},
		{"stream-exists on empty", 0, eventstore.StreamExists, false},
		{"stream-exists on existing", 2, eventstore.StreamExists, true},
		{"any on empty", 0, eventstore.Any, true},
		{"any on existing", 2, eventstore.Any, true},
		{"exact 0 on empty", 0, eventstore.Exact(0), true},
		{"exact 0 on existing", 2, eventstore.Exact(0), false},
		{"exact right", 2, eventstore.Exact(2), true},
		{"exact behind", 2, eventstore.Exact(1), false},
		{"exact ahead", 2, eventstore.Exact(3), false},
	}
	for i, c := range cases {
		stream := fmt.Sprintf("exp-%d", i)
		for j := 0; j < c.setup; j++ {
			if err := app(stream, eventstore.Any); err != nil {
				t.Fatal(err)
			}
		}
		err := app(stream, c.exp)
		if c.ok && err != nil {
			t.Errorf("%s: %v, want success", c.name, err)
		}
		if !c.ok && !errors.Is(err, eventstore.ErrVersionConflict) {
			t.Errorf("%s: %v, want ErrVersionConflict", c.name, err)
		}
		got, _ := s.ReadStream(ctx(t), "t-a", stream, 0)
		want := c.setup
		if c.ok {
			want++
		}
		if len(got) != want {
			t.Errorf("%s: stream has %d events, want %d", c.name, len(got), want)
		}
	}
}

func testBatchIsAtomic(t *testing.T, h Harness) {
	mustAppend(t, h.Store, eventstore.AppendRequest{Tenant: "t-a", Stream: "s", Expected: eventstore.NoStream, Events: newEvents(2, "x.y")})
	_, err := h.Store.Append(ctx(t), eventstore.AppendRequest{Tenant: "t-a", Stream: "s", Expected: eventstore.Exact(1), Events: newEvents(5, "x.y")})
	if !errors.Is(err, eventstore.ErrVersionConflict) {
		t.Fatalf("got %v, want ErrVersionConflict", err)
	}
	got, _ := h.Store.ReadStream(ctx(t), "t-a", "s", 0)
	if len(got) != 2 {
		t.Fatalf("a rejected batch left %d events, want 2", len(got))
	}
	res := mustAppend(t, h.Store, eventstore.AppendRequest{Tenant: "t-a", Stream: "s", Expected: eventstore.Exact(2), Events: newEvents(5, "x.y")})
	if res.FirstVersion != 3 || res.LastVersion != 7 {
		t.Fatalf("versions %d..%d, want 3..7", res.FirstVersion, res.LastVersion)
	}
}

func testReadStreamAfter(t *testing.T, h Harness) {
	mustAppend(t, h.Store, eventstore.AppendRequest{Tenant: "t-a", Stream: "s", Expected: eventstore.Any, Events: newEvents(5, "x.y")})
	got, err := h.Store.ReadStream(ctx(t), "t-a", "s", 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Version != 4 || got[1].Version != 5 {
		t.Fatalf("after 3: %d events starting at %v", len(got), got)
	}
}

func testTenantIsolation(t *testing.T, h Harness) {
	a := mustAppend(t, h.Store, eventstore.AppendRequest{Tenant: "t-a", Stream: "shared", Expected: eventstore.NoStream, Events: newEvents(2, "x.y")})
	b := mustAppend(t, h.Store, eventstore.AppendRequest{Tenant: "t-b", Stream: "shared", Expected: eventstore.NoStream, Events: newEvents(1, "x.y")})
	if a.LastVersion != 2 || b.LastVersion != 1 {
		t.Fatalf("same stream name in two tenants is not independent: %d, %d", a.LastVersion, b.LastVersion)
	}
	ga, _ := h.Store.ReadStream(ctx(t), "t-a", "shared", 0)
	gb, _ := h.Store.ReadStream(ctx(t), "t-b", "shared", 0)
	if len(ga) != 2 || len(gb) != 1 {
		t.Fatalf("tenant a reads %d, tenant b reads %d; want 2 and 1", len(ga), len(gb))
	}
	for _, r := range gb {
		if r.Tenant != "t-b" {
			t.Fatalf("tenant b read an event of %s", r.Tenant)
		}
	}
	only := mustAppend(t, h.Store, eventstore.AppendRequest{Tenant: "t-a", Stream: "a-only", Expected: eventstore.NoStream, Events: newEvents(1, "x.y")})
	_ = only
	gc, err := h.Store.ReadStream(ctx(t), "t-c", "a-only", 0)
	if err != nil || len(gc) != 0 {
		t.Fatalf("another tenant reads %d events of a foreign stream (err %v)", len(gc), err)
	}
}

func testNoTenant(t *testing.T, h Harness) {
	_, err := h.Store.Append(ctx(t), eventstore.AppendRequest{Stream: "s", Expected: eventstore.Any, Events: newEvents(1, "x.y")})
	if !errors.Is(err, eventstore.ErrNoTenant) {
		t.Fatalf("append without tenant: %v, want ErrNoTenant", err)
	}
	if _, err := h.Store.ReadStream(ctx(t), "", "s", 0); !errors.Is(err, eventstore.ErrNoTenant) {
		t.Fatalf("read without tenant: %v, want ErrNoTenant", err)
	}
}

func testDuplicateEventID(t *testing.T, h Harness) {
	evs := newEvents(1, "x.y")
	mustAppend(t, h.Store, eventstore.AppendRequest{Tenant: "t-a", Stream: "s", Expected: eventstore.Any, Events: evs})
	// A store may reject the repeated id or treat the append as already
	// done (EventStoreDB's dedup); it must never store the event twice.
	_, _ = h.Store.Append(ctx(t), eventstore.AppendRequest{Tenant: "t-a", Stream: "s", Expected: eventstore.Exact(1), Events: evs})
	got, err := h.Store.ReadStream(ctx(t), "t-a", "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("the same event id was stored %d times", len(got))
	}
}

// readAll reads the log from the start until it holds want events. A
// reader may have to wait: a transaction still open anywhere in the store
// (another test's, on a shared server) holds the visible log back, by
// design. It fails after a minute, or if the log holds more than want.
func readAll(t *testing.T, l eventstore.Log, page, want int) []event.Record {
	t.Helper()
	var out []event.Record
	var pos event.Position
	deadline := time.Now().Add(time.Minute)
	for {
		recs, err := l.ReadAll(ctx(t), pos, page)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if !pos.Less(r.Position) {
				t.Fatalf("log went backwards: %v after %v", r.Position, pos)
			}
			pos = r.Position
		}
		out = append(out, recs...)
		if len(out) > want {
			t.Fatalf("log holds %d events, want %d", len(out), want)
		}
		if len(recs) == 0 {
			if len(out) == want {
				return out
			}
			if time.Now().After(deadline) {
				t.Fatalf("log shows %d events after a minute, want %d", len(out), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func testGlobalLog(t *testing.T, h Harness) {
	if head, err := h.Log.Head(ctx(t)); err != nil || !head.IsZero() {
		t.Fatalf("empty log head %v, err %v", head, err)
	}
	var appended []eventstore.NewEvent
	for i := 0; i < 30; i++ {
		evs := newEvents(1+i%3, "x.y")
		tenant := []string{"t-a", "t-b", "t-c"}[i%3]
		mustAppend(t, h.Store, eventstore.AppendRequest{Tenant: tenant, Stream: fmt.Sprintf("s-%d", i%7), Expected: eventstore.Any, Events: evs})
		appended = append(appended, evs...)
	}
	all := readAll(t, h.Log, 7, len(appended))
	if len(all) != len(appended) {
		t.Fatalf("log has %d events, appended %d", len(all), len(appended))
	}
	for i, r := range all {
		if r.ID != appended[i].ID {
			t.Fatalf("log position %d holds %s, want %s (append order)", i, r.ID, appended[i].ID)
		}
	}
	checkContiguous(t, all)
	head, err := h.Log.Head(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if head != all[len(all)-1].Position {
		t.Fatalf("head %v, last event %v", head, all[len(all)-1].Position)
	}
	rest, err := h.Log.ReadAll(ctx(t), head, 10)
	if err != nil || len(rest) != 0 {
		t.Fatalf("after head: %d events, err %v", len(rest), err)
	}
}

// checkContiguous fails unless every stream's versions appear in the log
// as 1, 2, 3, ... in order.
func checkContiguous(t *testing.T, recs []event.Record) {
	t.Helper()
	last := map[string]int64{}
	for _, r := range recs {
		k := r.Tenant + "/" + r.Stream
		if r.Version != last[k]+1 {
			t.Fatalf("stream %s: version %d follows %d in the global log", k, r.Version, last[k])
		}
		last[k] = r.Version
	}
}

func testConcurrentExact(t *testing.T, h Harness) {
	mustAppend(t, h.Store, eventstore.AppendRequest{Tenant: "t-a", Stream: "hot", Expected: eventstore.NoStream, Events: newEvents(1, "x.y")})
	const n = 50
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, conflicts := 0, 0
	var other []error
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := h.Store.Append(ctx(t), eventstore.AppendRequest{Tenant: "t-a", Stream: "hot", Expected: eventstore.Exact(1), Events: newEvents(1, "x.y")})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, eventstore.ErrVersionConflict):
				conflicts++
			default:
				other = append(other, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if ok != 1 || conflicts != n-1 || len(other) > 0 {
		t.Fatalf("%d succeeded, %d conflicts, other errors %v; want 1 and %d", ok, conflicts, other, n-1)
	}
	got, _ := h.Store.ReadStream(ctx(t), "t-a", "hot", 0)
	if len(got) != 2 {
		t.Fatalf("stream has %d events, want 2", len(got))
	}
}

func testConcurrentAny(t *testing.T, h Harness) {
	const n = 50
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := h.Store.Append(ctx(t), eventstore.AppendRequest{Tenant: "t-a", Stream: "any", Expected: eventstore.Any, Events: newEvents(1, "x.y")})
			errs <- err
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("append with any: %v", err)
		}
	}
	got, _ := h.Store.ReadStream(ctx(t), "t-a", "any", 0)
	if len(got) != n {
		t.Fatalf("stream has %d events, want %d", len(got), n)
	}
	for i, r := range got {
		if r.Version != int64(i+1) {
			t.Fatalf("version %d at index %d", r.Version, i)
		}
	}
	checkContiguous(t, readAll(t, h.Log, 1000, n))
}

// testRacingStreamOrder: two appends race on one stream, many times; the
// global log must deliver every stream's versions in order.
func testRacingStreamOrder(t *testing.T, h Harness) {
	for i := 0; i < h.RaceIterations; i++ {
		stream := fmt.Sprintf("race-%d", i)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for j := 0; j < 2; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if _, err := h.Store.Append(ctx(t), eventstore.AppendRequest{Tenant: "t-a", Stream: stream, Expected: eventstore.Any, Events: newEvents(1, "x.y")}); err != nil {
					t.Error(err)
				}
			}()
		}
		close(start)
		wg.Wait()
	}
	all := readAll(t, h.Log, 500, 2*h.RaceIterations)
	if len(all) != 2*h.RaceIterations {
		t.Fatalf("log has %d events, want %d", len(all), 2*h.RaceIterations)
	}
	checkContiguous(t, all)
}

func testIdempotency(t *testing.T, h Harness) {
	if h.Idempotency == nil {
		t.Log("store keeps no idempotency records itself; skipped by its harness")
		return
	}
	resp := func(r eventstore.AppendResult) ([]byte, error) {
		return []byte(fmt.Sprintf(`{"version":%d,"position":%q}`, r.LastVersion, r.Position.Token())), nil
	}
	idem := &eventstore.Idempotency{Key: "k-1", RequestHash: "h-1", Response: resp}
	res := mustAppend(t, h.Store, eventstore.AppendRequest{Tenant: "t-a", Stream: "s", Expected: eventstore.NoStream, Events: newEvents(2, "x.y"), Idempotency: idem})
	rec, ok, err := h.Idempotency.LookupIdempotency(ctx(t), "t-a", "k-1")
	if err != nil || !ok {
		t.Fatalf("lookup: ok=%v err=%v", ok, err)
	}
	want, _ := resp(res)
	if rec.RequestHash != "h-1" || string(rec.Response) != string(want) {
		t.Fatalf("stored %q/%q, want h-1/%s", rec.RequestHash, rec.Response, want)
	}
	// The same key again appends nothing.
	_, err = h.Store.Append(ctx(t), eventstore.AppendRequest{Tenant: "t-a", Stream: "s", Expected: eventstore.Any, Events: newEvents(1, "x.y"), Idempotency: idem})
	if !errors.Is(err, eventstore.ErrIdempotencyKeyExists) {
		t.Fatalf("second append with the key: %v, want ErrIdempotencyKeyExists", err)
	}
	if got, _ := h.Store.ReadStream(ctx(t), "t-a", "s", 0); len(got) != 2 {
		t.Fatalf("stream has %d events after a duplicate key, want 2", len(got))
	}
	// Keys are scoped per tenant.
	if _, ok, _ := h.Idempotency.LookupIdempotency(ctx(t), "t-b", "k-1"); ok {
		t.Fatal("tenant b sees tenant a's idempotency key")
	}
	mustAppend(t, h.Store, eventstore.AppendRequest{Tenant: "t-b", Stream: "s", Expected: eventstore.NoStream, Events: newEvents(1, "x.y"), Idempotency: idem})
	// A rejection is saved without events, once.
	if err := h.Idempotency.SaveIdempotency(ctx(t), "t-a", "k-2", "h-2", []byte("rejected")); err != nil {
		t.Fatal(err)
	}
	if err := h.Idempotency.SaveIdempotency(ctx(t), "t-a", "k-2", "h-3", []byte("other")); !errors.Is(err, eventstore.ErrIdempotencyKeyExists) {
		t.Fatalf("saving a key twice: %v, want ErrIdempotencyKeyExists", err)
	}
	rec, _, _ = h.Idempotency.LookupIdempotency(ctx(t), "t-a", "k-2")
	if string(rec.Response) != "rejected" {
		t.Fatalf("stored response %q, want the first", rec.Response)
	}
	// Concurrent duplicates: exactly one append.
	var wg sync.WaitGroup
	var mu sync.Mutex
	okCount := 0
	start := make(chan struct{})
	dup := &eventstore.Idempotency{Key: "k-conc", RequestHash: "h", Response: resp}
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := h.Store.Append(ctx(t), eventstore.AppendRequest{Tenant: "t-a", Stream: "conc", Expected: eventstore.Any, Events: newEvents(1, "x.y"), Idempotency: dup})
			if err == nil {
				mu.Lock()
				okCount++
				mu.Unlock()
			} else if !errors.Is(err, eventstore.ErrIdempotencyKeyExists) {
				t.Error(err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if got, _ := h.Store.ReadStream(ctx(t), "t-a", "conc", 0); okCount != 1 || len(got) != 1 {
		t.Fatalf("20 concurrent appends with one key: %d succeeded, %d events; want 1 and 1", okCount, len(got))
	}
}

func testLocateVersions(t *testing.T, h Harness) {
	loc, ok := h.Log.(eventstore.VersionLocator)
	if !ok {
		t.Log("log does not implement eventstore.VersionLocator")
		return
	}
	mustAppend(t, h.Store, eventstore.AppendRequest{Tenant: "t-a", Stream: "s", Expected: eventstore.NoStream, Events: newEvents(3, "x.y")})
	all := readAll(t, h.Log, 10, 3)
	refs := []eventstore.StreamVersion{
		{Tenant: "t-a", Stream: "s", Version: 2},
		{Tenant: "t-a", Stream: "s", Version: 4},
		{Tenant: "t-b", Stream: "s", Version: 1},
		{Tenant: "t-a", Stream: "s", Version: 1},
	}
	pos, found, err := loc.LocateVersions(ctx(t), refs)
	if err != nil {
		t.Fatal(err)
	}
	want := []bool{true, false, false, true}
	for i := range refs {
		if found[i] != want[i] {
			t.Fatalf("ref %d found=%v, want %v", i, found[i], want[i])
		}
	}
	if pos[0] != all[1].Position || pos[3] != all[0].Position {
		t.Fatalf("positions %v, want %v and %v", pos, all[1].Position, all[0].Position)
	}
}

// testStreamPositionsMatchLog: an event read from its stream carries the
// position the global log gives it. `strata replay rebuild --from` relies
// on it (it finds the streams touched since a position in the log, reads
// them whole through ReadStream and orders and bounds their events by
// position), on every store.
func testStreamPositionsMatchLog(t *testing.T, h Harness) {
	streams := []string{"pos-a", "pos-b", "pos-c"}
	n := 0
	for round := range 3 {
		for i, stream := range streams {
			k := 1 + (round+i)%2
			mustAppend(t, h.Store, eventstore.AppendRequest{Tenant: "t-pos", Stream: stream, Expected: eventstore.Any, Events: newEvents(k, "test.positioned")})
			n += k
		}
	}
	inLog := map[string]event.Position{}
	for _, r := range readAll(t, h.Log, 4, n) {
		inLog[r.ID] = r.Position
	}
	seen := 0
	for _, stream := range streams {
		recs, err := h.Store.ReadStream(ctx(t), "t-pos", stream, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range recs {
			pos, ok := inLog[r.ID]
			switch {
			case !ok:
				t.Fatalf("%s v%d (%s) is in its stream but not in the log", stream, r.Version, r.ID)
			case pos != r.Position:
				t.Fatalf("%s v%d: position %v in the stream, %v in the log", stream, r.Version, r.Position, pos)
			case i > 0 && !recs[i-1].Position.Less(r.Position):
				t.Fatalf("%s: v%d at %v is not after v%d at %v", stream, r.Version, r.Position, recs[i-1].Version, recs[i-1].Position)
			}
			seen++
		}
	}
	if seen != n {
		t.Fatalf("the streams hold %d events, the log %d", seen, n)
	}
}

// testTenantLog: a log that reads one tenant's events (eventstore.TenantLog)
// returns exactly the tenant's events of the global log, in its order and
// at its positions, in pages after any position; and an empty page once
// there are none up to the head, also for a tenant with no events at all.
func testTenantLog(t *testing.T, h Harness) {
	tl, ok := h.Log.(eventstore.TenantLog)
	if !ok {
		t.Log("the log reads no tenant on its own (eventstore.TenantLog): tenant tools read the global log with a filter")
		return
	}
	tenants := []string{"t-a", "t-b", "t-c"}
	n := 0
	for i := 0; i < 24; i++ {
		evs := newEvents(1+i%2, "x.y")
		// t-c gets every sixth batch only: its events lie far apart.
		tenant := tenants[i%2]
		if i%6 == 5 {
			tenant = "t-c"
		}
		mustAppend(t, h.Store, eventstore.AppendRequest{Tenant: tenant, Stream: fmt.Sprintf("s-%d", i%5), Expected: eventstore.Any, Events: evs})
		n += len(evs)
	}
	all := readAll(t, h.Log, 10, n)
	for _, tenant := range append(tenants, "t-none") {
		var want []event.Record
		for _, r := range all {
			if r.Tenant == tenant {
				want = append(want, r)
			}
		}
		var got []event.Record
		var after event.Position
		for {
			recs, err := tl.ReadTenant(ctx(t), tenant, after, 3)
			if err != nil {
				t.Fatalf("ReadTenant(%s, %v): %v", tenant, after, err)
			}
			if len(recs) > 3 {
				t.Fatalf("ReadTenant(%s) gave %d events, limit 3", tenant, len(recs))
			}
			if len(recs) == 0 {
				break
			}
			got = append(got, recs...)
			after = recs[len(recs)-1].Position
			if len(got) > len(want) {
				break
			}
		}
		if len(got) != len(want) {
			t.Fatalf("tenant %s: %d events read, the log holds %d", tenant, len(got), len(want))
		}
		for i := range want {
			if got[i].ID != want[i].ID || got[i].Position != want[i].Position || got[i].Tenant != tenant {
				t.Fatalf("tenant %s, event %d: %s at %v, want %s at %v", tenant, i, got[i].ID, got[i].Position, want[i].ID, want[i].Position)
			}
		}
		// After an event of the middle of the tenant's history: the rest,
		// in as many reads as the log gives it ("up to limit": a
		// subscription-backed log returns what has arrived so far).
		if len(want) > 2 {
			var rest []event.Record
			for from := want[1].Position; len(rest) <= len(want); {
				recs, err := tl.ReadTenant(ctx(t), tenant, from, 100)
				if err != nil {
					t.Fatalf("tenant %s after %v: %v", tenant, from, err)
				}
				if len(recs) == 0 {
					break
				}
				rest, from = append(rest, recs...), recs[len(recs)-1].Position
			}
			if len(rest) != len(want)-2 || rest[0].ID != want[2].ID || rest[len(rest)-1].ID != want[len(want)-1].ID {
				t.Fatalf("tenant %s after its second event: %d events; want %d from %s to %s", tenant, len(rest), len(want)-2, want[2].ID, want[len(want)-1].ID)
			}
		}
	}
}
