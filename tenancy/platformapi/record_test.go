package platformapi

import (
	"fmt"
	"testing"
	"time"
)

// TestRefusalsThrottlePerSubject: a subject's refusals are recorded up to
// RefusalBurst, then one per RefusalRefill, and the next recorded one
// carries how many were not; another subject has its own bucket; the
// subjects' memory is bounded.
func TestRefusalsThrottlePerSubject(t *testing.T) {
	t.Parallel()
	now := time.Unix(0, 0)
	l := newRefusals(func() time.Time { return now })
	recorded := 0
	for range 100 {
		if ok, _ := l.take("api:mallory@acme"); ok {
			recorded++
		}
	}
	if recorded != RefusalBurst {
		t.Fatalf("%d of 100 refusals at one instant recorded, want %d", recorded, RefusalBurst)
	}
	if ok, _ := l.take("api:ops@ops"); !ok {
		t.Error("another subject's first refusal is not recorded")
	}
	now = now.Add(RefusalRefill)
	ok, suppressed := l.take("api:mallory@acme")
	if !ok || suppressed != 100-RefusalBurst {
		t.Errorf("after one refill: recorded %v, suppressed %d, want true, %d", ok, suppressed, 100-RefusalBurst)
	}
	if ok, _ := l.take("api:mallory@acme"); ok {
		t.Error("a second refusal within the refill is recorded")
	}

	// Memory: beyond maxRefusalSubjects, idle (full) buckets are dropped;
	// while none is idle, a new subject is not recorded.
	for i := range maxRefusalSubjects {
		l.take(fmt.Sprintf("s-%d", i))
	}
	if ok, _ := l.take("one-too-many"); ok {
		t.Error("a subject beyond the bound was recorded while every bucket is in use")
	}
	now = now.Add(RefusalBurst * RefusalRefill)
	if ok, _ := l.take("one-too-many"); !ok || len(l.buckets) > maxRefusalSubjects {
		t.Errorf("after the buckets refilled: recorded %v, %d buckets", ok, len(l.buckets))
	}
}
