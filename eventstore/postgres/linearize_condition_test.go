package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/internal/linearize"
)

// Append conditions judged by porcupine (issue 31): racing clients read the
// events of a tenant matching a query of tags and append conditioned on
// their read, and the recorded history must be linearizable against
// linearize.ConditionModel, in which a conditional append succeeds iff no
// matching event was appended after its read, and a read sees exactly the
// matching events appended before it.

// condStore is what the conditional workload drives.
type condStore interface {
	eventstore.Store
	eventstore.MultiAppender
	eventstore.TagReader
}

const condTenant = "t-cond"

// condTags are few, so that clients' queries collide.
var condTags = []string{"email:a", "email:b", "email:c"}

type condWorkload struct {
	clients, ops int
	seed         uint64
	// beforeRace, optional, runs once before race k's appends, when every
	// client has read and no append is in flight.
	beforeRace func(k int)
}

// condRun counts what a workload's appends answered.
type condRun struct {
	mu sync.Mutex
	// held and failed count conditional appends acknowledged and failed
	// on their condition; multis the multi-stream appends acknowledged.
	held, failed, multis, cancelled, lost int
	// lostOK counts answers lost on the way from a store that had
	// acknowledged: appends the history holds indeterminate that did
	// take effect.
	lostOK     int
	unexpected []error
}

func (r *condRun) String() string {
	return fmt.Sprintf("conditions: %d held, %d failed; %d multi-stream appends acknowledged; %d appends cancelled mid-flight without an answer, %d answers lost (%d of them acknowledgements)",
		r.held, r.failed, r.multis, r.cancelled, r.lost, r.lostOK)
}

func (r *condRun) add(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f()
}

