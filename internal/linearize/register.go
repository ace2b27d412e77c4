package linearize

import (
	"fmt"
	"hash/fnv"

	"github.com/anishathalye/porcupine"
)

// Answer is what a command sent under an idempotency key got back.
type Answer int

const (
	// Answered: an outcome, executed now or replayed (a success or a
	// remembered rejection); Response holds it, rendered the way it is
	// stored (replays return the stored bytes verbatim).
	Answered Answer = iota
	// Reused: the key was recorded with another request hash (422).
	Reused
	// Unanswered: indeterminate; the command may or may not have executed
	// and recorded its outcome under the key.
	Unanswered
)

func (a Answer) String() string {
	switch a {
	case Answered:
		return "answered"
	case Reused:
		return "reused"
	}
	return "indeterminate"
}

// KeyInput is a command under (Tenant, Key) whose request hashes to Hash.
type KeyInput struct {
	Tenant, Key, Hash string
}

// KeyOutput is its answer.
type KeyOutput struct {
	Answer   Answer
	Response string
}

// KeyState is the register of one (tenant, key): empty, or the request
// hash of the first execution and its outcome. Known is false when the
// first execution was indeterminate: its outcome is whatever the next
// answer for the hash says, and fixed from then on.
type KeyState struct {
	Set      bool
	Hash     string
	Response string
	Known    bool
}

// RegisterModel is the sequential specification of the idempotency-key
// register:
//
//   - on an empty key, a command executes: its answer is recorded with
//     its hash;
//   - the same hash again is answered with the recorded outcome, byte for
//     byte (a second execution would answer another version or position);
//   - another hash is answered "reused" and changes nothing;
//   - an indeterminate command on an empty key may have recorded an
//     outcome nobody saw: the model records the hash with the outcome
//     unknown, and the first answer for that hash fixes it. As in
//     StreamModel, one that recorded nothing is placed at the end.
//
// It is partitioned per (tenant, key).
var RegisterModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		return partition(history, func(in any) string {
			k := in.(KeyInput)
			return k.Tenant + "\x00" + k.Key
		})
	},
	Init: func() any { return KeyState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(KeyState), input.(KeyInput), output.(KeyOutput)
		switch out.Answer {
		case Answered:
			switch {
			case !s.Set:
				return true, KeyState{Set: true, Hash: in.Hash, Response: out.Response, Known: true}
			case s.Hash != in.Hash:
				return false, s
			case !s.Known:
				return true, KeyState{Set: true, Hash: s.Hash, Response: out.Response, Known: true}
			}
			return out.Response == s.Response, s
		case Reused:
			return s.Set && s.Hash != in.Hash, s
		default:
			if !s.Set {
				return true, KeyState{Set: true, Hash: in.Hash}
			}
			return true, s
		}
	},
	Hash: func(state any) uint64 {
		s := state.(KeyState)
		h := fnv.New64a()
		fmt.Fprintf(h, "%t\x00%s\x00%s\x00%t", s.Set, s.Hash, s.Response, s.Known)
		return h.Sum64()
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(KeyInput), output.(KeyOutput)
		if out.Answer == Answered {
			return fmt.Sprintf("%s(%s) -> %s", in.Key, in.Hash, out.Response)
		}
		return fmt.Sprintf("%s(%s) -> %s", in.Key, in.Hash, out.Answer)
	},
	DescribeState: func(state any) string {
		s := state.(KeyState)
		switch {
		case !s.Set:
			return "empty"
		case !s.Known:
			return fmt.Sprintf("%s: (outcome not seen yet)", s.Hash)
		}
		return fmt.Sprintf("%s: %s", s.Hash, s.Response)
	},
}

// RegisterRecorder records commands sent with idempotency keys. The zero
// value is ready to use.
type RegisterRecorder struct{ h history }

// Call records the invocation of a command under (tenant, key) with
// request hash hash.
func (r *RegisterRecorder) Call(client int, tenant, key, hash string) Call {
	return r.h.call(client, func(Call) any { return KeyInput{Tenant: tenant, Key: key, Hash: hash} })
}

// Answered records an outcome (executed or replayed), rendered as stored.
func (r *RegisterRecorder) Answered(c Call, response string) {
	r.h.ret(c, KeyOutput{Answer: Answered, Response: response})
}

// Reused records the answer "key used with another request".
func (r *RegisterRecorder) Reused(c Call) { r.h.ret(c, KeyOutput{Answer: Reused}) }

// Indeterminate records that the caller got no trustworthy answer.
func (r *RegisterRecorder) Indeterminate(c Call) {
	r.h.indeterminate(c, KeyOutput{Answer: Unanswered})
}

// Operations returns the recorded history for RegisterModel.
func (r *RegisterRecorder) Operations() []porcupine.Operation {
	ops, _ := r.h.operations(func(any) any { return KeyOutput{Answer: Unanswered} })
	return ops
}

// Counts summarises the history.
func (r *RegisterRecorder) Counts() Counts { return r.h.counts() }
