package harness

import (
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/examples/customers/customer"
	"github.com/strata-es/strata/internal/linearize"
)

// conditionVerdict is porcupine's verdict on the registrations, and what
// they came to.
type conditionVerdict struct {
	linearize.Verdict
	// Registrations by outcome: Created (201), Taken (422: the address
	// was someone's, the condition failed), Unresolved (indeterminate
	// after every retry), Other (any other answer, which the model never
	// accepts); Addresses raced for. Retried counts those that met a
	// fault (an indeterminate attempt, retried with their key).
	Registrations, Created, Taken, Unresolved, Other, Addresses, Retried int
}

// checkConditions hands the load's registrations to porcupine as a
// history of conditional appends (linearize.ConditionModel): each appends
// one customer.registered event tagged with its address on the condition
// that no event of the tenant has that tag, and answered it appended
// (201), the condition failed (422), or nothing certain after every
// retry. The log as read at the end is one read per address of the
// events with its tag, naming the registration that wrote each. At most
// one registration per address may win, every 201 must be in the log,
// and every 422 must come after some registration of its address took
// effect. Times are the harness's monotonic clock, as in
// checkLinearizable.
func checkConditions(ops []*Op, events []logEvent, name string) (conditionVerdict, error) {
	var v conditionVerdict
	var regs []*Op
	for _, op := range ops {
		if op.Kind == registerKind {
			regs = append(regs, op)
		}
	}
	if len(regs) == 0 {
		v.Result = porcupine.Ok
		return v, nil
	}
	t0 := regs[0].Start
	for _, op := range regs {
		if op.Start.Before(t0) {
			t0 = op.Start
		}
	}
	at := func(t time.Time) int64 { return t.Sub(t0).Nanoseconds() }
	type address struct{ tenant, tag string }
	var addresses []address
	seen := map[address]bool{}
	var end int64
	appends := make([]linearize.ConditionalRecord, 0, len(regs))
	for _, op := range regs {
		tag := customer.EmailTag(op.Email)
		a := linearize.ConditionalRecord{Client: op.Client, Call: at(op.Start), Return: at(op.End), Tenant: op.Tenant,
			Events: []linearize.TaggedEvent{{ID: eventID(commandID(op.Tenant, op.Key), 0), Type: customer.TypeRegistered, Tags: []string{tag}}},
			Unless: customer.EmailGuard(op.Email)}
		v.Registrations++
		if op.hadInfo() {
			v.Retried++
		}
		switch {
		case op.Outcome == OK:
			a.Outcome = linearize.OK
			v.Created++
		case op.Outcome == Fail && op.Status == http.StatusUnprocessableEntity:
			a.Outcome = linearize.ConditionFailed
			v.Taken++
		case op.Outcome == Fail:
			// A decision other than "taken" (a 404, a 409): the model
			// has no such answer, and says so.
			a.Outcome = linearize.Rejected
			v.Other++
		default:
			a.Outcome = linearize.Indeterminate
			v.Unresolved++
		}
		appends = append(appends, a)
		end = max(end, a.Return)
		if k := (address{op.Tenant, tag}); !seen[k] {
			seen[k] = true
			addresses = append(addresses, k)
		}
	}
	v.Addresses = len(addresses)
	reads := make([]linearize.TaggedReadRecord, 0, len(addresses))
	for _, k := range addresses {
		var recs []event.Record
		for _, ev := range events {
			if ev.Tenant == k.tenant && slices.Contains(ev.Tags, k.tag) {
				recs = append(recs, event.Record{ID: ev.EventID, Tenant: ev.Tenant, Stream: ev.Stream, Version: ev.Version, Position: ev.Position})
			}
		}
		reads = append(reads, linearize.TaggedReadRecord{Client: -1, Call: end + 1, Return: end + 2, Tenant: k.tenant,
			Query: event.Query{{Tags: []string{k.tag}}}, Records: recs})
	}
	var err error
	v.Verdict, err = linearize.Check(linearize.ConditionModel, linearize.ConditionOperations(appends, reads), linearizeTimeout, "", name, false)
	return v, err
}

// addConditionCriteria records porcupine's verdict on the registrations,
// and that they raced: some created, some refused (a history of
// registrations that all failed, or never met, proves nothing).
func addConditionCriteria(r *Result, v conditionVerdict, err error) {
	if err != nil {
		r.note("porcupine: %v", err)
	}
	r.check("conditional appends linearizable (porcupine, registrations racing for an address: one holder each)", "Ok",
		fmt.Sprintf("%s (%d operations, %d partitions, %s)", v.Result, v.Operations, v.Partitions, v.Elapsed.Round(time.Millisecond)),
		err == nil && v.Result == porcupine.Ok)
	if v.Result != porcupine.Ok {
		r.note("%v", v.Verdict)
	}
	r.check("registrations created and refused as taken", "> 0 each",
		fmt.Sprintf("%d created, %d taken", v.Created, v.Taken), v.Created > 0 && v.Taken > 0)
	r.note("registrations: %d on %d addresses (%d created, %d refused as taken, %d unresolved, %d other answers); %d met a fault and were retried with their key",
		v.Registrations, v.Addresses, v.Created, v.Taken, v.Unresolved, v.Other, v.Retried)
}
