package esdb

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
)

// TestTagStreamNames: a tag stream's name (and a tag log's) is one the v2
// API accepts whatever the tag, differs per tenant and tag, and is never
// decoded as a strata stream, in its namespace or any other (so the global
// log, projections and exports never see the markers).
func TestTagStreamNames(t *testing.T) {
	t.Parallel()
	n, _ := newNaming("strata")
	seen := map[string]bool{}
	for _, tenant := range []string{"acme", "t-a", strings.Repeat("t", 63)} {
		log := n.tagLog(tenant)
		if !v2StreamName.MatchString(log) || seen[log] {
			t.Errorf("tag log %q", log)
		}
		seen[log] = true
		for _, ns := range []string{"strata", "s", "strata_tags", "st"} {
			other, _ := newNaming(ns)
			if _, _, ok := other.decode(log); ok || strings.HasPrefix(log, other.prefix) {
				t.Errorf("namespace %s sees tag log %q", ns, log)
			}
		}
		for _, tag := range []string{"email:a", "seat:12A", "x", "é ü/\\ \"tag\" -. $all", strings.Repeat("z", event.MaxTagLength)} {
			name := n.tagStream(tenant, tag)
			if !v2StreamName.MatchString(name) {
				t.Errorf("tag stream %q of %q is not a valid v2 stream name", name, tag)
			}
			if seen[name] {
				t.Errorf("tag stream %q twice", name)
			}
			seen[name] = true
			if !strings.HasPrefix(name, "strata.tag."+tenant+".") {
				t.Errorf("tag stream %q does not say its namespace and tenant", name)
			}
			for _, ns := range []string{"strata", "s", "strata_tag", "strata_", "st"} {
				other, _ := newNaming(ns)
				if _, _, ok := other.decode(name); ok {
					t.Errorf("namespace %s decodes tag stream %q", ns, name)
				}
				if strings.HasPrefix(name, other.prefix) {
					t.Errorf("namespace %s's log filter %q matches tag stream %q", ns, other.prefix, name)
				}
			}
		}
	}
}

