package harness

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/strata-es/strata/commands"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/ordercmd"
)

// captureStore records appends; just enough of a store for one command.
type captureStore struct {
	appended []eventstore.AppendRequest
}

func (s *captureStore) Append(_ context.Context, req eventstore.AppendRequest) (eventstore.AppendResult, error) {
	s.appended = append(s.appended, req)
	return eventstore.AppendResult{FirstVersion: 1, LastVersion: int64(len(req.Events))}, nil
}

func (s *captureStore) ReadStream(context.Context, string, string, int64) ([]event.Record, error) {
	return nil, nil
}

func (s *captureStore) LookupIdempotency(context.Context, string, string) (eventstore.IdempotencyRecord, bool, error) {
	return eventstore.IdempotencyRecord{}, false, nil
}

func (s *captureStore) SaveIdempotency(context.Context, string, string, string, []byte) error {
	return nil
}

// TestCommandIDMatchesStrata: the checker finds a command's events by the
// command ID strata stamps on them; its derivation must be strata's.
func TestCommandIDMatchesStrata(t *testing.T) {
	t.Parallel()
	store := &captureStore{}
	h, err := commands.NewHandler(ordercmd.Aggregate, store, store, commands.Config{Registry: order.Registry})
	if err != nil {
		t.Fatal(err)
	}
	ctx := domain.NewContext(context.Background(), "r1-t3")
	_, err = h.Handle(ctx, ordercmd.CreateOrder{OrderID: "o1", CustomerID: "c1", Currency: "EUR"}, commands.Options{
		Idempotency: &commands.Idempotency{Key: "c2-k17", RequestHash: "h",
			Respond: func(commands.Result, error) ([]byte, error) { return []byte("{}"), nil }},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(store.appended) != 1 || len(store.appended[0].Events) != eventsPerCommand {
		t.Fatalf("appends %+v: want one append of %d event(s)", store.appended, eventsPerCommand)
	}
	got := store.appended[0].Events[0].Metadata.CommandID
	if want := commandID("r1-t3", "c2-k17"); got != want {
		t.Fatalf("strata stamps command id %s, the checker derives %s: update commandIDSpace", got, want)
	}
}

func ev(tenant, orderID string, version int64, cmd string) logEvent {
	return logEvent{Tenant: tenant, Stream: order.StreamID(orderID), Version: version, CommandID: cmd,
		Position: event.Position{Major: 100, Minor: uint64(version)}}
}

// TestCheckHistory feeds the checker histories with every kind of
// violation: the checker must be able to fail.
func TestCheckHistory(t *testing.T) {
	t.Parallel()
	op := func(key string, outcome Outcome, version int64, infoFirst bool) *Op {
		o := &Op{Tenant: "t", Order: "o1", Kind: "add_line", Key: key, Outcome: outcome, Version: version}
		if infoFirst {
			o.Attempts = append(o.Attempts, Attempt{Outcome: Info, Err: "connection dropped"})
		}
		o.Attempts = append(o.Attempts, Attempt{Outcome: outcome})
		return o
	}
	id := func(key string) string { return commandID("t", key) }
	tests := []struct {
		name   string
		ops    []*Op
		events []logEvent
		check  func(v historyVerdict) bool
	}{
		{"clean", []*Op{op("k1", OK, 1, false), op("k2", Fail, 0, false), op("k3", OK, 2, true)},
			[]logEvent{ev("t", "o1", 1, id("k1")), ev("t", "o1", 2, id("k3"))},
			func(v historyVerdict) bool {
				return v.Lost+v.Duplicated+v.Phantom+v.Gaps+v.RejectedWithEvents+v.WrongVersion == 0 &&
					v.Indeterminate == 1 && v.ResolvedAfterInfo == 1
			}},
		{"lost", []*Op{op("k1", OK, 1, false), op("k2", OK, 2, false)},
			[]logEvent{ev("t", "o1", 1, id("k1"))},
			func(v historyVerdict) bool { return v.Lost == 1 }},
		{"duplicated", []*Op{op("k1", OK, 2, true)},
			[]logEvent{ev("t", "o1", 1, id("k1")), ev("t", "o1", 2, id("k1"))},
			func(v historyVerdict) bool { return v.Duplicated == 1 }},
		{"rejected with events", []*Op{op("k1", Fail, 0, false)},
			[]logEvent{ev("t", "o1", 1, id("k1"))},
			func(v historyVerdict) bool { return v.RejectedWithEvents == 1 }},
		{"phantom", []*Op{op("k1", OK, 1, false)},
			[]logEvent{ev("t", "o1", 1, id("k1")), ev("t", "o1", 2, "0000")},
			func(v historyVerdict) bool { return v.Phantom == 1 }},
		{"gap", []*Op{op("k1", OK, 1, false), op("k2", OK, 3, false)},
			[]logEvent{ev("t", "o1", 1, id("k1")), ev("t", "o1", 3, id("k2"))},
			func(v historyVerdict) bool { return v.Gaps == 1 }},
		{"wrong version", []*Op{op("k1", OK, 2, false)},
			[]logEvent{ev("t", "o1", 1, id("k1"))},
			func(v historyVerdict) bool { return v.WrongVersion == 1 }},
		{"other tenant's stream", []*Op{op("k1", OK, 1, false)},
			[]logEvent{ev("u", "o1", 1, id("k1"))},
			func(v historyVerdict) bool { return v.WrongStream == 1 }},
		{"unresolved applied once is allowed", []*Op{op("k1", Info, 0, true)},
			[]logEvent{ev("t", "o1", 1, id("k1"))},
			func(v historyVerdict) bool {
				return v.UnresolvedApplied == 1 && v.Duplicated == 0 && v.ResolvedAfterInfo == 0
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if v := checkHistory(tt.ops, tt.events); !tt.check(v) {
				t.Fatalf("verdict %+v", v)
			}
		})
	}
}

func TestResultVerdict(t *testing.T) {
	t.Parallel()
	r := &Result{}
	if r.Passed() {
		t.Fatal("a scenario without criteria passed")
	}
	r.zero("x", 0)
	r.within("y", time.Second, 500*time.Millisecond, true)
	if !r.Passed() {
		t.Fatalf("%+v", r.Criteria)
	}
	r.within("z", time.Second, 0, false)
	if r.Passed() {
		t.Fatal("an event that never happened passed")
	}
}

func TestForeignRow(t *testing.T) {
	t.Parallel()
	f := &tenancyFixture{a: "ten-a", b: "ten-b", marker: "cnryb00beef", bBodyOrders: []string{"cnryb00beef-b1"}}
	f.markerRE = markerPattern(f.marker)
	for _, tt := range []struct {
		row     string
		foreign bool
	}{
		{`{"n": 3, "tenant_id": "ten-a"}`, false},
		{`{"n": 0, "tenant_max": null, "tenant_min": null}`, false},
		{`{"tenant_id": "ten-b"}`, true},
		{`{"k": "o-1", "tenant_a": "ten-a", "tenant_b": "ten-b"}`, true},
		{`{"customer_id": "cnryb00beef-c2", "tenant_id": "ten-a"}`, true},
		{`{"order_id": "cnryb00beef-b1", "tenant_id": "ten-a"}`, false}, // A created it with that ID
		{`{"order_id": "cnryb00beef-b12", "tenant_id": "ten-a"}`, true},
	} {
		if got := f.foreignRow(tt.row); got != tt.foreign {
			t.Errorf("foreignRow(%s) = %v", tt.row, got)
		}
	}
	if m := f.leakedMarker(`{"customer_id":"cnryb00beef-c2"}`, "GET /v1/customers/cnryb00beef-c2/summary"); m != "" {
		t.Errorf("an echo of the request counted as a leak: %s", m)
	}
	if m := f.leakedMarker(`{"customer_id":"cnryb00beef-c2"}`, "GET /v1/orders"); m != "cnryb00beef-c2" {
		t.Errorf("leak not found: %q", m)
	}
	if got := f.twin("cnryb00beef-o3"); got != "cnryz00beef-o3" || len(got) != len("cnryb00beef-o3") {
		t.Errorf("twin = %s", got)
	}
}

func TestConfigs(t *testing.T) {
	t.Parallel()
	for _, c := range []Config{Full(), Short()} {
		c.Strata = "strata"
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	bad := Full()
	bad.Scenarios = []string{"R99"}
	if err := bad.Validate(); err == nil {
		t.Fatal(fmt.Sprint("accepted ", bad.Scenarios, " without a binary"))
	}
}
