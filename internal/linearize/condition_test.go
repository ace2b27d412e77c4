package linearize

import (
	"errors"
	"fmt"
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
)

func tev(id, typ string, tags ...string) eventstore.NewEvent {
	return eventstore.NewEvent{ID: id, Type: typ, Metadata: event.Metadata{Tags: tags}}
}

// treq appends evs to stream, under the condition that q matches nothing
// new since the read that returned after (nil q: unconditional).
func treq(stream string, q event.Query, evs ...eventstore.NewEvent) eventstore.AppendRequest {
	req := eventstore.AppendRequest{Tenant: "t", Stream: stream, Expected: eventstore.Any, Events: evs}
	if q != nil {
		req.Condition = &eventstore.AppendCondition{Query: q}
	}
	return req
}

func trecs(ids ...string) []event.Record {
	out := make([]event.Record, len(ids))
	for i, id := range ids {
		out[i] = event.Record{ID: id}
	}
	return out
}

var (
	qa         = event.Query{{Tags: []string{"email:a"}}}
	qab        = event.Query{{Tags: []string{"email:a"}}, {Tags: []string{"email:b"}}}
	failedCond = fmt.Errorf("append c-2: %w", eventstore.ErrConditionFailed)
)

func TestConditionModel(t *testing.T) {
	cases := []struct {
		name string
		run  func(r *ConditionRecorder)
		want porcupine.CheckResult
	}{
		{"one winner on an empty read", func(r *ConditionRecorder) {
			c, d := r.CallRead(0, "t", qa), r.CallRead(1, "t", qa)
			r.ReturnRead(c, nil, nil)
			r.ReturnRead(d, nil, nil)
			a, b := r.CallAppend(0, treq("c-1", qa, tev("e1", "registered", "email:a")), nil), r.CallAppend(1, treq("c-2", qa, tev("e2", "registered", "email:a")), nil)
			r.ReturnAppend(b, failedCond)
			r.ReturnAppend(a, nil)
			e := r.CallRead(2, "t", qa)
			r.ReturnRead(e, trecs("e1"), nil)
		}, porcupine.Ok},
		{"two winners on one empty read", func(r *ConditionRecorder) {
			c, d := r.CallRead(0, "t", qa), r.CallRead(1, "t", qa)
			r.ReturnRead(c, nil, nil)
			r.ReturnRead(d, nil, nil)
			a, b := r.CallAppend(0, treq("c-1", qa, tev("e1", "registered", "email:a")), nil), r.CallAppend(1, treq("c-2", qa, tev("e2", "registered", "email:a")), nil)
			r.ReturnAppend(a, nil)
			r.ReturnAppend(b, nil)
		}, porcupine.Illegal},
		{"a second winner that read the first", func(r *ConditionRecorder) {
			a := r.CallAppend(0, treq("c-1", qa, tev("e1", "registered", "email:a")), nil)
			r.ReturnAppend(a, nil)
			c := r.CallRead(1, "t", qa)
			r.ReturnRead(c, trecs("e1"), nil)
			b := r.CallAppend(1, treq("c-2", qa, tev("e2", "registered", "email:a")), trecs("e1"))
			r.ReturnAppend(b, nil)
		}, porcupine.Ok},
		{"a read that misses an event appended before it started", func(r *ConditionRecorder) {
			a := r.CallAppend(0, treq("c-1", nil, tev("e1", "registered", "email:a")), nil)
			r.ReturnAppend(a, nil)
			c := r.CallRead(1, "t", qa)
			r.ReturnRead(c, nil, nil)
		}, porcupine.Illegal},
		{"a read concurrent with the append may miss it", func(r *ConditionRecorder) {
			a := r.CallAppend(0, treq("c-1", nil, tev("e1", "registered", "email:a")), nil)
			c := r.CallRead(1, "t", qa)
			r.ReturnRead(c, nil, nil)
			r.ReturnAppend(a, nil)
		}, porcupine.Ok},
		{"a condition failed with nothing appended since its read", func(r *ConditionRecorder) {
			c := r.CallRead(0, "t", qa)
			r.ReturnRead(c, nil, nil)
			a := r.CallAppend(0, treq("c-1", qa, tev("e1", "registered", "email:a")), nil)
			r.ReturnAppend(a, failedCond)
		}, porcupine.Illegal},
		{"a condition fails on a match appended after its read", func(r *ConditionRecorder) {
			c := r.CallRead(0, "t", qa)
			r.ReturnRead(c, nil, nil)
			a := r.CallAppend(1, treq("c-1", nil, tev("e1", "registered", "email:a")), nil)
			r.ReturnAppend(a, nil)
			b := r.CallAppend(0, treq("c-2", qa, tev("e2", "registered", "email:a")), nil)
			r.ReturnAppend(b, failedCond)
		}, porcupine.Ok},
		{"a condition holds across an append of another tag", func(r *ConditionRecorder) {
			c := r.CallRead(0, "t", qa)
			r.ReturnRead(c, nil, nil)
			a := r.CallAppend(1, treq("c-1", nil, tev("e1", "registered", "email:b")), nil)
			r.ReturnAppend(a, nil)
			b := r.CallAppend(0, treq("c-2", qa, tev("e2", "registered", "email:a")), nil)
			r.ReturnAppend(b, nil)
		}, porcupine.Ok},
		{"a condition holds across an append of another type", func(r *ConditionRecorder) {
			q := event.Query{{Types: []string{"registered"}, Tags: []string{"email:a"}}}
			c := r.CallRead(0, "t", q)
			r.ReturnRead(c, nil, nil)
			a := r.CallAppend(1, treq("c-1", nil, tev("e1", "noted", "email:a")), nil)
			r.ReturnAppend(a, nil)
			b := r.CallAppend(0, treq("c-2", q, tev("e2", "registered", "email:a")), nil)
			r.ReturnAppend(b, nil)
			d := r.CallRead(0, "t", qa)
			r.ReturnRead(d, trecs("e2", "e1"), nil)
		}, porcupine.Ok},
		{"a condition of two items ignoring its second tag", func(r *ConditionRecorder) {
			c := r.CallRead(0, "t", qab)
			r.ReturnRead(c, nil, nil)
			a := r.CallAppend(1, treq("c-1", nil, tev("e1", "registered", "email:b")), nil)
			r.ReturnAppend(a, nil)
			b := r.CallAppend(0, treq("c-2", qab, tev("e2", "registered", "email:a")), nil)
			r.ReturnAppend(b, nil)
		}, porcupine.Illegal},
		{"an item matches only events with all its tags", func(r *ConditionRecorder) {
			q := event.Query{{Tags: []string{"email:a", "vip"}}}
			c := r.CallRead(0, "t", q)
			r.ReturnRead(c, nil, nil)
			a := r.CallAppend(1, treq("c-1", nil, tev("e1", "registered", "email:a")), nil)
			r.ReturnAppend(a, nil)
			b := r.CallAppend(0, treq("c-2", q, tev("e2", "registered", "vip", "email:a")), nil)
			r.ReturnAppend(b, nil)
			d := r.CallRead(0, "t", q)
			r.ReturnRead(d, trecs("e2"), nil)
		}, porcupine.Ok},
		{"a condition after the zero position fails on any match", func(r *ConditionRecorder) {
			a := r.CallAppend(0, treq("c-1", nil, tev("e1", "registered", "email:a")), nil)
			r.ReturnAppend(a, nil)
			b := r.CallAppend(1, treq("c-2", qa, tev("e2", "registered", "email:a")), nil)
			r.ReturnAppend(b, failedCond)
		}, porcupine.Ok},
		{"an indeterminate append that happened", func(r *ConditionRecorder) {
			a := r.CallAppend(0, treq("c-1", qa, tev("e1", "registered", "email:a")), nil)
			r.ReturnIndeterminate(a)
			b := r.CallAppend(1, treq("c-2", qa, tev("e2", "registered", "email:a")), nil)
			r.ReturnAppend(b, failedCond)
			c := r.CallRead(2, "t", qa)
			r.ReturnRead(c, trecs("e1"), nil)
		}, porcupine.Ok},
		{"an indeterminate append that did not happen", func(r *ConditionRecorder) {
			a := r.CallAppend(0, treq("c-1", qa, tev("e1", "registered", "email:a")), nil)
			r.ReturnAppend(a, errors.New("context canceled"))
			b := r.CallAppend(1, treq("c-2", qa, tev("e2", "registered", "email:a")), nil)
			r.ReturnAppend(b, nil)
			c := r.CallRead(2, "t", qa)
			r.ReturnRead(c, trecs("e2"), nil)
		}, porcupine.Ok},
		{"an indeterminate append seen, then unseen", func(r *ConditionRecorder) {
			a := r.CallAppend(0, treq("c-1", nil, tev("e1", "registered", "email:a")), nil)
			r.ReturnIndeterminate(a)
			c := r.CallRead(1, "t", qa)
			r.ReturnRead(c, trecs("e1"), nil)
			d := r.CallRead(1, "t", qa)
			r.ReturnRead(d, nil, nil)
		}, porcupine.Illegal},
		{"an indeterminate append whose condition failed is seen", func(r *ConditionRecorder) {
			a := r.CallAppend(0, treq("c-1", nil, tev("e1", "registered", "email:a")), nil)
			r.ReturnAppend(a, nil)
			b := r.CallAppend(1, treq("c-2", qa, tev("e2", "registered", "email:a")), nil)
			r.ReturnIndeterminate(b)
			c := r.CallRead(2, "t", qa)
			r.ReturnRead(c, trecs("e1", "e2"), nil)
		}, porcupine.Illegal},
		{"a version conflict", func(r *ConditionRecorder) {
			a := r.CallAppend(0, treq("c-1", qa, tev("e1", "registered", "email:a")), nil)
			r.ReturnAppend(a, fmt.Errorf("append c-1: %w", eventstore.ErrVersionConflict))
		}, porcupine.Illegal},
		{"an unconditional append failing a condition", func(r *ConditionRecorder) {
			a := r.CallAppend(0, treq("c-1", nil, tev("e1", "registered", "email:a")), nil)
			r.ReturnAppend(a, failedCond)
		}, porcupine.Illegal},
		{"a multi-stream append seen in part", func(r *ConditionRecorder) {
			a := r.CallMulti(0, eventstore.MultiAppendRequest{Tenant: "t", Condition: &eventstore.AppendCondition{Query: qab}, Streams: []eventstore.StreamAppend{
				{Stream: "c-1", Events: []eventstore.NewEvent{tev("e1", "registered", "email:a")}},
				{Stream: "c-2", Events: []eventstore.NewEvent{tev("e2", "registered", "email:b")}},
			}}, nil)
			r.ReturnAppend(a, nil)
			c := r.CallRead(1, "t", qab)
			r.ReturnRead(c, trecs("e1"), nil)
		}, porcupine.Illegal},
		{"an untagged event in a tagged read", func(r *ConditionRecorder) {
			a := r.CallAppend(0, treq("c-1", nil, tev("e1", "registered", "email:a"), tev("e2", "registered")), nil)
			r.ReturnAppend(a, nil)
			c := r.CallRead(1, "t", qa)
			r.ReturnRead(c, trecs("e1", "e2"), nil)
		}, porcupine.Illegal},
		{"an event nobody appended", func(r *ConditionRecorder) {
			c := r.CallRead(1, "t", qa)
			r.ReturnRead(c, trecs("ghost"), nil)
		}, porcupine.Illegal},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var r ConditionRecorder
			tc.run(&r)
			check(t, ConditionModel, r.Operations(), tc.want)
		})
	}
}

