package harness

import (
	"fmt"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/internal/linearize"
)

// linearizeTimeout bounds porcupine's check of one load run's history.
const linearizeTimeout = time.Minute

// checkLinearizable hands the load's history to porcupine (an independent
// checker, issue 19): every command is an append to its aggregate's
// stream, an order's or a registration's customer's (eventstore.Any:
// without If-Match strata retries conflicts), acknowledged
// with the version it answered, rejected (nothing appended, whatever the
// state), or indeterminate after every retry; the log as read at the end
// is one read of each stream, naming which command wrote each version. The
// per-stream histories must be linearizable against a versioned stream
// with optimistic concurrency. Wall-clock times of the harness's one
// process are monotonic (time.Time's monotonic reading), as the model
// needs.
func checkLinearizable(ops []*Op, events []logEvent, name string) (linearize.Verdict, error) {
	if len(ops) == 0 {
		return linearize.Verdict{Result: porcupine.Ok}, nil
	}
	t0 := ops[0].Start
	for _, op := range ops {
		if op.Start.Before(t0) {
			t0 = op.Start
		}
	}
	at := func(t time.Time) int64 { return t.Sub(t0).Nanoseconds() }
	var end int64
	appends := make([]linearize.AppendRecord, 0, len(ops))
	for _, op := range ops {
		a := linearize.AppendRecord{Client: op.Client, Call: at(op.Start), Return: at(op.End),
			Tenant: op.Tenant, Stream: op.streamID(), Expected: eventstore.Any}
		cmd := commandID(op.Tenant, op.Key)
		for i := range eventsPerCommand {
			a.EventIDs = append(a.EventIDs, eventID(cmd, i))
		}
		switch op.Outcome {
		case OK:
			a.Outcome, a.Last = linearize.OK, op.Version
		case Fail:
			a.Outcome = linearize.Rejected
		default:
			a.Outcome = linearize.Indeterminate
		}
		appends = append(appends, a)
		end = max(end, a.Return)
	}
	type key struct{ tenant, stream string }
	streams := map[key][]event.Record{}
	for _, ev := range events {
		k := key{ev.Tenant, ev.Stream}
		streams[k] = append(streams[k], event.Record{ID: ev.EventID, Tenant: ev.Tenant, Stream: ev.Stream, Version: ev.Version, Position: ev.Position})
	}
	for _, a := range appends { // a stream no command reached still gets its (empty) read
		if k := (key{a.Tenant, a.Stream}); streams[k] == nil {
			streams[k] = []event.Record{}
		}
	}
	reads := make([]linearize.ReadRecord, 0, len(streams))
	for k, recs := range streams {
		reads = append(reads, linearize.ReadRecord{Client: -1, Call: end + 1, Return: end + 2, Tenant: k.tenant, Stream: k.stream, Records: recs})
	}
	return linearize.Check(linearize.StreamModel, linearize.StreamOperations(appends, reads), linearizeTimeout, "", name, false)
}

// addLinearizableCriterion records porcupine's verdict on the history.
func addLinearizableCriterion(r *Result, v linearize.Verdict, err error) {
	if err != nil {
		r.note("porcupine: %v", err)
	}
	r.check("per-stream histories linearizable (porcupine, versioned stream with optimistic concurrency)", "Ok",
		fmt.Sprintf("%s (%d operations, %d streams, %s)", v.Result, v.Operations, v.Partitions, v.Elapsed.Round(time.Millisecond)),
		err == nil && v.Result == porcupine.Ok)
	if v.Result != porcupine.Ok {
		r.note("%v", v)
	}
}
