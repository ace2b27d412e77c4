package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/strata-es/strata/eventstore"
)

// RunMulti runs the suite of multi-stream appends (eventstore.MultiAppender)
// on a store that implements it; its harness's Store must.
func RunMulti(t *testing.T, newHarness func(t *testing.T) Harness) {
	runCapable(t, newHarness, "eventstore.MultiAppender", []capableTest[eventstore.MultiAppender]{
		{"AllStreamsOrNone", testMultiAllOrNone},
		{"Invalid", testMultiInvalid},
		{"ConflictingAppendsOneWins", testMultiOneWins},
		{"OverlappingAppendsNoDeadlock", testMultiNoDeadlock},
		{"Idempotency", testMultiIdempotency},
	})
}

// capableTest is a test of a capability C a store may have beside
// eventstore.Store (multi-stream appends, tags).
type capableTest[C any] struct {
	name string
	fn   func(*testing.T, Harness, C)
}

// runCapable runs tests, each in parallel on a harness of its own, with
// its store as C; a store without the capability fails each (named by
// what).
func runCapable[C any](t *testing.T, newHarness func(t *testing.T) Harness, what string, tests []capableTest[C]) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			c, ok := h.Store.(C)
			if !ok {
				t.Fatalf("%T does not implement %s", h.Store, what)
			}
			if h.RaceIterations == 0 {
				h.RaceIterations = 1000
			}
			tc.fn(t, h, c)
		})
	}
}

func part(stream string, expected eventstore.ExpectedVersion, n int) eventstore.StreamAppend {
	return eventstore.StreamAppend{Stream: stream, Expected: expected, Events: newEvents(n, "x.multi")}
}