// runConditionWorkload records, for linearize.ConditionModel, a history of
// one tenant's tagged reads and appends. It opens with races, each begun
// once every client has read:
//
//   - the claim: every client reads email:a (nothing yet) and appends an
//     event tagged email:a conditioned on its read: one must win, every
//     other one fail its condition;
//   - the crossed race, twice (multi-stream appends, then single ones):
//     even clients read email:b and append an event tagged email:c
//     conditioned on it, odd ones the reverse: a write skew unless each
//     append also holds the lock of the tag it only reads. Whichever side
//     commits first, the other must fail.
//
// Then each client runs w.ops operations drawn from a seeded generator:
//
//   - read a query (one tag; 1 in 4 with a second item; an item narrowed
//     to one type, 1 in 4) and append an event (mostly one it matches,
//     condDecided), conditioned on the read, to the client's own stream
//     (Any) or a fresh one (NoStream): expectations that always hold, the
//     model judges the condition alone;
//   - the same as a multi-stream append to both streams, that event in
//     one of them;
//   - an append conditioned on the zero position (no matching event at
//     all), without a read;
//   - an unconditional append, tagged (1 in 4 untagged);
//   - a read alone.
//
// 1 in 20 appends is cancelled mid-flight and 1 in 20 loses its answer,
// as in runMultiWorkload (not in the races). It closes with one client
// alone reading each tag, appending conditioned on that read and reading
// again, so that a read that misses an event acknowledged before it
// began, such as the claim's winner, the first event tagged email:a, is
// certain to be caught.
func runConditionWorkload(t *testing.T, store condStore, w condWorkload) (*linearize.ConditionRecorder, *condRun) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rec := &linearize.ConditionRecorder{}
	run := &condRun{}
	read := func(client int, q event.Query) ([]event.Record, event.Position, bool) {
		c := rec.CallRead(client, condTenant, q)
		recs, at, err := store.ReadTagged(ctx, condTenant, q)
		rec.ReturnRead(c, recs, err)
		if err != nil {
			run.add(func() { run.unexpected = append(run.unexpected, err) })
			return nil, event.Position{}, false
		}
		return recs, at, true
	}
	// answered records an append's answer (or loses it) and counts it.
	answered := func(c linearize.Call, err error, conditional, multi, cancelMid, lose bool) {
		if lose {
			rec.ReturnIndeterminate(c)
		} else {
			rec.ReturnAppend(c, err)
		}
		run.add(func() {
			switch {
			case err == nil:
				if conditional {
					run.held++
				}
				if multi {
					run.multis++
				}
			case errors.Is(err, eventstore.ErrConditionFailed):
				run.failed++
			case cancelMid:
				run.cancelled++
			default:
				run.unexpected = append(run.unexpected, err)
			}
			if lose {
				run.lost++
				if err == nil {
					run.lostOK++
				}
			}
		})
	}
	// phases[2k] is passed once every client's earlier appends have
	// returned, phases[2k+1] once every client has read for race k.
	phases := make([]sync.WaitGroup, 6)
	for i := range phases {
		phases[i].Add(w.clients)
	}
	pass := func(i int) {
		phases[i].Done()
		phases[i].Wait()
	}
	// race appends events (with multi, as a multi-stream append with an
	// untagged event to a fresh stream beside) conditioned on a read of
	// q, once every client has read.
	before := make([]sync.Once, len(phases)/2)
	race := func(client, k int, q event.Query, events []eventstore.NewEvent, multi bool) {
		own := fmt.Sprintf("own-%d", client)
		pass(2 * k)
		recs, at, _ := read(client, q)
		if w.beforeRace != nil {
			before[k].Do(func() { w.beforeRace(k) })
		}
		pass(2*k + 1)
		cond := &eventstore.AppendCondition{Query: q, After: at}
		if multi {
			req := eventstore.MultiAppendRequest{Tenant: condTenant, Condition: cond, Streams: []eventstore.StreamAppend{
				{Stream: own, Expected: eventstore.Any, Events: events},
				{Stream: fmt.Sprintf("race-%d-%d", k, client), Expected: eventstore.NoStream, Events: condEvent("lin.noted")}}}
			c := rec.CallMulti(client, req, recs)
			_, err := store.AppendMulti(ctx, req)
			answered(c, err, true, true, false, false)
			return
		}
		req := eventstore.AppendRequest{Tenant: condTenant, Stream: own, Expected: eventstore.Any, Events: events, Condition: cond}
		c := rec.CallAppend(client, req, recs)
		_, err := store.Append(ctx, req)
		answered(c, err, true, false, false, false)
	}
	var wg sync.WaitGroup
	for client := 0; client < w.clients; client++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(w.seed, uint64(client)))
			own := fmt.Sprintf("own-%d", client)
			race(client, 0, event.Query{{Tags: []string{"email:a"}}}, condEvent("lin.registered", "email:a"), false)
			readTag, writeTag := "email:b", "email:c"
			if client%2 == 1 {
				readTag, writeTag = writeTag, readTag
			}
			crossed := event.Query{{Tags: []string{readTag}}}
			race(client, 1, crossed, condEvent("lin.registered", writeTag), true)
			race(client, 2, crossed, condEvent("lin.registered", writeTag), false)
			for i := 0; i < w.ops; i++ {
				actx, acancel := context.WithCancel(ctx)
				cancelMid := rng.IntN(20) == 0
				if cancelMid {
					actx = context.WithValue(actx, midFlightKey{}, acancel)
				}
				lose := rng.IntN(20) == 0
				fresh := fmt.Sprintf("fresh-%d-%d", client, i)
				single := func(q event.Query, at event.Position, recs []event.Record, events []eventstore.NewEvent) {
					req := eventstore.AppendRequest{Tenant: condTenant, Stream: own, Expected: eventstore.Any, Events: events}
					if rng.IntN(2) == 0 {
						req.Stream, req.Expected = fresh, eventstore.NoStream
					}
					if q != nil {
						req.Condition = &eventstore.AppendCondition{Query: q, After: at}
					}
					c := rec.CallAppend(client, req, recs)
					_, err := store.Append(actx, req)
					answered(c, err, q != nil, false, cancelMid, lose)
				}
				switch r := rng.IntN(20); {
				case r < 8:
					q := condQuery(rng)
					if recs, at, ok := read(client, q); ok {
						single(q, at, recs, condDecided(rng, q))
					}
				case r < 12:
					q := condQuery(rng)
					recs, at, ok := read(client, q)
					if !ok {
						break
					}
					other := condEvent("lin.noted")
					if rng.IntN(2) == 0 {
						other = condEvent("lin.noted", condTags[rng.IntN(len(condTags))])
					}
					parts := []eventstore.StreamAppend{
						{Stream: own, Expected: eventstore.Any, Events: condDecided(rng, q)},
						{Stream: fresh, Expected: eventstore.NoStream, Events: other},
					}
					if rng.IntN(2) == 0 {
						parts[0], parts[1] = parts[1], parts[0]
					}
					req := eventstore.MultiAppendRequest{Tenant: condTenant, Streams: parts, Condition: &eventstore.AppendCondition{Query: q, After: at}}
					c := rec.CallMulti(client, req, recs)
					_, err := store.AppendMulti(actx, req)
					answered(c, err, true, true, cancelMid, lose)
				case r < 13:
					q := condQuery(rng)
					single(q, event.Position{}, nil, condDecided(rng, q))
				case r < 17:
					events := condEvent("lin.noted", condTags[rng.IntN(len(condTags))])
					if rng.IntN(4) == 0 {
						events = condEvent("lin.noted")
					}
					single(nil, event.Position{}, nil, events)
				default:
					read(client, condQuery(rng))
				}
				acancel()
			}
		}()
	}
	wg.Wait()
	closer := w.clients
	for _, tag := range condTags {
		q := event.Query{{Tags: []string{tag}}}
		recs, at, ok := read(closer, q)
		if !ok {
			continue
		}
		req := eventstore.AppendRequest{Tenant: condTenant, Stream: "closing", Expected: eventstore.Any,
			Events: condEvent("lin.registered", tag), Condition: &eventstore.AppendCondition{Query: q, After: at}}
		c := rec.CallAppend(closer, req, recs)
		_, err := store.Append(ctx, req)
		answered(c, err, true, false, false, false)
		read(closer, q)
	}
	if len(run.unexpected) > 0 {
		t.Fatalf("unexpected errors (beyond failed conditions and the injected cancellations): %v", run.unexpected)
	}
	return rec, run
}

