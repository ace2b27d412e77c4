package harness

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/strata-es/strata/examples/customers/customer"
)

// TestCheckConditions: porcupine accepts registrations the log agrees
// with (one created per address, the others refused as taken, an
// unresolved one that did take effect) and refuses two holders of one
// address, a created registration missing from the log, and an answer
// that is neither created nor taken. Order commands are not its concern.
func TestCheckConditions(t *testing.T) {
	t.Setenv("STRATA_PORCUPINE_DIR", t.TempDir())
	t0 := time.Now()
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	reg := func(client int, key, email string, start, end int, outcome Outcome, status int) *Op {
		return &Op{Client: client, Tenant: "t-1", Customer: "cu-" + key, Email: email, Kind: registerKind, Key: key,
			Start: ms(start), End: ms(end), Outcome: outcome, Status: status}
	}
	ev := func(key, email string) logEvent {
		return logEvent{Tenant: "t-1", Stream: customer.StreamID("cu-" + key), Version: 1, CommandID: commandID("t-1", key),
			EventID: eventID(commandID("t-1", key), 0), Type: customer.TypeRegistered, Tags: []string{customer.EmailTag(email)}}
	}
	order := &Op{Client: 9, Tenant: "t-1", Order: "o-1", Kind: "create", Key: "k", Start: ms(0), End: ms(1), Outcome: OK, Version: 1}
	const a, b = "a@t.example", "b@t.example"
	for _, tc := range []struct {
		name   string
		ops    []*Op
		events []logEvent
		want   porcupine.CheckResult
	}{
		{"one holder per address", []*Op{order,
			reg(1, "r1", a, 0, 10, OK, 201), reg(2, "r2", a, 5, 20, Fail, 422), reg(3, "r3", b, 6, 8, Info, 0), reg(4, "r4", b, 30, 40, Fail, 422)},
			[]logEvent{ev("r1", a), ev("r3", b)}, porcupine.Ok},
		{"two holders of one address", []*Op{reg(1, "r1", a, 0, 10, OK, 201), reg(2, "r2", a, 5, 20, OK, 201)},
			[]logEvent{ev("r1", a), ev("r2", a)}, porcupine.Illegal},
		{"a created registration missing from the log", []*Op{reg(1, "r1", a, 0, 10, OK, 201)},
			nil, porcupine.Illegal},
		{"an answer that is neither created nor taken", []*Op{reg(1, "r1", a, 0, 10, OK, 201), reg(2, "r2", a, 20, 30, Fail, 404)},
			[]logEvent{ev("r1", a)}, porcupine.Illegal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := checkConditions(tc.ops, tc.events, t.Name())
			if err != nil {
				t.Fatal(err)
			}
			if v.Result != tc.want {
				t.Fatalf("porcupine says %v, want %s", v.Verdict, tc.want)
			}
			regs := 0
			for _, op := range tc.ops {
				if op.Kind == registerKind {
					regs++
				}
			}
			if v.Registrations != regs || v.Operations != regs+v.Addresses {
				t.Fatalf("%d operations of %d registrations on %d addresses, want %d registrations and a read per address",
					v.Operations, v.Registrations, v.Addresses, regs)
			}
		})
	}
}