func streamLen(t *testing.T, s eventstore.Store, tenant, stream string) int {
	t.Helper()
	recs, err := s.ReadStream(ctx(t), tenant, stream, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range recs {
		if r.Version != int64(i+1) {
			t.Fatalf("%s: version %d at index %d", stream, r.Version, i)
		}
	}
	return len(recs)
}

// testMultiAllOrNone: a multi-stream append writes every stream's events,
// each at its own versions, visible in the log together; one stream whose
// expectation fails writes nothing anywhere.
func testMultiAllOrNone(t *testing.T, h Harness, m eventstore.MultiAppender) {
	mustAppend(t, h.Store, eventstore.AppendRequest{Tenant: "t-a", Stream: "a", Expected: eventstore.NoStream, Events: newEvents(1, "x.y")})
	res, err := m.AppendMulti(ctx(t), eventstore.MultiAppendRequest{Tenant: "t-a", Streams: []eventstore.StreamAppend{
		part("a", eventstore.Exact(1), 2), part("b", eventstore.NoStream, 3), part("c", eventstore.Any, 1)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Streams) != 3 || res.Streams[0].FirstVersion != 2 || res.Streams[0].LastVersion != 3 ||
		res.Streams[1].FirstVersion != 1 || res.Streams[1].LastVersion != 3 || res.Streams[2].LastVersion != 1 {
		t.Fatalf("results %+v", res.Streams)
	}
	for _, r := range res.Streams {
		if res.Position.Less(r.Position) {
			t.Fatalf("the append's position %s is before a stream's %s", res.Position, r.Position)
		}
	}
	all := readAll(t, h.Log, 100, 7)
	if all[len(all)-1].Position != res.Position {
		t.Fatalf("the log ends at %s, the append reported %s", all[len(all)-1].Position, res.Position)
	}
	// One failing expectation (b is at 3, not 2): nothing of the three.
	_, err = m.AppendMulti(ctx(t), eventstore.MultiAppendRequest{Tenant: "t-a", Streams: []eventstore.StreamAppend{
		part("c", eventstore.Exact(1), 1), part("d", eventstore.NoStream, 1), part("b", eventstore.Exact(2), 1)}})
	if !errors.Is(err, eventstore.ErrVersionConflict) || !strings.Contains(err.Error(), "b") {
		t.Fatalf("stale expectation on b: %v, want a version conflict naming b", err)
	}
	for stream, want := range map[string]int{"a": 3, "b": 3, "c": 1, "d": 0} {
		if got := streamLen(t, h.Store, "t-a", stream); got != want {
			t.Fatalf("after the failed append %s has %d events, want %d", stream, got, want)
		}
	}
	// Another tenant's streams of the same names are its own.
	if _, err := m.AppendMulti(ctx(t), eventstore.MultiAppendRequest{Tenant: "t-b", Streams: []eventstore.StreamAppend{
		part("a", eventstore.NoStream, 1), part("b", eventstore.NoStream, 1)}}); err != nil {
		t.Fatal(err)
	}
	if got := streamLen(t, h.Store, "t-a", "a"); got != 3 {
		t.Fatalf("t-b's append changed t-a's stream: %d events", got)
	}
}

func testMultiInvalid(t *testing.T, h Harness, m eventstore.MultiAppender) {
	for name, req := range map[string]eventstore.MultiAppendRequest{
		"no streams":       {Tenant: "t-a"},
		"a stream twice":   {Tenant: "t-a", Streams: []eventstore.StreamAppend{part("a", eventstore.Any, 1), part("a", eventstore.Any, 1)}},
		"a part no events": {Tenant: "t-a", Streams: []eventstore.StreamAppend{part("a", eventstore.Any, 1), part("b", eventstore.Any, 0)}},
	} {
		if _, err := m.AppendMulti(ctx(t), req); err == nil || errors.Is(err, eventstore.ErrVersionConflict) {
			t.Errorf("%s: %v, want an invalid request", name, err)
		}
	}
	if _, err := m.AppendMulti(ctx(t), eventstore.MultiAppendRequest{Streams: []eventstore.StreamAppend{part("a", eventstore.Any, 1)}}); !errors.Is(err, eventstore.ErrNoTenant) {
		t.Fatalf("no tenant: %v", err)
	}
	if got := streamLen(t, h.Store, "t-a", "a"); got != 0 {
		t.Fatalf("an invalid request wrote %d events", got)
	}
}

// testMultiOneWins: in each round, appends that all expect the streams
// they share at the versions read before the round race (multi-stream
// ones on {x, y} and {y, z}, single ones on y): exactly one of those on y
// wins, and every winner's events, and only theirs, are stored.
func testMultiOneWins(t *testing.T, h Harness, m eventstore.MultiAppender) {
	rounds := max(h.RaceIterations/20, 10)
	var vx, vy, vz int64
	for r := 0; r < rounds; r++ {
		type outcome struct {
			name string
			err  error
		}
		out := make(chan outcome, 3)
		start := make(chan struct{})
		var wg sync.WaitGroup
		run := func(name string, f func() error) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				out <- outcome{name, f()}
			}()
		}
		run("xy", func() error {
			_, err := m.AppendMulti(ctx(t), eventstore.MultiAppendRequest{Tenant: "t-a", Streams: []eventstore.StreamAppend{
				part("x", eventstore.Exact(vx), 1), part("y", eventstore.Exact(vy), 1)}})
			return err
		})
		run("yz", func() error {
			_, err := m.AppendMulti(ctx(t), eventstore.MultiAppendRequest{Tenant: "t-a", Streams: []eventstore.StreamAppend{
				part("z", eventstore.Exact(vz), 1), part("y", eventstore.Exact(vy), 1)}})
			return err
		})
		run("y", func() error {
			_, err := h.Store.Append(ctx(t), eventstore.AppendRequest{Tenant: "t-a", Stream: "y", Expected: eventstore.Exact(vy), Events: newEvents(1, "x.single")})
			return err
		})
		close(start)
		wg.Wait()
		close(out)
		var won []string
		for o := range out {
			switch {
			case o.err == nil:
				won = append(won, o.name)
			case !errors.Is(o.err, eventstore.ErrVersionConflict):
				t.Fatalf("round %d: %s: %v", r, o.name, o.err)
			}
		}
		if len(won) != 1 {
			t.Fatalf("round %d: %d appends on y at version %d won (%v), want exactly one", r, len(won), vy, won)
		}
		vy++
		switch won[0] {
		case "xy":
			vx++
		case "yz":
			vz++
		}
		for stream, want := range map[string]int64{"x": vx, "y": vy, "z": vz} {
			if got := int64(streamLen(t, h.Store, "t-a", stream)); got != want {
				t.Fatalf("round %d (%s won): %s has %d events, want %d", r, won[0], stream, got, want)
			}
		}
	}
}

// testMultiNoDeadlock: many multi-stream appends over random, overlapping
// sets of streams, each naming its streams in a random order, with single
// appends among them, all expecting Any: every one commits (none is a
// deadlock's victim) and every stream's versions run 1..n.
func testMultiNoDeadlock(t *testing.T, h Harness, m eventstore.MultiAppender) {
	const workers, streams = 8, 6
	per := max(h.RaceIterations/40, 10)
	var wg sync.WaitGroup
	counts := make([][streams]int, workers)
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 31))
			for i := 0; i < per; i++ {
				pick := rng.Perm(streams)[:1+rng.IntN(streams)]
				if len(pick) == 1 {
					if _, err := h.Store.Append(ctx(t), eventstore.AppendRequest{Tenant: "t-a", Stream: fmt.Sprintf("s%d", pick[0]), Expected: eventstore.Any, Events: newEvents(1, "x.single")}); err != nil {
						errs <- err
						return
					}
					counts[w][pick[0]]++
					continue
				}
				req := eventstore.MultiAppendRequest{Tenant: "t-a"}
				for _, s := range pick {
					req.Streams = append(req.Streams, part(fmt.Sprintf("s%d", s), eventstore.Any, 1))
				}
				if _, err := m.AppendMulti(ctx(t), req); err != nil {
					errs <- fmt.Errorf("streams %v: %w", pick, err)
					return
				}
				for _, s := range pick {
					counts[w][s]++
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for s := 0; s < streams; s++ {
		want := 0
		for w := range counts {
			want += counts[w][s]
		}
		if got := streamLen(t, h.Store, "t-a", fmt.Sprintf("s%d", s)); got != want {
			t.Fatalf("s%d: %d events, want %d", s, got, want)
		}
	}
}

func testMultiIdempotency(t *testing.T, h Harness, m eventstore.MultiAppender) {
	if h.Idempotency == nil {
		t.Fatal("a multi-stream append's idempotency records need the harness's IdempotencyStore")
	}
	resp := func(r eventstore.MultiAppendResult) ([]byte, error) {
		return []byte(fmt.Sprintf(`{"streams":%d,"position":%q}`, len(r.Streams), r.Position.Token())), nil
	}
	idem := &eventstore.MultiIdempotency{Key: "k-m", RequestHash: "h-m", Response: resp}
	res, err := m.AppendMulti(ctx(t), eventstore.MultiAppendRequest{Tenant: "t-a", Idempotency: idem, Streams: []eventstore.StreamAppend{
		part("a", eventstore.NoStream, 1), part("b", eventstore.NoStream, 1)}})
	if err != nil {
		t.Fatal(err)
	}
	rec, ok, err := h.Idempotency.LookupIdempotency(ctx(t), "t-a", "k-m")
	want, _ := resp(res)
	if err != nil || !ok || rec.RequestHash != "h-m" || string(rec.Response) != string(want) {
		t.Fatalf("lookup: %+v %v %v, want %s", rec, ok, err, want)
	}
	_, err = m.AppendMulti(ctx(t), eventstore.MultiAppendRequest{Tenant: "t-a", Idempotency: idem, Streams: []eventstore.StreamAppend{
		part("a", eventstore.Any, 1), part("c", eventstore.Any, 1)}})
	if !errors.Is(err, eventstore.ErrIdempotencyKeyExists) {
		t.Fatalf("the key again: %v, want ErrIdempotencyKeyExists", err)
	}
	if streamLen(t, h.Store, "t-a", "a") != 1 || streamLen(t, h.Store, "t-a", "c") != 0 {
		t.Fatal("an append refused for its key wrote events")
	}
}