// condQuery draws a query: one tag, sometimes a second item, an item
// sometimes narrowed to a type.
func condQuery(rng *rand.Rand) event.Query {
	item := func() event.QueryItem {
		it := event.QueryItem{Tags: []string{condTags[rng.IntN(len(condTags))]}}
		if rng.IntN(4) == 0 {
			it.Types = []string{"lin.registered"}
		}
		return it
	}
	q := event.Query{item()}
	if rng.IntN(4) == 0 {
		q = append(q, item())
	}
	return q
}

// condDecided draws the event an append conditioned on q writes: mostly
// one of q's items matches (1 in 5 with one more tag), as a command
// claiming what it read does; 1 in 4 an event of a tag of its own, as a
// command deciding on one thing and writing another does (the shape of a
// write skew, which only the condition's own locks prevent).
func condDecided(rng *rand.Rand, q event.Query) []eventstore.NewEvent {
	if rng.IntN(4) == 0 {
		return condEvent("lin.noted", condTags[rng.IntN(len(condTags))])
	}
	it := q[rng.IntN(len(q))]
	tags := it.Tags
	if rng.IntN(5) == 0 {
		tags = append(tags[:len(tags):len(tags)], condTags[rng.IntN(len(condTags))])
	}
	typ := "lin.registered"
	if len(it.Types) == 0 && rng.IntN(2) == 0 {
		typ = "lin.noted"
	}
	return condEvent(typ, tags...)
}

func condEvent(typ string, tags ...string) []eventstore.NewEvent {
	evs := linEvents(1)
	evs[0].Type, evs[0].Metadata.Tags = typ, tags
	return evs
}

// TestConditionalHistoryIsLinearizable: 8 clients on 3 tags, the claim
// and the crossed races, then 30 operations each, conditional appends
// (single and multi-stream) among unconditional ones and reads, some
// cancelled mid-flight or with their answer lost: porcupine finds a
// linearization under linearize.ConditionModel, on a store appending
// alone and on one grouping concurrent appends (whose members sharing a
// tag go in successive statements; each race of single appends is made
// one group).
func TestConditionalHistoryIsLinearizable(t *testing.T) {
	for _, tc := range []struct {
		name    string
		grouped bool
	}{
		{"alone", false},
		{"grouped", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spy := &groupSpy{}
			var opts []Option
			if tc.grouped {
				opts = []Option{WithGroupCommit(GroupConfig{}), forced(0, spy, nil)}
			}
			store := linStore(t, opts...)
			w := condWorkload{clients: 8, ops: 30, seed: 31}
			if tc.grouped {
				// The races of single appends in one group each: their
				// members sharing a tag, read or written, must go in
				// successive statements.
				w.beforeRace = func(k int) {
					if k != 1 {
						store.group.mu.Lock()
						store.group.gather = w.clients
						store.group.mu.Unlock()
					}
				}
			}
			rec, run := runConditionWorkload(t, store, w)
			c := rec.Counts()
			sizes, _ := spy.get()
			t.Logf("%d operations, %d indeterminate; %v; %d shared transactions (%d of all %d clients)", c.Operations, c.Indeterminate, run, len(sizes), countOf(sizes, w.clients), w.clients)
			// A history without a held and a failed condition, a
			// multi-stream append, or an indeterminate append that took
			// effect (the model's "it happened" branch) proves little; nor
			// does a grouped run whose races of single appends did not
			// each go in one transaction.
			if run.held == 0 || run.failed == 0 || run.multis == 0 || run.lostOK == 0 || (tc.grouped && countOf(sizes, w.clients) < 2) {
				t.Fatalf("the history lacks a case: %v, %d indeterminate, group sizes %v", run, c.Indeterminate, sizes)
			}
			linearize.Require(t, linearize.ConditionModel, rec.Operations(), time.Minute)
		})
	}
}

// countOf counts the groups of n members.
func countOf(sizes []int, n int) int {
	c := 0
	for _, s := range sizes {
		if s == n {
			c++
		}
	}
	return c
}

