package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
)

// RunConditions runs the suite of tags and append conditions
// (eventstore.TagReader) on a store that implements them; its harness's
// Store must.
func RunConditions(t *testing.T, newHarness func(t *testing.T) Harness) {
	runCapable(t, newHarness, "eventstore.TagReader", []capableTest[eventstore.TagReader]{
		{"TagsStoredAndQueried", testTagsQueried},
		{"ConditionHoldsOrFails", testConditionHoldsOrFails},
		{"ConditionOnMultiStreamAppend", testConditionMulti},
		{"InvalidTagsAndQueries", testConditionInvalid},
		{"ConflictingConditionalAppendsOneWins", testConditionOneWins},
	})
}

// tagged returns one event of type typ carrying tags.
func tagged(typ string, tags ...string) eventstore.NewEvent {
	e := newEvents(1, typ)[0]
	e.Metadata.Tags = tags
	return e
}

func readTagged(t *testing.T, r eventstore.TagReader, tenant string, q event.Query) ([]event.Record, event.Position) {
	t.Helper()
	recs, at, err := r.ReadTagged(ctx(t), tenant, q)
	if err != nil {
		t.Fatalf("read %v: %v", q, err)
	}
	for _, rec := range recs {
		if at.Less(rec.Position) {
			t.Fatalf("read %v returned %s at %s, after the position it returned (%s)", q, rec.Stream, rec.Position, at)
		}
	}
	return recs, at
}

func streamsOf(recs []event.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = fmt.Sprintf("%s/%d", r.Stream, r.Version)
	}
	return out
}

// testTagsQueried: tags are stored sorted and once each; a query matches an
// event carrying all of one item's tags (of one of its types, when it names
// types), in log order, of its own tenant only.
func testTagsQueried(t *testing.T, h Harness, r eventstore.TagReader) {
	mustAppend(t, h.Store, eventstore.AppendRequest{Tenant: "t-a", Stream: "c-1", Expected: eventstore.NoStream, Events: []eventstore.NewEvent{
		tagged("customer.registered", "region:eu", "email:a", "email:a"),
		tagged("customer.renamed"),
	}})
	mustAppend(t, h.Store, eventstore.AppendRequest{Tenant: "t-a", Stream: "c-2", Expected: eventstore.NoStream, Events: []eventstore.NewEvent{
		tagged("customer.registered", "email:b", "region:eu"),
	}})
	mustAppend(t, h.Store, eventstore.AppendRequest{Tenant: "t-a", Stream: "c-1", Expected: eventstore.Exact(2), Events: []eventstore.NewEvent{
		tagged("customer.email_changed", "email:a", "email:b"),
	}})
	mustAppend(t, h.Store, eventstore.AppendRequest{Tenant: "t-b", Stream: "c-1", Expected: eventstore.NoStream, Events: []eventstore.NewEvent{
		tagged("customer.registered", "email:a"),
	}})

	recs, _ := readTagged(t, r, "t-a", event.Query{{Tags: []string{"email:a"}}})
	if got := streamsOf(recs); !slices.Equal(got, []string{"c-1/1", "c-1/3"}) {
		t.Fatalf("email:a in t-a: %v, want c-1/1 c-1/3", got)
	}
	if tags := recs[0].Metadata.Tags; !slices.Equal(tags, []string{"email:a", "region:eu"}) {
		t.Fatalf("stored tags %v, want them sorted and once each", tags)
	}
	for q, want := range map[string]struct {
		q    event.Query
		recs []string
	}{
		"both tags":           {event.Query{{Tags: []string{"email:b", "region:eu"}}}, []string{"c-2/1"}},
		"a type":              {event.Query{{Types: []string{"customer.registered"}, Tags: []string{"email:b"}}}, []string{"c-2/1"}},
		"either item":         {event.Query{{Tags: []string{"email:a"}, Types: []string{"customer.registered"}}, {Tags: []string{"email:b"}}}, []string{"c-1/1", "c-2/1", "c-1/3"}},
		"an unknown tag":      {event.Query{{Tags: []string{"email:z"}}}, nil},
		"a type without tags": {event.Query{{Types: []string{"customer.renamed"}, Tags: []string{"email:a"}}}, nil},
	} {
		recs, _ := readTagged(t, r, "t-a", want.q)
		if got := streamsOf(recs); !slices.Equal(got, want.recs) && len(got)+len(want.recs) > 0 {
			t.Errorf("%s: %v, want %v", q, got, want.recs)
		}
	}
	if recs, _ := readTagged(t, r, "t-b", event.Query{{Tags: []string{"email:a"}}}); len(recs) != 1 || recs[0].Tenant != "t-b" {
		t.Fatalf("email:a in t-b: %v", streamsOf(recs))
	}
	if _, _, err := r.ReadTagged(ctx(t), "", event.Query{{Tags: []string{"email:a"}}}); !errors.Is(err, eventstore.ErrNoTenant) {
		t.Fatalf("no tenant: %v", err)
	}
}

