package harness

import (
	"testing"
	"time"
)

func TestRestoreConfig(t *testing.T) {
	t.Parallel()
	if err := DefaultRestore().validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []func(*RestoreConfig){
		func(c *RestoreConfig) { c.Processes = 0 },
		func(c *RestoreConfig) { c.TargetAt = c.BackupAt },
		func(c *RestoreConfig) { c.TargetAt = 1 },
		func(c *RestoreConfig) { c.ArchiveTimeout = 0 },
	} {
		c := DefaultRestore()
		bad(&c)
		if c.validate() == nil {
			t.Errorf("%+v validates", c)
		}
	}
}

// TestCheckRestoredHistory: the restore's verdict sees a command
// acknowledged before the target that is missing, one begun after it that
// is present, and leaves those in flight across it alone.
func TestCheckRestoredHistory(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	rpBegan, rpDone := t0.Add(10*time.Second), t0.Add(10*time.Second+time.Millisecond)
	op := func(key string, outcome Outcome, version int64, start, end time.Duration) *Op {
		return &Op{Tenant: "t", Order: "o1", Kind: "add_line", Key: key, Outcome: outcome, Version: version,
			Start: t0.Add(start), End: t0.Add(end)}
	}
	id := func(key string) string { return commandID("t", key) }
	tests := []struct {
		name   string
		ops    []*Op
		events []logEvent
		check  func(v restoredVerdict) bool
	}{
		{"clean", []*Op{op("k1", OK, 1, 0, time.Second), op("k2", OK, 2, 9*time.Second, 11*time.Second), op("k3", OK, 3, 12*time.Second, 13*time.Second)},
			[]logEvent{ev("t", "o1", 1, id("k1")), ev("t", "o1", 2, id("k2"))},
			func(v restoredVerdict) bool {
				return v.lost+v.after+v.duplicated+v.phantoms+v.gaps+v.wrongVersion == 0 && v.before == 1 && v.afterOps == 1 && v.straddling == 1
			}},
		{"in flight across the target, absent", []*Op{op("k1", OK, 1, 9*time.Second, 11*time.Second)}, nil,
			func(v restoredVerdict) bool { return v.lost == 0 && v.straddling == 1 }},
		{"acknowledged before, lost", []*Op{op("k1", OK, 1, 0, time.Second), op("k2", OK, 2, 2*time.Second, 3*time.Second)},
			[]logEvent{ev("t", "o1", 1, id("k1"))},
			func(v restoredVerdict) bool { return v.lost == 1 }},
		{"begun after, restored", []*Op{op("k1", OK, 1, 0, time.Second), op("k2", OK, 2, 12*time.Second, 13*time.Second)},
			[]logEvent{ev("t", "o1", 1, id("k1")), ev("t", "o1", 2, id("k2"))},
			func(v restoredVerdict) bool { return v.after == 1 }},
		{"rejected, restored", []*Op{op("k1", Fail, 0, 0, time.Second)},
			[]logEvent{ev("t", "o1", 1, id("k1"))},
			func(v restoredVerdict) bool { return v.rejectedWithEvents == 1 }},
		{"seeded events are counted, not phantoms", []*Op{op("k1", OK, 1, 0, time.Second)},
			[]logEvent{ev("t", "o1", 1, id("k1")), ev("t-1", "o9", 1, ""), ev("t-1", "o9", 2, "")},
			func(v restoredVerdict) bool { return v.seeded == 2 && v.phantoms == 0 }},
		{"phantom and gap", []*Op{op("k1", OK, 1, 0, time.Second)},
			[]logEvent{ev("t", "o1", 1, id("k1")), ev("t", "o1", 3, "0000")},
			func(v restoredVerdict) bool { return v.phantoms == 1 && v.gaps == 1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if v := checkRestoredHistory(tt.ops, tt.events, rpBegan, rpDone); !tt.check(v) {
				t.Fatalf("verdict %+v", v)
			}
		})
	}
}