// unconditional is a broken store: it drops every append's condition.
type unconditional struct{ *Store }

func (s unconditional) Append(ctx context.Context, req eventstore.AppendRequest) (eventstore.AppendResult, error) {
	req.Condition = nil
	return s.Store.Append(ctx, req)
}

func (s unconditional) AppendMulti(ctx context.Context, req eventstore.MultiAppendRequest) (eventstore.MultiAppendResult, error) {
	req.Condition = nil
	return s.Store.AppendMulti(ctx, req)
}

// ackFailedCondition is a broken store: it acknowledges an append whose
// condition failed (and which therefore stored nothing).
type ackFailedCondition struct{ *Store }

func (s ackFailedCondition) Append(ctx context.Context, req eventstore.AppendRequest) (eventstore.AppendResult, error) {
	res, err := s.Store.Append(ctx, req)
	if errors.Is(err, eventstore.ErrConditionFailed) {
		return eventstore.AppendResult{}, nil
	}
	return res, err
}

func (s ackFailedCondition) AppendMulti(ctx context.Context, req eventstore.MultiAppendRequest) (eventstore.MultiAppendResult, error) {
	res, err := s.Store.AppendMulti(ctx, req)
	if errors.Is(err, eventstore.ErrConditionFailed) {
		return eventstore.MultiAppendResult{}, nil
	}
	return res, err
}

// staleTagged is a broken store: its tagged reads miss the oldest matching
// event, as a read of an index that lost an entry would.
type staleTagged struct{ *Store }

func (s staleTagged) ReadTagged(ctx context.Context, tenant string, q event.Query) ([]event.Record, event.Position, error) {
	recs, at, err := s.Store.ReadTagged(ctx, tenant, q)
	if len(recs) > 0 {
		recs = recs[1:]
	}
	return recs, at, err
}

// TestConditionCheckerBites: broken variants give histories porcupine
// calls illegal, whatever the interleaving. Without conditions, or with
// failed conditions acknowledged, every client's append in the claim is
// acknowledged, and two appends conditioned on reads that saw nothing
// cannot both follow each other. A read missing the oldest matching event
// makes the closing read of email:a miss the claim's winner,
// acknowledged before it began (every later event tagged email:a was
// appended after the winner's commit, so the winner's is the oldest).
// Two winners on one empty read are also recorded by hand: that verdict
// does not depend on a store behaving badly on cue.
func TestConditionCheckerBites(t *testing.T) {
	for _, tc := range []struct {
		name string
		wrap func(*Store) condStore
	}{
		{"conditions dropped", func(s *Store) condStore { return unconditional{s} }},
		{"failed conditions acknowledged", func(s *Store) condStore { return ackFailedCondition{s} }},
		{"tagged reads miss the oldest match", func(s *Store) condStore { return staleTagged{s} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A database of its own: the tags start with no event.
			rec, run := runConditionWorkload(t, tc.wrap(linStore(t)), condWorkload{clients: 4, ops: 10, seed: 37})
			t.Logf("%v", run)
			requireIllegal(t, rec)
		})
	}
	t.Run("two winners on one empty read, recorded by hand", func(t *testing.T) {
		rec := &linearize.ConditionRecorder{}
		q := event.Query{{Tags: []string{"email:a"}}}
		r := rec.CallRead(0, condTenant, q)
		rec.ReturnRead(r, nil, nil)
		reqs := make([]eventstore.AppendRequest, 2)
		calls := make([]linearize.Call, 2)
		for i := range reqs {
			reqs[i] = eventstore.AppendRequest{Tenant: condTenant, Stream: fmt.Sprintf("own-%d", i), Expected: eventstore.Any,
				Events: condEvent("lin.registered", "email:a"), Condition: &eventstore.AppendCondition{Query: q}}
			calls[i] = rec.CallAppend(i, reqs[i], nil)
		}
		for _, c := range calls {
			rec.ReturnAppend(c, nil)
		}
		requireIllegal(t, rec)
	})
}

// requireIllegal fails t unless porcupine calls rec's history illegal,
// explains why and leaves its visualisation.
func requireIllegal(t *testing.T, rec *linearize.ConditionRecorder) {
	t.Helper()
	dir := os.Getenv(linearize.OutputDirEnv)
	if dir == "" {
		dir = t.TempDir()
	}
	v, err := linearize.Check(linearize.ConditionModel, rec.Operations(), time.Minute, dir, t.Name(), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%v", v)
	if v.Result != porcupine.Illegal {
		t.Fatalf("a broken history was judged %s, want Illegal", v.Result)
	}
	if _, err := os.Stat(v.Visualization); err != nil || !strings.Contains(v.Explain, "append(") {
		t.Fatalf("no visualisation or explanation of the illegal history: %v", v)
	}
}
