package linearize

import (
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
)

// A history recorded elsewhere, with its own timestamps: the fault
// harness logs every command with wall-clock start and end and reads the
// streams at the end. StreamOperations turns such a log into a history
// for StreamModel, ConditionOperations one of conditional appends into a
// history for ConditionModel, so the harness need not record through
// StreamRecorder or ConditionRecorder.
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

// TaggedEvent is an event of an offline conditional history: its ID
// (derivable for a command from its tenant and idempotency key), type and
// tags.
type TaggedEvent struct {
	ID, Type string
	Tags     []string
}

// ConditionalRecord is one append (or one guarded command) of an offline
// history for ConditionModel: Events, to Streams streams (0 reads as 1),
// appended on the condition that no event of the tenant matches Unless
// (nil: unconditional). That is a condition after the zero position,
// whose read saw nothing. A guarded command that admits only while
// nothing matches its guard amounts to it, whatever position its own read
// returned, because events are only ever added: it appends only if its
// read saw nothing and nothing matching was appended after it, that is
// if nothing matches at its append; it refuses only if its read saw a
// match, which then stays. Outcome is OK, ConditionFailed (the command
// answered that a matching event exists) or Indeterminate; ConditionModel
// accepts no other.
type ConditionalRecord struct {
	Client       int
	Call, Return int64
	Tenant       string
	Streams      int
	Events       []TaggedEvent
	Unless       event.Query
	Outcome      Outcome
}

// TaggedReadRecord is one ReadTagged of an offline history: the records
// Query matched (only their IDs are read), e.g. the log as found at the
// end.
type TaggedReadRecord struct {
	Client       int
	Call, Return int64
	Tenant       string
	Query        event.Query
	Records      []event.Record
}

// ConditionOperations builds the history for ConditionModel: each append
// is named by its place in appends; indeterminate appends return after
// everything else, as ConditionRecorder's do.
func ConditionOperations(appends []ConditionalRecord, reads []TaggedReadRecord) []porcupine.Operation {
	named := map[string]TagEvent{}
	var end int64
	ops := make([]porcupine.Operation, 0, len(appends)+len(reads))
	for i, a := range appends {
		in := TaggedAppendInput{Tenant: a.Tenant, Op: i, Streams: max(a.Streams, 1), N: len(a.Events)}
		if a.Unless != nil {
			in.Condition = &TagCondition{Query: slices.Clone(a.Unless), Seen: ""}
		}
		for j, e := range a.Events {
			te := newTagEvent(i, j, e.Type, e.Tags)
			named[e.ID] = te
			if len(te.Tags) > 0 {
				in.Events = append(in.Events, te)
			}
		}
		ops = append(ops, porcupine.Operation{ClientId: a.Client, Call: a.Call, Return: a.Return, Input: in, Output: a.Outcome})
		end = max(end, a.Call, a.Return)
	}
	for _, r := range reads {
		ops = append(ops, porcupine.Operation{
			ClientId: r.Client, Call: r.Call, Return: r.Return,
			Input:  TaggedReadInput{Tenant: r.Tenant, Query: slices.Clone(r.Query)},
			Output: tagSeen(r.Records, named),
		})
		end = max(end, r.Call, r.Return)
	}
	for i, op := range ops[:len(appends)] {
		if op.Output == Indeterminate {
			ops[i].Metadata, ops[i].Return = Returned(op.Return), end+1
		}
	}
	return ops
}
