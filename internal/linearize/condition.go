package linearize

import (
	"cmp"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/anishathalye/porcupine"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
)

// Append conditions (issue 31, dynamic consistency boundaries): a command
// reads a tenant's events matching a query of tags (ReadTagged), decides,
// and appends on the condition that no event matching the query was
// appended after that read (eventstore.AppendCondition). ConditionModel
// judges histories of such reads and appends.
//
// The store's condition names a position, the one its read returned; the
// model's names what that read saw. They agree: events are only ever
// added, so "no matching event was appended after the read" is "the
// matching events are still exactly those the read saw", and the model
// holds the read itself to the same state (it must have seen exactly the
// matching events appended before its linearization point). The model
// therefore needs no log order of its own to compare with the store's
// positions: a set of events is its whole state.

// TagEvent is an event as ConditionModel knows it: the append that wrote
// it (Op, its Call) and its place in that append (Index), which name it,
// and what a query matches it by.
type TagEvent struct {
	Op, Index int
	Type      string
	Tags      []string // sorted, once each
}

// newTagEvent names the event at index of append op, with its tags in
// their stored form.
func newTagEvent(op, index int, typ string, tags []string) TagEvent {
	norm, err := event.NormalizeTags(tags)
	if err != nil { // the store refuses the append; keep what was asked
		norm = slices.Sorted(slices.Values(tags))
	}
	return TagEvent{Op: op, Index: index, Type: typ, Tags: norm}
}

func (e TagEvent) name() string {
	return "a" + strconv.Itoa(e.Op) + "." + strconv.Itoa(e.Index)
}

// TagLog is a tenant's tagged events as the model knows them, sorted by
// the append that wrote them (then by place), not by when it was placed:
// two orders of the same appends are one state, which porcupine's cache
// then visits once. Untagged events are left out: every query item names
// a tag, so no query matches them.
type TagLog []TagEvent

// matching renders the events of l that q matches, as a read renders what
// it saw.
func (l TagLog) matching(q event.Query) TagSeen {
	var names []string
	for _, e := range l {
		if q.Matches(e.Type, e.Tags) {
			names = append(names, e.name())
		}
	}
	return TagSeen(strings.Join(names, " "))
}

// with returns l and events (one append's, in order); l is not modified.
func (l TagLog) with(events []TagEvent) TagLog {
	if len(events) == 0 {
		return l
	}
	at, _ := slices.BinarySearchFunc(l, events[0].Op, func(e TagEvent, op int) int { return cmp.Compare(e.Op, op) })
	return slices.Concat(l[:at], events, l[at:])
}

// TagSeen is what a tagged read saw: the events' names,
// "a<append>.<place>", sorted as TagLog is and space-separated
// ("a3.0 a3.1 a7.0"), whatever order the store returned them in (its log
// order need not be the order the appends took effect in: two appends of
// different tags do not wait for each other); "??" names an event no
// recorded append wrote.
type TagSeen string

// openRead is the output of a read still open at the end of a history:
// it matches no state (a test must not leave reads open).
const openRead TagSeen = "\x00open"

// TaggedReadInput is a ReadTagged of Query in Tenant; its output is a
// TagSeen.
type TaggedReadInput struct {
	Tenant string
	Query  event.Query
}

// TaggedAppendInput is an append, to one stream or several (a multi-stream
// append, all or nothing), of N events of which Events are tagged,
// unconditional or under Condition; its output is an Outcome.
type TaggedAppendInput struct {
	Tenant    string
	Op        int
	Streams   int // for the description
	N         int
	Events    []TagEvent
	Condition *TagCondition
}

// TagCondition is an append's condition as the model knows it: the query,
// and what the read whose position the condition names saw of it.
type TagCondition struct {
	Query event.Query
	Seen  TagSeen
}