// testConditionHoldsOrFails: an append conditioned on a read holds until a
// matching event of the tenant is appended after it, on any stream; events
// that do not match, and other tenants' events, leave it holding.
func testConditionHoldsOrFails(t *testing.T, h Harness, r eventstore.TagReader) {
	q := event.Query{{Types: []string{"customer.registered"}, Tags: []string{"email:a"}}}
	recs, at := readTagged(t, r, "t-a", q)
	if len(recs) != 0 {
		t.Fatalf("an empty log holds %d events tagged email:a", len(recs))
	}
	// Not matching: another tag, another type, another tenant.
	mustAppend(t, h.Store, eventstore.AppendRequest{Tenant: "t-a", Stream: "x", Expected: eventstore.Any, Events: []eventstore.NewEvent{tagged("customer.registered", "email:b")}})
	mustAppend(t, h.Store, eventstore.AppendRequest{Tenant: "t-a", Stream: "x", Expected: eventstore.Any, Events: []eventstore.NewEvent{tagged("customer.email_changed", "email:a")}})
	mustAppend(t, h.Store, eventstore.AppendRequest{Tenant: "t-b", Stream: "x", Expected: eventstore.Any, Events: []eventstore.NewEvent{tagged("customer.registered", "email:a")}})
	cond := &eventstore.AppendCondition{Query: q, After: at}
	first := mustAppend(t, h.Store, eventstore.AppendRequest{Tenant: "t-a", Stream: "c-1", Expected: eventstore.NoStream, Condition: cond,
		Events: []eventstore.NewEvent{tagged("customer.registered", "email:a")}})
	// The same condition again: the event just appended matches.
	_, err := h.Store.Append(ctx(t), eventstore.AppendRequest{Tenant: "t-a", Stream: "c-2", Expected: eventstore.NoStream, Condition: cond,
		Events: []eventstore.NewEvent{tagged("customer.registered", "email:a")}})
	if !errors.Is(err, eventstore.ErrConditionFailed) || !errors.Is(err, eventstore.ErrVersionConflict) {
		t.Fatalf("second append on the same condition: %v, want ErrConditionFailed (a version conflict)", err)
	}
	if n := streamLen(t, h.Store, "t-a", "c-2"); n != 0 {
		t.Fatalf("a failed conditional append stored %d events", n)
	}
	// Read again: the position moves past the winner, and a condition on
	// it holds, even for an append whose own events do not match.
	recs, at2 := readTagged(t, r, "t-a", q)
	if len(recs) != 1 || recs[0].Position != first.Position || !at.Less(at2) {
		t.Fatalf("read after the append: %v at %s (before: %s)", streamsOf(recs), at2, at)
	}
	mustAppend(t, h.Store, eventstore.AppendRequest{Tenant: "t-a", Stream: "c-1", Expected: eventstore.Exact(1), Condition: &eventstore.AppendCondition{Query: q, After: at2},
		Events: []eventstore.NewEvent{tagged("customer.renamed")}})
	// A condition and a version conflict at once: the version is named.
	_, err = h.Store.Append(ctx(t), eventstore.AppendRequest{Tenant: "t-a", Stream: "c-1", Expected: eventstore.Exact(1), Condition: cond,
		Events: []eventstore.NewEvent{tagged("customer.renamed")}})
	if !errors.Is(err, eventstore.ErrVersionConflict) || errors.Is(err, eventstore.ErrConditionFailed) {
		t.Fatalf("stale version and failed condition: %v, want a plain version conflict", err)
	}
}