// TestConditionModelPartitions: operations are judged together only when
// tags link them: a two-item query joins its tags' groups, tenants stay
// apart, and untagged appends go with their tenant's.
func TestConditionModelPartitions(t *testing.T) {
	var r ConditionRecorder
	for i, q := range []event.Query{qa, {{Tags: []string{"email:b"}}}, {{Tags: []string{"email:c"}}}} {
		c := r.CallRead(i, "t", q)
		r.ReturnRead(c, nil, nil)
	}
	c := r.CallRead(0, "u", qa)
	r.ReturnRead(c, nil, nil)
	a := r.CallAppend(0, treq("c-1", nil, tev("e1", "noted")), nil)
	r.ReturnAppend(a, nil)
	if v := check(t, ConditionModel, r.Operations(), porcupine.Ok); v.Partitions != 5 {
		t.Fatalf("%d partitions, want 5 (t's three tags, u, t's untagged append)", v.Partitions)
	}
	b := r.CallAppend(1, treq("c-2", qab, tev("e2", "registered", "email:c")), nil)
	r.ReturnAppend(b, nil)
	if v := check(t, ConditionModel, r.Operations(), porcupine.Ok); v.Partitions != 3 {
		t.Fatalf("%d partitions, want 3 (t's tags linked by one append, u, t's untagged append)", v.Partitions)
	}
}

