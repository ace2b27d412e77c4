package linearize

import (
	"strings"

	"github.com/anishathalye/porcupine"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
)

// A history recorded elsewhere, with its own timestamps: the fault
// harness logs every command with wall-clock start and end and reads the
// streams at the end. StreamOperations turns such a log into a history
// for StreamModel, so the harness need not record through
// StreamRecorder.
//
// Timestamps must agree with real time across the whole log: take them
// in the harness's one process from its monotonic clock, e.g. as
// time.Since of one start time, not as UnixNano (the wall clock can step
// and would order a return before its call). A command sent without
// If-Match is an append with eventstore.Any: the handler retries
// conflicts, so its expectation is the stream as it finds it.

// AppendRecord is one append (or one command) of an offline history.
type AppendRecord struct {
	Client         int
	Call, Return   int64
	Tenant, Stream string
	Expected       eventstore.ExpectedVersion
	// EventIDs are the IDs of the events it appends (derivable for a
	// command from its tenant and idempotency key).
	EventIDs []string
	Outcome  Outcome
	Last     int64 // OK: the stream's version after the append
}

// ReadRecord is one whole-stream read of an offline history.
type ReadRecord struct {
	Client         int
	Call, Return   int64
	Tenant, Stream string
	Records        []event.Record
}

// StreamOperations builds the history: indeterminate appends return after
// everything else, as StreamRecorder does.
func StreamOperations(appends []AppendRecord, reads []ReadRecord) []porcupine.Operation {
	owners := map[string]int{}
	var end int64
	for i, a := range appends {
		for _, id := range a.EventIDs {
			owners[id] = i
		}
		end = max(end, a.Call, a.Return)
	}
	for _, r := range reads {
		end = max(end, r.Call, r.Return)
	}
	ops := make([]porcupine.Operation, 0, len(appends)+len(reads))
	for i, a := range appends {
		op := porcupine.Operation{
			ClientId: a.Client, Call: a.Call, Return: a.Return,
			Input:  AppendInput{Tenant: a.Tenant, Stream: a.Stream, Op: i, Expected: a.Expected, N: len(a.EventIDs)},
			Output: AppendOutput{Outcome: a.Outcome, Last: a.Last},
		}
		if a.Outcome == Indeterminate {
			op.Metadata, op.Return = Returned(a.Return), end+1
		}
		ops = append(ops, op)
	}
	for _, r := range reads {
		ops = append(ops, porcupine.Operation{
			ClientId: r.Client, Call: r.Call, Return: r.Return,
			Input:  ReadInput{Tenant: r.Tenant, Stream: r.Stream},
			Output: seen(r.Records, owners),
		})
	}
	return ops
}

// seen renders what a read saw, naming each event's append.
func seen(recs []event.Record, owners map[string]int) StreamState {
	var b strings.Builder
	var last int64
	for _, rec := range recs {
		op, ok := owners[rec.ID]
		if !ok {
			op = -1
		}
		b.WriteString(seenEntry(rec.Version, op))
		last = rec.Version
	}
	return StreamState{Version: last, Seen: b.String()}
}
