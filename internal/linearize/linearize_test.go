package linearize

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
)

// The models are judged on small hand-made histories first: each legal
// one must be Ok and each broken one Illegal, so a model that accepts
// everything (or nothing) fails here before it blesses a real run.

func req(stream string, exp eventstore.ExpectedVersion, ids ...string) eventstore.AppendRequest {
	evs := make([]eventstore.NewEvent, len(ids))
	for i, id := range ids {
		evs[i] = eventstore.NewEvent{ID: id}
	}
	return eventstore.AppendRequest{Tenant: "t", Stream: stream, Expected: exp, Events: evs}
}

func recs(ids ...string) []event.Record {
	out := make([]event.Record, len(ids))
	for i, id := range ids {
		out[i] = event.Record{ID: id, Version: int64(i + 1)}
	}
	return out
}

func ok(last int64) (eventstore.AppendResult, error) {
	return eventstore.AppendResult{LastVersion: last}, nil
}

var conflict = fmt.Errorf("append s: %w", eventstore.ErrVersionConflict)

func check(t *testing.T, model porcupine.Model, ops []porcupine.Operation, want porcupine.CheckResult) Verdict {
	t.Helper()
	v, err := Check(model, ops, 10*time.Second, t.TempDir(), t.Name(), false)
	if err != nil {
		t.Fatal(err)
	}
	if v.Result != want {
		t.Fatalf("%v, want %s", v, want)
	}
	return v
}

func TestStreamModel(t *testing.T) {
	cases := []struct {
		name string
		run  func(r *StreamRecorder)
		want porcupine.CheckResult
	}{
		{"one winner per expected version", func(r *StreamRecorder) {
			a, b := r.CallAppend(0, req("s", eventstore.Exact(0), "e1")), r.CallAppend(1, req("s", eventstore.Exact(0), "e2"))
			r.ReturnAppend(b, eventstore.AppendResult{}, conflict)
			r.ReturnAppend(a, eventstore.AppendResult{LastVersion: 1}, nil)
			c := r.CallRead(2, "t", "s")
			r.ReturnRead(c, recs("e1"), nil)
		}, porcupine.Ok},
		{"two winners for one expected version", func(r *StreamRecorder) {
			a, b := r.CallAppend(0, req("s", eventstore.Exact(0), "e1")), r.CallAppend(1, req("s", eventstore.Exact(0), "e2"))
			r.ReturnAppend(a, eventstore.AppendResult{LastVersion: 1}, nil)
			r.ReturnAppend(b, eventstore.AppendResult{LastVersion: 2}, nil)
		}, porcupine.Illegal},
		{"a conflict with nothing to conflict with", func(r *StreamRecorder) {
			a := r.CallAppend(0, req("s", eventstore.Exact(0), "e1"))
			r.ReturnAppend(a, eventstore.AppendResult{}, conflict)
		}, porcupine.Illegal},
		{"an acknowledged append missing from a later read", func(r *StreamRecorder) {
			a := r.CallAppend(0, req("s", eventstore.Any, "e1", "e2"))
			r.ReturnAppend(a, eventstore.AppendResult{LastVersion: 2}, nil)
			c := r.CallRead(1, "t", "s")
			r.ReturnRead(c, nil, nil)
		}, porcupine.Illegal},
		{"a read concurrent with the append may miss it", func(r *StreamRecorder) {
			a := r.CallAppend(0, req("s", eventstore.Any, "e1"))
			c := r.CallRead(1, "t", "s")
			r.ReturnRead(c, nil, nil)
			r.ReturnAppend(a, eventstore.AppendResult{LastVersion: 1}, nil)
		}, porcupine.Ok},
		{"a wrong new version", func(r *StreamRecorder) {
			a := r.CallAppend(0, req("s", eventstore.Any, "e1"))
			r.ReturnAppend(a, eventstore.AppendResult{LastVersion: 2}, nil)
		}, porcupine.Illegal},
		{"an indeterminate append that happened", func(r *StreamRecorder) {
			a := r.CallAppend(0, req("s", eventstore.Exact(0), "e1"))
			r.ReturnIndeterminate(a)
			b := r.CallAppend(1, req("s", eventstore.Exact(0), "e2"))
			r.ReturnAppend(b, eventstore.AppendResult{}, conflict)
			c := r.CallRead(2, "t", "s")
			r.ReturnRead(c, recs("e1"), nil)
		}, porcupine.Ok},
		{"an indeterminate append that did not happen", func(r *StreamRecorder) {
			a := r.CallAppend(0, req("s", eventstore.Any, "e1"))
			r.ReturnAppend(a, eventstore.AppendResult{}, errors.New("context canceled"))
			b := r.CallAppend(1, req("s", eventstore.Exact(0), "e2"))
			r.ReturnAppend(b, eventstore.AppendResult{LastVersion: 1}, nil)
			c := r.CallRead(2, "t", "s")
			r.ReturnRead(c, recs("e2"), nil)
		}, porcupine.Ok},
		{"an indeterminate append seen, then unseen", func(r *StreamRecorder) {
			a := r.CallAppend(0, req("s", eventstore.Any, "e1"))
			r.ReturnIndeterminate(a)
			c := r.CallRead(1, "t", "s")
			r.ReturnRead(c, recs("e1"), nil)
			d := r.CallRead(1, "t", "s")
			r.ReturnRead(d, nil, nil)
		}, porcupine.Illegal},
		{"a version gap", func(r *StreamRecorder) {
			a := r.CallAppend(0, req("s", eventstore.Any, "e1", "e2"))
			r.ReturnAppend(a, eventstore.AppendResult{LastVersion: 2}, nil)
			c := r.CallRead(1, "t", "s")
			r.ReturnRead(c, []event.Record{{ID: "e1", Version: 1}, {ID: "e2", Version: 3}}, nil)
		}, porcupine.Illegal},
		{"an event nobody appended", func(r *StreamRecorder) {
			c := r.CallRead(1, "t", "s")
			r.ReturnRead(c, recs("ghost"), nil)
		}, porcupine.Illegal},
		{"streams are independent; a failed read says nothing", func(r *StreamRecorder) {
			a, b := r.CallAppend(0, req("s", eventstore.NoStream, "e1")), r.CallAppend(1, req("u", eventstore.NoStream, "e2"))
			r.ReturnAppend(a, eventstore.AppendResult{LastVersion: 1}, nil)
			r.ReturnAppend(b, eventstore.AppendResult{LastVersion: 1}, nil)
			c := r.CallRead(2, "t", "s")
			r.ReturnRead(c, nil, errors.New("connection reset"))
			d := r.CallRead(2, "t", "u")
			r.ReturnRead(d, recs("e2"), nil)
		}, porcupine.Ok},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var r StreamRecorder
			tc.run(&r)
			check(t, StreamModel, r.Operations(), tc.want)
		})
	}
}

