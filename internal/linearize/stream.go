package linearize

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"

	"github.com/anishathalye/porcupine"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
)

// Outcome of an append.
type Outcome int

const (
	// OK: the append was acknowledged with its new last version.
	OK Outcome = iota
	// Conflict: the store answered ErrVersionConflict; nothing appended.
	Conflict
	// Indeterminate: no answer the appender can trust (timeout, cancelled
	// context, connection error, a lost acknowledgement): the events may
	// or may not be in the stream.
	Indeterminate
	// Rejected: definitely nothing appended, for a reason the model does
	// not judge (a business rule said no after the command read the
	// stream). Legal in any state; changes nothing.
	Rejected
	// ConditionFailed: the store answered ErrConditionFailed (an append
	// condition failed, not an expected version); nothing appended. Only
	// ConditionModel judges it (condition.go).
	ConditionFailed
)

func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Conflict:
		return "conflict"
	case Rejected:
		return "rejected"
	case ConditionFailed:
		return "condition failed"
	}
	return "indeterminate"
}

// AppendInput is an append to one stream. Op names the append so reads
// can say which append wrote each version they see.
type AppendInput struct {
	Tenant, Stream string
	Op             int
	Expected       eventstore.ExpectedVersion
	N              int // events appended
}

// AppendOutput is what the appender learned.
type AppendOutput struct {
	Outcome Outcome
	Last    int64 // OK: the stream's new last version
}

// ReadInput is a read of a whole stream.
type ReadInput struct{ Tenant, Stream string }

// StreamState is a stream as the model knows it: its version and, for
// every version in order, the append that wrote it ("1:a3 2:a3 3:a7 ").
// A read's output has the same shape: what the reader saw. It is a
// comparable value, so the checker's caches work on it directly.
type StreamState struct {
	Version int64
	Seen    string
}

func (s StreamState) with(op, n int) StreamState {
	var b strings.Builder
	b.WriteString(s.Seen)
	for i := 1; i <= n; i++ {
		b.WriteString(seenEntry(s.Version+int64(i), op))
	}
	return StreamState{Version: s.Version + int64(n), Seen: b.String()}
}

func seenEntry(version int64, op int) string {
	if op < 0 {
		return strconv.FormatInt(version, 10) + ":?? " // an event no recorded append wrote
	}
	return strconv.FormatInt(version, 10) + ":a" + strconv.Itoa(op) + " "
}

// StreamModel is the sequential specification of a versioned stream with
// optimistic concurrency:
//
//   - append(expected, n) -> ok(v): legal only if the stream's version
//     satisfies expected and v is that version plus n; the n events take
//     the versions after it.
//   - append(expected, n) -> conflict: legal only if the version does not
//     satisfy expected; nothing changes (Any is never a conflict).
//   - append(expected, n) -> rejected: legal in any state; nothing
//     changes (a rule said no: the model judges versions, not rules).
//   - append(expected, n) -> indeterminate: legal either way; applied if
//     expected is satisfied at the point the checker places it. This is
//     complete: an indeterminate append that took effect is placed where
//     it did, and one that did not is placed after every other operation
//     (its return is the end of the history), where its effect is seen by
//     no one.
//   - read() -> seen: legal only if seen is exactly the stream: every
//     version from 1 with no gap, each written by the append the model
//     says wrote it.
//
// It is partitioned per (tenant, stream): streams are independent.
var StreamModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		return partition(history, func(in any) string {
			switch in := in.(type) {
			case AppendInput:
				return in.Tenant + "\x00" + in.Stream
			case ReadInput:
				return in.Tenant + "\x00" + in.Stream
			}
			return ""
		})
	},
	Init: func() any { return StreamState{} },
	Step: func(state, input, output any) (bool, any) {
		s := state.(StreamState)
		switch in := input.(type) {
		case AppendInput:
			out := output.(AppendOutput)
			ok := in.Expected.Satisfied(s.Version)
			switch out.Outcome {
			case OK:
				if !ok || out.Last != s.Version+int64(in.N) {
					return false, s
				}
				return true, s.with(in.Op, in.N)
			case Conflict:
				return !ok, s
			case Rejected:
				return true, s
			default:
				if ok {
					return true, s.with(in.Op, in.N)
				}
				return true, s
			}
		case ReadInput:
			return output.(StreamState) == s, s
		}
		return false, s
	},
	Hash: func(state any) uint64 {
		s := state.(StreamState)
		h := fnv.New64a()
		h.Write([]byte(s.Seen))
		return h.Sum64()
	},
	DescribeOperation: func(input, output any) string {
		switch in := input.(type) {
		case AppendInput:
			out := output.(AppendOutput)
			res := out.Outcome.String()
			if out.Outcome == OK {
				res = fmt.Sprintf("ok v%d", out.Last)
			}
			return fmt.Sprintf("a%d: append(expected %s, %d events) -> %s", in.Op, in.Expected, in.N, res)
		case ReadInput:
			out := output.(StreamState)
			return fmt.Sprintf("read() -> v%d [%s]", out.Version, abbreviate(out.Seen))
		}
		return fmt.Sprintf("%v -> %v", input, output)
	},
	DescribeState: func(state any) string {
		s := state.(StreamState)
		return fmt.Sprintf("v%d [%s]", s.Version, abbreviate(s.Seen))
	},
}