// ConditionModel is the sequential specification of a tenant's tagged
// events under tagged reads and (conditional) appends:
//
//   - read(q) -> seen: legal only if seen is exactly the events appended
//     so far that q matches;
//   - append(events, if q saw S) -> ok: legal only if the events q matches
//     now are exactly S (none was appended since the read; an
//     unconditional append always qualifies); the events are added;
//   - -> condition failed: legal only if they are not; nothing changes;
//   - -> indeterminate: the events are added where the checker places it
//     if the condition holds there, else nothing changes; one that never
//     took effect is placed after every other operation (its return is the
//     end of the history), where no one sees its effect, as in StreamModel;
//   - -> conflict (an expected version failed): never legal. The model
//     judges conditions, not versions (StreamModel and MultiStreamModel
//     do): a workload recorded for it appends with expectations that
//     always hold (Any, or NoStream on a stream nobody else appends to).
//
// It is partitioned per tenant and, within a tenant, per connected group
// of tags: operations are linked when they name a common tag (an append
// names its events' tags and its condition's). That is sound: an event
// matches a query only if it carries every tag of one of its items, so an
// operation's outcome depends only on events carrying one of the tags it
// names, and it adds only such events. The state is therefore the product
// of independent per-group states, and a history is linearizable iff each
// group's is (linearizability is local). An untagged unconditional append
// names no tag and is judged with its tenant's other such appends.
var ConditionModel = porcupine.Model{
	Partition: partitionByTags,
	Init:      func() any { return TagLog(nil) },
	Step: func(state, input, output any) (bool, any) {
		s := state.(TagLog)
		switch in := input.(type) {
		case TaggedAppendInput:
			holds := in.Condition == nil || s.matching(in.Condition.Query) == in.Condition.Seen
			switch output.(Outcome) {
			case OK:
				if !holds {
					return false, s
				}
				return true, s.with(in.Events)
			case ConditionFailed:
				return !holds, s
			case Indeterminate:
				if holds {
					return true, s.with(in.Events)
				}
				return true, s
			}
			return false, s
		case TaggedReadInput:
			return output.(TagSeen) == s.matching(in.Query), s
		}
		return false, s
	},
	// The events an append adds are fixed by its input, so an event's name
	// is all of it a state must be compared by.
	Equal: func(a, b any) bool {
		return slices.EqualFunc(a.(TagLog), b.(TagLog), func(x, y TagEvent) bool { return x.Op == y.Op && x.Index == y.Index })
	},
	Hash: func(state any) uint64 {
		h := fnv.New64a()
		for _, e := range state.(TagLog) {
			h.Write([]byte(e.name() + " "))
		}
		return h.Sum64()
	},
	DescribeOperation: func(input, output any) string {
		switch in := input.(type) {
		case TaggedAppendInput:
			cond := ""
			if in.Condition != nil {
				cond = fmt.Sprintf(" if %s saw [%s]", describeQuery(in.Condition.Query), abbreviate(string(in.Condition.Seen)))
			}
			tagged := make([]string, len(in.Events))
			for i, e := range in.Events {
				tagged[i] = describeEvent(e)
			}
			return fmt.Sprintf("a%d: append(%d events to %d streams, tagged [%s]%s) -> %s",
				in.Op, in.N, in.Streams, strings.Join(tagged, " "), cond, output.(Outcome))
		case TaggedReadInput:
			return fmt.Sprintf("read(%s) -> [%s]", describeQuery(in.Query), abbreviate(string(output.(TagSeen))))
		}
		return fmt.Sprintf("%v -> %v", input, output)
	},
	DescribeState: func(state any) string {
		s := state.(TagLog)
		names := make([]string, len(s))
		for i, e := range s {
			names[i] = describeEvent(e)
		}
		return fmt.Sprintf("%d tagged events [%s]", len(s), abbreviate(strings.Join(names, " ")))
	},
}

// partitionByTags groups a history per tenant and connected group of
// tags (see ConditionModel), keeping the order of operations.
func partitionByTags(history []porcupine.Operation) [][]porcupine.Operation {
	parent := map[string]string{}
	var find func(string) string
	find = func(k string) string {
		p, ok := parent[k]
		if !ok || p == k {
			return k
		}
		root := find(p)
		parent[k] = root
		return root
	}
	for _, op := range history {
		tenant, tags := namedTags(op.Input)
		for _, t := range tags[min(1, len(tags)):] {
			a, b := find(tenant+"\x00"+tags[0]), find(tenant+"\x00"+t)
			if a != b {
				parent[b] = a
			}
		}
	}
	return partition(history, func(in any) string {
		tenant, tags := namedTags(in)
		if len(tags) == 0 {
			return tenant
		}
		return find(tenant + "\x00" + tags[0])
	})
}

// namedTags returns an operation's tenant and the tags it names.
func namedTags(in any) (string, []string) {
	switch in := in.(type) {
	case TaggedReadInput:
		return in.Tenant, in.Query.Tags()
	case TaggedAppendInput:
		var tags []string
		for _, e := range in.Events {
			tags = append(tags, e.Tags...)
		}
		if in.Condition != nil {
			tags = append(tags, in.Condition.Query.Tags()...)
		}
		return in.Tenant, tags
	}
	return "", nil
}

// describeQuery renders a query as its items, "email:a+vip | lin.registered{email:b}".
func describeQuery(q event.Query) string {
	items := make([]string, len(q))
	for i, it := range q {
		items[i] = strings.Join(it.Tags, "+")
		if len(it.Types) > 0 {
			items[i] = strings.Join(it.Types, ",") + "{" + items[i] + "}"
		}
	}
	return strings.Join(items, " | ")
}

func describeEvent(e TagEvent) string {
	return e.name() + ":" + e.Type + "{" + strings.Join(e.Tags, "+") + "}"
}

// ConditionRecorder records tagged reads and appends, conditional or not,
// from many goroutines, for ConditionModel. The zero value is ready to
// use.
type ConditionRecorder struct {
	h      history
	mu     sync.Mutex
	events map[string]TagEvent // event ID -> the event as the model knows it
}