// TestConditionOperationsFromALog: a history of guarded commands logged
// with its own timestamps, as the fault harness keeps one (each
// registration appends one event tagged with its address, on the
// condition that no event has that tag; 201 ok, 422 condition failed,
// indeterminate after every retry), and one read per tag of the log as
// found at the end.
func TestConditionOperationsFromALog(t *testing.T) {
	tag := func(addr string) string { return "email:" + addr }
	reg := func(client int, call, ret int64, id, addr string, out Outcome) ConditionalRecord {
		return ConditionalRecord{Client: client, Call: call, Return: ret, Tenant: "t",
			Events: []TaggedEvent{{ID: id, Type: "registered", Tags: []string{tag(addr)}}},
			Unless: event.Query{{Tags: []string{tag(addr)}}}, Outcome: out}
	}
	final := func(addr string, ids ...string) TaggedReadRecord {
		return TaggedReadRecord{Client: 9, Call: 100, Return: 101, Tenant: "t", Query: event.Query{{Tags: []string{tag(addr)}}}, Records: trecs(ids...)}
	}
	cases := []struct {
		name    string
		appends []ConditionalRecord
		reads   []TaggedReadRecord
		want    porcupine.CheckResult
	}{
		{"one winner per address, the others refused, indeterminate ones either way", []ConditionalRecord{
			reg(0, 1, 5, "e1", "a", OK),
			reg(1, 2, 6, "e2", "a", ConditionFailed), // concurrent with e1, placed after it
			reg(2, 7, 8, "e3", "a", ConditionFailed),
			reg(3, 3, 4, "e4", "a", Indeterminate), // did not take effect
			reg(4, 1, 2, "e5", "b", Indeterminate), // took effect
			reg(5, 9, 10, "e6", "b", ConditionFailed),
		}, []TaggedReadRecord{final("a", "e1"), final("b", "e5")}, porcupine.Ok},
		{"two registrations of one address acknowledged", []ConditionalRecord{
			reg(0, 1, 5, "e1", "a", OK),
			reg(1, 2, 6, "e2", "a", OK),
		}, []TaggedReadRecord{final("a", "e1", "e2")}, porcupine.Illegal},
		{"an acknowledged registration missing from the log", []ConditionalRecord{
			reg(0, 1, 5, "e1", "a", OK),
		}, []TaggedReadRecord{final("a")}, porcupine.Illegal},
		{"a refusal with no registration before it", []ConditionalRecord{
			reg(0, 1, 5, "e1", "a", ConditionFailed),
			reg(1, 6, 7, "e2", "a", OK),
		}, []TaggedReadRecord{final("a", "e2")}, porcupine.Illegal},
		{"a refusal before an indeterminate registration of its address was sent", []ConditionalRecord{
			reg(0, 1, 5, "e1", "a", ConditionFailed),
			reg(1, 6, 7, "e2", "a", Indeterminate),
		}, []TaggedReadRecord{final("a", "e2")}, porcupine.Illegal},
		{"a refused registration's event in the log", []ConditionalRecord{
			reg(0, 1, 5, "e1", "a", OK),
			reg(1, 6, 7, "e2", "a", ConditionFailed),
		}, []TaggedReadRecord{final("a", "e1", "e2")}, porcupine.Illegal},
		{"an event of no registration in the log", []ConditionalRecord{
			reg(0, 1, 5, "e1", "a", OK),
		}, []TaggedReadRecord{final("a", "e1", "ghost")}, porcupine.Illegal},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			check(t, ConditionModel, ConditionOperations(tc.appends, tc.reads), tc.want)
		})
	}
}