func TestRegisterModel(t *testing.T) {
	cases := []struct {
		name string
		run  func(r *RegisterRecorder)
		want porcupine.CheckResult
	}{
		{"first outcome replayed; another hash reused", func(r *RegisterRecorder) {
			a, b := r.Call(0, "t", "k", "h1"), r.Call(1, "t", "k", "h1")
			r.Answered(b, "ok v2")
			r.Answered(a, "ok v2")
			c := r.Call(2, "t", "k", "h2")
			r.Reused(c)
		}, porcupine.Ok},
		{"executed twice", func(r *RegisterRecorder) {
			a := r.Call(0, "t", "k", "h1")
			r.Answered(a, "ok v2")
			b := r.Call(1, "t", "k", "h1")
			r.Answered(b, "ok v3")
		}, porcupine.Illegal},
		{"another hash executed", func(r *RegisterRecorder) {
			a := r.Call(0, "t", "k", "h1")
			r.Answered(a, "ok v2")
			b := r.Call(1, "t", "k", "h2")
			r.Answered(b, "ok v3")
		}, porcupine.Illegal},
		{"reused on an empty key", func(r *RegisterRecorder) {
			a := r.Call(0, "t", "k", "h1")
			r.Reused(a)
		}, porcupine.Illegal},
		{"an unseen first execution fixes the key", func(r *RegisterRecorder) {
			a := r.Call(0, "t", "k", "h1")
			r.Indeterminate(a)
			b := r.Call(1, "t", "k", "h2")
			r.Reused(b)
			c := r.Call(1, "t", "k", "h1")
			r.Answered(c, "ok v2")
			d := r.Call(1, "t", "k", "h1")
			r.Answered(d, "ok v2")
		}, porcupine.Ok},
		{"an unseen first execution, answered two ways", func(r *RegisterRecorder) {
			a := r.Call(0, "t", "k", "h1")
			r.Indeterminate(a)
			c := r.Call(1, "t", "k", "h1")
			r.Answered(c, "ok v2")
			d := r.Call(1, "t", "k", "h1")
			r.Answered(d, "ok v3")
		}, porcupine.Illegal},
		{"keys are per tenant", func(r *RegisterRecorder) {
			a := r.Call(0, "t", "k", "h1")
			r.Answered(a, "ok v2")
			b := r.Call(1, "u", "k", "h2")
			r.Answered(b, "ok v7")
		}, porcupine.Ok},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var r RegisterRecorder
			tc.run(&r)
			check(t, RegisterModel, r.Operations(), tc.want)
		})
	}
}