// abbreviate keeps the first 3 and the last 8 versions of a long stream:
// a failure is usually at its end, and a description of hundreds of
// versions hides it.
func abbreviate(seen string) string {
	f := strings.Fields(seen)
	if len(f) <= 12 {
		return strings.Join(f, " ")
	}
	return strings.Join(f[:3], " ") + " … " + strings.Join(f[len(f)-8:], " ")
}

// StreamRecorder records appends and reads of streams from many
// goroutines. The zero value is ready to use.
type StreamRecorder struct {
	h      history
	mu     sync.Mutex
	owners map[string]int // event ID -> the append (its Call) that carried it
}

// CallAppend records the invocation of req; call it right before the
// store's Append. client numbers the caller (zero-based, for the
// visualisation).
func (r *StreamRecorder) CallAppend(client int, req eventstore.AppendRequest) Call {
	c := r.h.call(client, func(c Call) any {
		return AppendInput{Tenant: req.Tenant, Stream: req.Stream, Op: int(c), Expected: req.Expected, N: len(req.Events)}
	})
	r.own(c, req.Events)
	return c
}

// own records c as the writer of events. The owners are known before the
// append is invoked, so a read that sees one of its events always finds
// who wrote it.
func (r *StreamRecorder) own(c Call, events []eventstore.NewEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.owners == nil {
		r.owners = map[string]int{}
	}
	for _, e := range events {
		r.owners[e.ID] = int(c)
	}
}

// ReturnAppend records the store's answer: nil is ok, ErrVersionConflict
// a conflict, every other error indeterminate (the store may have
// committed before the error reached us).
func (r *StreamRecorder) ReturnAppend(c Call, res eventstore.AppendResult, err error) {
	switch {
	case err == nil:
		r.h.ret(c, AppendOutput{Outcome: OK, Last: res.LastVersion})
	case errors.Is(err, eventstore.ErrVersionConflict):
		r.h.ret(c, AppendOutput{Outcome: Conflict})
	default:
		r.h.indeterminate(c, AppendOutput{Outcome: Indeterminate})
	}
}

// ReturnIndeterminate records that the appender never learned the
// outcome (its acknowledgement was lost on the way).
func (r *StreamRecorder) ReturnIndeterminate(c Call) {
	r.h.indeterminate(c, AppendOutput{Outcome: Indeterminate})
}

// CallRead records the invocation of a whole-stream read (ReadStream
// after version 0).
func (r *StreamRecorder) CallRead(client int, tenant, stream string) Call {
	return r.h.call(client, func(Call) any { return ReadInput{Tenant: tenant, Stream: stream} })
}

// ReturnRead records what the read saw. A failed read is left out: it
// changed nothing and told nothing.
func (r *StreamRecorder) ReturnRead(c Call, recs []event.Record, err error) {
	if err != nil {
		r.h.forget(c)
		return
	}
	r.mu.Lock()
	out := seen(recs, r.owners)
	r.mu.Unlock()
	r.h.ret(c, out)
}

// Operations returns the recorded history for StreamModel. Operations
// still open (a goroutine that never returned) count as indeterminate.
func (r *StreamRecorder) Operations() []porcupine.Operation {
	ops, _ := r.h.operations(func(in any) any {
		if _, ok := in.(ReadInput); ok {
			return StreamState{Version: -1} // matches no state: a test must not leave reads open
		}
		return AppendOutput{Outcome: Indeterminate}
	})
	return ops
}

// Counts summarises the history.
func (r *StreamRecorder) Counts() Counts { return r.h.counts() }

// partition groups a history by key, keeping the order of operations.
func partition(history []porcupine.Operation, key func(any) string) [][]porcupine.Operation {
	idx := map[string]int{}
	var out [][]porcupine.Operation
	for _, op := range history {
		k := key(op.Input)
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], op)
	}
	return out
}
