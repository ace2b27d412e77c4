package harness

import (
	"fmt"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/google/uuid"

	"github.com/strata-es/strata/examples/orders/order"
)

// TestCheckLinearizable: porcupine accepts a history the log agrees with
// (concurrent commands, a rejection, an unresolved command that did take
// effect) and refuses one where two acknowledged commands claim the same
// version, or an acknowledged command's event is missing from the log.
func TestCheckLinearizable(t *testing.T) {
	t.Setenv("STRATA_PORCUPINE_DIR", t.TempDir())
	t0 := time.Now()
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	op := func(client int, key string, start, end int, outcome Outcome, version int64) *Op {
		return &Op{Client: client, Tenant: "t-1", Order: "o-1", Key: key, Start: ms(start), End: ms(end), Outcome: outcome, Version: version}
	}
	ev := func(key string, version int64) logEvent {
		cmd := commandID("t-1", key)
		return logEvent{Tenant: "t-1", Stream: order.StreamID("o-1"), Version: version, CommandID: cmd,
			EventID: uuid.NewSHA1(commandIDSpace, fmt.Appendf(nil, "%s/0", cmd)).String()}
	}
	for _, tc := range []struct {
		name   string
		ops    []*Op
		events []logEvent
		want   porcupine.CheckResult
	}{
		{"concurrent, rejected, unresolved but applied",
			[]*Op{op(1, "a", 0, 10, OK, 1), op(2, "b", 5, 20, OK, 2), op(3, "c", 6, 8, Fail, 0), op(4, "d", 30, 40, Info, 0)},
			[]logEvent{ev("a", 1), ev("b", 2), ev("d", 3)}, porcupine.Ok},
		{"two acknowledgements of one version",
			[]*Op{op(1, "a", 0, 10, OK, 1), op(2, "b", 5, 20, OK, 1)},
			[]logEvent{ev("a", 1), ev("b", 2)}, porcupine.Illegal},
		{"an acknowledged command's event is lost",
			[]*Op{op(1, "a", 0, 10, OK, 1), op(2, "b", 20, 30, OK, 2)},
			[]logEvent{ev("b", 1)}, porcupine.Illegal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := checkLinearizable(tc.ops, tc.events, t.Name())
			if err != nil {
				t.Fatal(err)
			}
			if v.Result != tc.want {
				t.Fatalf("porcupine says %v, want %s", v, tc.want)
			}
		})
	}
}