// CallRead records the invocation of ReadTagged(tenant, q).
func (r *ConditionRecorder) CallRead(client int, tenant string, q event.Query) Call {
	q = slices.Clone(q)
	return r.h.call(client, func(Call) any { return TaggedReadInput{Tenant: tenant, Query: q} })
}

// ReturnRead records what the read returned. A failed read is left out:
// it changed nothing and told nothing.
func (r *ConditionRecorder) ReturnRead(c Call, recs []event.Record, err error) {
	if err != nil {
		r.h.forget(c)
		return
	}
	r.h.ret(c, r.seen(recs))
}

// CallAppend records the invocation of req; call it right before the
// store's Append. read is what the ReadTagged of req.Condition.Query whose
// position is req.Condition.After returned (nil for a condition after the
// zero position: no matching event at all); it is ignored without a
// condition.
func (r *ConditionRecorder) CallAppend(client int, req eventstore.AppendRequest, read []event.Record) Call {
	return r.callAppend(client, req.Tenant, 1, [][]eventstore.NewEvent{req.Events}, req.Condition, read)
}

// CallMulti records the invocation of a multi-stream append, as
// CallAppend.
func (r *ConditionRecorder) CallMulti(client int, req eventstore.MultiAppendRequest, read []event.Record) Call {
	parts := make([][]eventstore.NewEvent, len(req.Streams))
	for i, p := range req.Streams {
		parts[i] = p.Events
	}
	return r.callAppend(client, req.Tenant, len(parts), parts, req.Condition, read)
}

func (r *ConditionRecorder) callAppend(client int, tenant string, streams int, parts [][]eventstore.NewEvent, cond *eventstore.AppendCondition, read []event.Record) Call {
	var all []eventstore.NewEvent
	for _, p := range parts {
		all = append(all, p...)
	}
	var tc *TagCondition
	if cond != nil {
		tc = &TagCondition{Query: slices.Clone(cond.Query), Seen: r.seen(read)}
	}
	var named []TagEvent
	c := r.h.call(client, func(c Call) any {
		in := TaggedAppendInput{Tenant: tenant, Op: int(c), Streams: streams, N: len(all), Condition: tc}
		for i, e := range all {
			te := newTagEvent(int(c), i, e.Type, e.Metadata.Tags)
			named = append(named, te)
			if len(te.Tags) > 0 {
				in.Events = append(in.Events, te)
			}
		}
		return in
	})
	// The names are known before the append is invoked, so a read that
	// sees one of its events always finds it.
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.events == nil {
		r.events = map[string]TagEvent{}
	}
	for i, e := range all {
		r.events[e.ID] = named[i]
	}
	return c
}

// ReturnAppend records the store's answer to an append or a multi-stream
// append: nil is ok, ErrConditionFailed a failed condition, another
// ErrVersionConflict a conflict (which ConditionModel never accepts),
// every other error indeterminate (the store may have committed before
// the error reached us).
func (r *ConditionRecorder) ReturnAppend(c Call, err error) {
	switch {
	case err == nil:
		r.h.ret(c, OK)
	case errors.Is(err, eventstore.ErrConditionFailed):
		r.h.ret(c, ConditionFailed)
	case errors.Is(err, eventstore.ErrVersionConflict):
		r.h.ret(c, Conflict)
	default:
		r.h.indeterminate(c, Indeterminate)
	}
}

// ReturnIndeterminate records that the appender never learned the
// outcome (its answer was lost on the way).
func (r *ConditionRecorder) ReturnIndeterminate(c Call) { r.h.indeterminate(c, Indeterminate) }

// seen renders what a read returned, sorted as TagLog is.
func (r *ConditionRecorder) seen(recs []event.Record) TagSeen {
	r.mu.Lock()
	defer r.mu.Unlock()
	return tagSeen(recs, r.events)
}

// tagSeen renders the records a read returned by the names of the events
// (ID -> event) the history's appends wrote, sorted as TagLog is; "??"
// for each record no append wrote.
func tagSeen(recs []event.Record, events map[string]TagEvent) TagSeen {
	var known []TagEvent
	unknown := 0
	for _, rec := range recs {
		if e, ok := events[rec.ID]; ok {
			known = append(known, e)
		} else {
			unknown++
		}
	}
	slices.SortFunc(known, func(a, b TagEvent) int { return cmp.Or(cmp.Compare(a.Op, b.Op), cmp.Compare(a.Index, b.Index)) })
	names := make([]string, 0, len(recs))
	for _, e := range known {
		names = append(names, e.name())
	}
	for range unknown {
		names = append(names, "??")
	}
	return TagSeen(strings.Join(names, " "))
}

// Operations returns the recorded history for ConditionModel. Appends
// still open (a goroutine that never returned) count as indeterminate.
func (r *ConditionRecorder) Operations() []porcupine.Operation {
	ops, _ := r.h.operations(func(in any) any {
		if _, ok := in.(TaggedReadInput); ok {
			return openRead
		}
		return Indeterminate
	})
	return ops
}

// Counts summarises the history.
func (r *ConditionRecorder) Counts() Counts { return r.h.counts() }