// testConditionMulti: a multi-stream append's condition guards all of it.
func testConditionMulti(t *testing.T, h Harness, r eventstore.TagReader) {
	m, ok := h.Store.(eventstore.MultiAppender)
	if !ok {
		t.Fatalf("%T does not implement eventstore.MultiAppender", h.Store)
	}
	q := event.Query{{Tags: []string{"seat:12A"}}}
	_, at := readTagged(t, r, "t-a", q)
	req := func(a, b string) eventstore.MultiAppendRequest {
		return eventstore.MultiAppendRequest{Tenant: "t-a", Condition: &eventstore.AppendCondition{Query: q, After: at}, Streams: []eventstore.StreamAppend{
			{Stream: a, Expected: eventstore.NoStream, Events: []eventstore.NewEvent{tagged("seat.sold", "seat:12A")}},
			{Stream: b, Expected: eventstore.NoStream, Events: []eventstore.NewEvent{tagged("booking.paid")}},
		}}
	}
	if _, err := m.AppendMulti(ctx(t), req("seat-1", "booking-1")); err != nil {
		t.Fatal(err)
	}
	if _, err := m.AppendMulti(ctx(t), req("seat-2", "booking-2")); !errors.Is(err, eventstore.ErrConditionFailed) {
		t.Fatalf("second sale of seat 12A: %v, want ErrConditionFailed", err)
	}
	for stream, want := range map[string]int{"seat-1": 1, "booking-1": 1, "seat-2": 0, "booking-2": 0} {
		if got := streamLen(t, h.Store, "t-a", stream); got != want {
			t.Fatalf("%s has %d events, want %d", stream, got, want)
		}
	}
}

func testConditionInvalid(t *testing.T, h Harness, r eventstore.TagReader) {
	long := strings.Repeat("x", event.MaxTagLength+1)
	for name, q := range map[string]event.Query{
		"no items":      {},
		"item no tags":  {{Types: []string{"customer.registered"}}},
		"a long tag":    {{Tags: []string{long}}},
		"a control tag": {{Tags: []string{"a\nb"}}},
	} {
		if _, _, err := r.ReadTagged(ctx(t), "t-a", q); err == nil {
			t.Errorf("read %s: no error", name)
		}
		_, err := h.Store.Append(ctx(t), eventstore.AppendRequest{Tenant: "t-a", Stream: "x", Expected: eventstore.Any,
			Events: []eventstore.NewEvent{tagged("x.y")}, Condition: &eventstore.AppendCondition{Query: q}})
		if err == nil || errors.Is(err, eventstore.ErrVersionConflict) {
			t.Errorf("append conditioned on %s: %v, want an invalid request", name, err)
		}
	}
	for name, tags := range map[string][]string{
		"a long tag":    {long},
		"an empty tag":  {""},
		"too many tags": manyTags(event.MaxTagsPerEvent + 1),
	} {
		_, err := h.Store.Append(ctx(t), eventstore.AppendRequest{Tenant: "t-a", Stream: "x", Expected: eventstore.Any, Events: []eventstore.NewEvent{tagged("x.y", tags...)}})
		if err == nil || errors.Is(err, eventstore.ErrVersionConflict) {
			t.Errorf("event with %s: %v, want an invalid request", name, err)
		}
	}
	if n := streamLen(t, h.Store, "t-a", "x"); n != 0 {
		t.Fatalf("invalid requests stored %d events", n)
	}
}

// testConditionOneWins: in each round, writers read the same query, then
// race appends of a matching event to streams of their own, each
// conditioned on its read: exactly one wins, and only its event is
// stored.
func testConditionOneWins(t *testing.T, h Harness, r eventstore.TagReader) {
	const writers = 4
	rounds := max(h.RaceIterations/25, 10)
	for round := 0; round < rounds; round++ {
		q := event.Query{{Tags: []string{fmt.Sprintf("email:%d", round)}}}
		var reads sync.WaitGroup
		reads.Add(writers)
		start := make(chan struct{})
		errs := make([]error, writers)
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, at, err := r.ReadTagged(ctx(t), "t-a", q)
				reads.Done()
				if err != nil {
					errs[w] = err
					return
				}
				<-start
				_, errs[w] = h.Store.Append(ctx(t), eventstore.AppendRequest{Tenant: "t-a", Stream: fmt.Sprintf("c-%d-%d", round, w), Expected: eventstore.NoStream,
					Condition: &eventstore.AppendCondition{Query: q, After: at}, Events: []eventstore.NewEvent{tagged("customer.registered", q[0].Tags[0])}})
			}()
		}
		reads.Wait()
		close(start)
		wg.Wait()
		var won []int
		for w, err := range errs {
			switch {
			case err == nil:
				won = append(won, w)
			case !errors.Is(err, eventstore.ErrConditionFailed):
				t.Fatalf("round %d writer %d: %v", round, w, err)
			}
		}
		if len(won) != 1 {
			t.Fatalf("round %d: %d conditional appends won (%v), want exactly one", round, len(won), won)
		}
		recs, _ := readTagged(t, r, "t-a", q)
		if len(recs) != 1 || recs[0].Stream != fmt.Sprintf("c-%d-%d", round, won[0]) {
			t.Fatalf("round %d: stored %v, want only the winner's", round, streamsOf(recs))
		}
	}
}

func manyTags(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("t:%d", i)
	}
	return out
}