// TestIllegalHistoryIsVisualised: a failing check leaves porcupine's HTML
// behind and names it.
func TestIllegalHistoryIsVisualised(t *testing.T) {
	var r StreamRecorder
	a, b := r.CallAppend(0, req("s", eventstore.Exact(0), "e1")), r.CallAppend(1, req("s", eventstore.Exact(0), "e2"))
	r.ReturnAppend(a, eventstore.AppendResult{LastVersion: 1}, nil)
	r.ReturnAppend(b, eventstore.AppendResult{LastVersion: 2}, nil)
	v := check(t, StreamModel, r.Operations(), porcupine.Illegal)
	t.Log(v)
	if !strings.Contains(v.Explain, "a1: append(expected 0, 1 events) -> ok v2") {
		t.Fatalf("the explanation does not name the operation that cannot be placed: %s", v.Explain)
	}
	if v.Visualization == "" || !strings.Contains(v.String(), v.Visualization) {
		t.Fatalf("verdict %v names no visualisation", v)
	}
	html, err := os.ReadFile(v.Visualization)
	if err != nil {
		t.Fatal(err)
	}
	// The data is embedded as JSON, which escapes ">".
	want, _ := json.Marshal("a1: append(expected 0, 1 events) -> ok v2")
	if !strings.Contains(string(html), strings.Trim(string(want), `"`)) {
		t.Fatalf("visualisation %s does not show the operations", v.Visualization)
	}
}

// TestIndeterminateReturnsAtTheEnd: an append whose caller gave up can
// still commit afterwards (the driver's cancel request is best effort:
// it may arrive after the server has committed, or never, across a
// partition). Recorded with its return at the end of the history, a read
// that misses it and a later read that sees it are linearizable; with its
// return where its caller gave up, porcupine would call the same run
// illegal. Returned keeps the caller's moment, so this can be shown.
func TestIndeterminateReturnsAtTheEnd(t *testing.T) {
	var r StreamRecorder
	a := r.CallAppend(0, req("s", eventstore.Any, "e1"))
	r.ReturnAppend(a, eventstore.AppendResult{}, errors.New("context canceled"))
	c := r.CallRead(1, "t", "s")
	r.ReturnRead(c, nil, nil)
	d := r.CallRead(1, "t", "s")
	r.ReturnRead(d, recs("e1"), nil)
	ops := r.Operations()
	check(t, StreamModel, ops, porcupine.Ok)
	naive := make([]porcupine.Operation, len(ops))
	copy(naive, ops)
	moved := 0
	for i, op := range naive {
		if ret, ok := op.Metadata.(Returned); ok {
			naive[i].Return = int64(ret)
			moved++
		}
	}
	if moved != 1 {
		t.Fatalf("%d operations carry their caller's return, want 1", moved)
	}
	check(t, StreamModel, naive, porcupine.Illegal)
}

// TestStreamOperationsFromALog: a history logged with its own timestamps,
// as the fault harness keeps one (commands without If-Match are appends
// with Any; rejections appended nothing; a final read of the stream).
func TestStreamOperationsFromALog(t *testing.T) {
	cmd := func(client int, call, ret int64, id string, out Outcome, last int64) AppendRecord {
		return AppendRecord{Client: client, Call: call, Return: ret, Tenant: "t", Stream: "order-1", Expected: eventstore.Any, EventIDs: []string{id}, Outcome: out, Last: last}
	}
	final := func(ids ...string) ReadRecord {
		return ReadRecord{Client: 9, Call: 100, Return: 101, Tenant: "t", Stream: "order-1", Records: recs(ids...)}
	}
	cases := []struct {
		name    string
		appends []AppendRecord
		read    ReadRecord
		want    porcupine.CheckResult
	}{
		{"ok, rejected and indeterminate commands", []AppendRecord{
			cmd(0, 1, 5, "e1", OK, 1),
			cmd(1, 2, 6, "e2", Rejected, 0),
			cmd(2, 3, 7, "e3", Indeterminate, 0), // committed
			cmd(3, 8, 9, "e4", OK, 3),
			cmd(4, 10, 11, "e5", Indeterminate, 0), // did not
		}, final("e1", "e3", "e4"), porcupine.Ok},
		{"two commands given one version", []AppendRecord{
			cmd(0, 1, 5, "e1", OK, 1),
			cmd(1, 2, 6, "e2", OK, 1),
		}, final("e1", "e2"), porcupine.Illegal},
		{"an acknowledged command missing from the stream", []AppendRecord{
			cmd(0, 1, 5, "e1", OK, 1),
			cmd(1, 6, 7, "e2", OK, 2),
		}, final("e1"), porcupine.Illegal},
		{"a rejected command's event in the stream", []AppendRecord{
			cmd(0, 1, 5, "e1", Rejected, 0),
		}, final("e1"), porcupine.Illegal},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			check(t, StreamModel, StreamOperations(tc.appends, []ReadRecord{tc.read}), tc.want)
		})
	}
}