// TestFakeServerTaggedAppendsStayOutOfTheLog: the markers a tagged append
// writes are not events of the global log (nor of a tenant's), and the
// metadata the server synthesizes for a record appended through
// AppendRecords decodes to the event's own.
func TestFakeServerTaggedAppendsStayOutOfTheLog(t *testing.T) {
	t.Parallel()
	f := newFakeServer()
	s := openFake(t, f.serve(t, "127.0.0.1:0"))
	e := newEvents(1)[0]
	e.Metadata = event.Metadata{CommandID: "cmd-1", CorrelationID: "corr", Actor: "u-1", Tags: []string{"b", "a", "b"}}
	res, err := s.Append(ctxT(t), eventstore.AppendRequest{Tenant: "t-a", Stream: "s", Expected: eventstore.NoStream, Events: []eventstore.NewEvent{e, newEvents(1)[0]}})
	if err != nil {
		t.Fatal(err)
	}
	if res.FirstVersion != 1 || res.LastVersion != 2 {
		t.Fatalf("result %+v", res)
	}
	recs, err := s.ReadAll(ctxT(t), event.Position{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[1].Position != res.Position {
		t.Fatalf("the log holds %d events (want the 2 appended, not the markers), the last at %v (append: %s)", len(recs), recs, res.Position)
	}
	got := recs[0].Metadata
	if got.CommandID != "cmd-1" || got.CorrelationID != "corr" || got.Actor != "u-1" || !slices.Equal(got.Tags, []string{"a", "b"}) || recs[0].SchemaVersion != 1 {
		t.Fatalf("metadata read back %+v (schema version %d)", got, recs[0].SchemaVersion)
	}
	f.mu.Lock()
	markers := len(f.streams[s.names.tagStream("t-a", "a")]) + len(f.streams[s.names.tagStream("t-a", "b")])
	f.mu.Unlock()
	if markers != 2 {
		t.Fatalf("%d markers, want one per tag of the tagged event", markers)
	}
}

// TestSynthesizedMetadata: the shapes a property may take in the metadata
// the server synthesizes decode as the v1 metadata does.
func TestSynthesizedMetadata(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		`{"tenant":"t-a","schema_version":2,"tags":["a","b"],"$schema.name":"x.y"}`,
		`{"tenant":"t-a","schema_version":2.0,"tags":["a","b"]}`,
		`{"tenant":"t-a","schema_version":"2","tags":"[\"a\",\"b\"]"}`,
	} {
		tenant, sv, m, err := decodeMetadata([]byte(in))
		if err != nil || tenant != "t-a" || sv != 2 || !slices.Equal(m.Tags, []string{"a", "b"}) {
			t.Errorf("%s: %q %d %+v %v", in, tenant, sv, m, err)
		}
	}
	for _, in := range []string{`{"tenant":"t-a","schema_version":2.5}`, `{"tenant":"t-a","schema_version":"x"}`, `[]`} {
		if _, _, _, err := decodeMetadata([]byte(in)); !errors.Is(err, errBadMetadata) {
			t.Errorf("%s: %v, want errBadMetadata", in, err)
		}
	}
}

// TestFakeServerReadTaggedPositionIsExact races tagged appends on two tags
// with reads of a query naming both: every read must return exactly the
// matching events at or before the position it returns (checked against
// the log once the appends are done). A read whose position is the largest
// marker it saw, without reading the first tags' tails again, fails this:
// an event committed on the first tag after its read sits before a marker
// of the second tag read later.
func TestFakeServerReadTaggedPositionIsExact(t *testing.T) {
	t.Parallel()
	f := newFakeServer()
	s := openFake(t, f.serve(t, "127.0.0.1:0"))
	q := event.Query{{Tags: []string{"a"}}, {Tags: []string{"b"}}}
	const perWriter = 150
	type read struct {
		ids map[string]bool
		at  event.Position
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		reads []read
		done  = make(chan struct{})
		errs  = make(chan error, 3)
	)
	for _, tag := range []string{"a", "b"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWriter {
				e := newEvents(1)[0]
				e.Metadata.Tags = []string{tag}
				if _, err := s.Append(ctxT(t), eventstore.AppendRequest{Tenant: "t-a", Stream: fmt.Sprintf("%s-%d", tag, i%7), Expected: eventstore.Any, Events: []eventstore.NewEvent{e}}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var rg sync.WaitGroup
	rg.Add(1)
	go func() {
		defer rg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			recs, at, err := s.ReadTagged(ctxT(t), "t-a", q)
			if err != nil {
				errs <- err
				return
			}
			r := read{ids: map[string]bool{}, at: at}
			for _, rec := range recs {
				r.ids[rec.ID] = true
			}
			mu.Lock()
			reads = append(reads, r)
			mu.Unlock()
		}
	}()
	wg.Wait()
	close(done)
	rg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var all []event.Record
	for deadline := time.Now().Add(30 * time.Second); len(all) < 2*perWriter && time.Now().Before(deadline); {
		var after event.Position
		if len(all) > 0 {
			after = all[len(all)-1].Position
		}
		page, err := s.ReadAll(ctxT(t), after, 10*perWriter)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page...)
	}
	if len(all) != 2*perWriter {
		t.Fatalf("the log holds %d events, want %d", len(all), 2*perWriter)
	}
	for i, r := range reads {
		for _, rec := range all {
			if before := !r.at.Less(rec.Position); before != r.ids[rec.ID] {
				t.Fatalf("read %d of %d (at %s): event %s at %s: returned %v, at or before the read's position %v",
					i, len(reads), r.at, rec.ID, rec.Position, r.ids[rec.ID], before)
			}
		}
	}
	t.Logf("%d reads checked against %d events", len(reads), len(all))
}

// TestFakeServerOldServer: a server without AppendRecords refuses
// multi-stream appends, tagged appends and conditions clearly, and untagged
// appends keep working.
func TestFakeServerOldServer(t *testing.T) {
	t.Parallel()
	f := newFakeServer()
	f.v1Only = true
	s := openFake(t, f.serve(t, "127.0.0.1:0"))
	_, err := s.AppendMulti(ctxT(t), eventstore.MultiAppendRequest{Tenant: "t-a", Streams: []eventstore.StreamAppend{
		{Stream: "a", Expected: eventstore.Any, Events: newEvents(1)}, {Stream: "b", Expected: eventstore.Any, Events: newEvents(1)}}})
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "KurrentDB 25.1") {
		t.Fatalf("multi-stream append on an old server: %v", err)
	}
	e := newEvents(1)[0]
	e.Metadata.Tags = []string{"a"}
	if _, err := s.Append(ctxT(t), eventstore.AppendRequest{Tenant: "t-a", Stream: "a", Expected: eventstore.Any, Events: []eventstore.NewEvent{e}}); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("tagged append on an old server: %v", err)
	}
	if _, err := s.Append(ctxT(t), eventstore.AppendRequest{Tenant: "t-a", Stream: "a", Expected: eventstore.NoStream, Events: newEvents(1)}); err != nil {
		t.Fatalf("untagged append on an old server: %v", err)
	}
}

// TestFakeServerFollowerRedirects: a follower's NOT_LEADER_NODE sends the
// append to the leader it names.
func TestFakeServerFollowerRedirects(t *testing.T) {
	t.Parallel()
	leader := newFakeServer()
	leaderAddr := leader.serve(t, "127.0.0.1:0")
	follower := newFakeServer()
	follower.follower = leaderAddr
	s := openFake(t, follower.serve(t, "127.0.0.1:0"))
	res, err := s.AppendMulti(ctxT(t), eventstore.MultiAppendRequest{Tenant: "t-a", Streams: []eventstore.StreamAppend{
		{Stream: "a", Expected: eventstore.NoStream, Events: newEvents(1)}, {Stream: "b", Expected: eventstore.NoStream, Events: newEvents(2)}}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Streams[1].LastVersion != 2 || s.records.leaders != 1 {
		t.Fatalf("result %+v after %d redirects", res, s.records.leaders)
	}
	leader.mu.Lock()
	n := len(leader.log)
	leader.mu.Unlock()
	if n < 3 {
		t.Fatalf("the leader holds %d events", n)
	}
}
