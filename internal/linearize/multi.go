package linearize

import (
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"

	"github.com/strata-es/strata/eventstore"
)

// Multi-stream appends (issue 31): one operation appends to several
// streams of a tenant, all or nothing. Their histories are judged per
// tenant, whose streams are one state: an operation that spans streams
// ties their histories together.

// PartInput is one stream's part of a multi-stream append.
type PartInput struct {
	Stream   string
	Expected eventstore.ExpectedVersion
	N        int
}

// MultiInput is a multi-stream append.
type MultiInput struct {
	Tenant string
	Op     int
	Parts  []PartInput
}

// MultiOutput is what its appender learned: with OK, each part's new
// last version, in the parts' order.
type MultiOutput struct {
	Outcome Outcome
	Lasts   []int64
}

// Streams is a tenant's streams as the model knows them.
type Streams map[string]StreamState

// MultiStreamModel is the sequential specification of a tenant's streams
// under single- and multi-stream appends with optimistic concurrency:
//
//   - a multi-stream append is legal as ok only if every part's
//     expectation holds and each part's answered version is its stream's
//     plus its events; all parts then take effect, together;
//   - as conflict only if some part's expectation fails; nothing changes;
//   - indeterminate: all parts take effect where the checker places it if
//     every expectation holds there, else nothing does; rejected changes
//     nothing;
//   - single appends and reads as in StreamModel, on their stream.
//
// It is partitioned per tenant.
var MultiStreamModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		return partition(history, func(in any) string {
			switch in := in.(type) {
			case MultiInput:
				return in.Tenant
			case AppendInput:
				return in.Tenant
			case ReadInput:
				return in.Tenant
			}
			return ""
		})
	},
	Init: func() any { return Streams{} },
	Step: func(state, input, output any) (bool, any) {
		s := state.(Streams)
		switch in := input.(type) {
		case MultiInput:
			out := output.(MultiOutput)
			ok := true
			for _, p := range in.Parts {
				ok = ok && p.Expected.Satisfied(s[p.Stream].Version)
			}
			apply := func() Streams {
				next := maps.Clone(s)
				for _, p := range in.Parts {
					next[p.Stream] = next[p.Stream].with(in.Op, p.N)
				}
				return next
			}
			switch out.Outcome {
			case OK:
				if !ok || len(out.Lasts) != len(in.Parts) {
					return false, s
				}
				for i, p := range in.Parts {
					if out.Lasts[i] != s[p.Stream].Version+int64(p.N) {
						return false, s
					}
				}
				return true, apply()
			case Conflict:
				return !ok, s
			case Rejected:
				return true, s
			default:
				if ok {
					return true, apply()
				}
				return true, s
			}
		case AppendInput:
			legal, next := StreamModel.Step(s[in.Stream], input, output)
			if !legal {
				return false, s
			}
			if n := next.(StreamState); n != s[in.Stream] {
				c := maps.Clone(s)
				c[in.Stream] = n
				return true, c
			}
			return true, s
		case ReadInput:
			return output.(StreamState) == s[in.Stream], s
		}
		return false, s
	},
	Equal: func(a, b any) bool { return maps.Equal(a.(Streams), b.(Streams)) },
	Hash: func(state any) uint64 {
		s := state.(Streams)
		h := fnv.New64a()
		for _, k := range slices.Sorted(maps.Keys(s)) {
			if s[k].Version == 0 {
				continue // an empty stream is no stream
			}
			h.Write([]byte(k + "\x00" + s[k].Seen + "\x00"))
		}
		return h.Sum64()
	},
	DescribeOperation: func(input, output any) string {
		if in, ok := input.(MultiInput); ok {
			out := output.(MultiOutput)
			parts := make([]string, len(in.Parts))
			for i, p := range in.Parts {
				parts[i] = fmt.Sprintf("%s@%s+%d", p.Stream, p.Expected, p.N)
			}
			res := out.Outcome.String()
			if out.Outcome == OK {
				res = fmt.Sprintf("ok %v", out.Lasts)
			}
			return fmt.Sprintf("a%d: append(%s) -> %s", in.Op, strings.Join(parts, ", "), res)
		}
		if in, ok := input.(ReadInput); ok {
			return in.Stream + ": " + StreamModel.DescribeOperation(input, output)
		}
		if in, ok := input.(AppendInput); ok {
			return in.Stream + ": " + StreamModel.DescribeOperation(input, output)
		}
		return fmt.Sprintf("%v -> %v", input, output)
	},
	DescribeState: func(state any) string {
		s := state.(Streams)
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(s)) {
			parts = append(parts, k+" "+StreamModel.DescribeState(s[k]))
		}
		return strings.Join(parts, "; ")
	},
}

// CallMulti records the invocation of a multi-stream append (see
// CallAppend).
func (r *StreamRecorder) CallMulti(client int, req eventstore.MultiAppendRequest) Call {
	c := r.h.call(client, func(c Call) any {
		in := MultiInput{Tenant: req.Tenant, Op: int(c)}
		for _, p := range req.Streams {
			in.Parts = append(in.Parts, PartInput{Stream: p.Stream, Expected: p.Expected, N: len(p.Events)})
		}
		return in
	})
	for _, p := range req.Streams {
		r.own(c, p.Events)
	}
	return c
}

// ReturnMulti records the store's answer to a multi-stream append.
func (r *StreamRecorder) ReturnMulti(c Call, res eventstore.MultiAppendResult, err error) {
	switch {
	case err == nil:
		lasts := make([]int64, len(res.Streams))
		for i, s := range res.Streams {
			lasts[i] = s.LastVersion
		}
		r.h.ret(c, MultiOutput{Outcome: OK, Lasts: lasts})
	case errors.Is(err, eventstore.ErrVersionConflict):
		r.h.ret(c, MultiOutput{Outcome: Conflict})
	default:
		r.h.indeterminate(c, MultiOutput{Outcome: Indeterminate})
	}
}

// ReturnMultiIndeterminate records that a multi-stream append's
// appender never learned the outcome.
func (r *StreamRecorder) ReturnMultiIndeterminate(c Call) {
	r.h.indeterminate(c, MultiOutput{Outcome: Indeterminate})
}

// MultiOperations returns the recorded history for MultiStreamModel.
func (r *StreamRecorder) MultiOperations() []porcupine.Operation {
	ops, _ := r.h.operations(func(in any) any {
		switch in.(type) {
		case ReadInput:
			return StreamState{Version: -1}
		case MultiInput:
			return MultiOutput{Outcome: Indeterminate}
		}
		return AppendOutput{Outcome: Indeterminate}
	})
	return ops
}
