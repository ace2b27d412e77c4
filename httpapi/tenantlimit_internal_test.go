package httpapi

import (
	"fmt"
	"testing"

	"github.com/strata-es/strata/domain"
)

// A tenant's counters are dropped once nothing of it is in flight, also
// after a refusal, so memory follows the tenants with requests under way.
func TestTenantLimiterForgetsIdleTenants(t *testing.T) {
	t.Parallel()
	l, err := NewTenantLimiter(TenantLimitConfig{Commands: 1})
	if err != nil {
		t.Fatal(err)
	}
	release, ok := l.Acquire("a", SlotCommands)
	if !ok {
		t.Fatal("first slot refused")
	}
	if _, ok := l.Acquire("a", SlotCommands); ok {
		t.Fatal("second slot granted beyond the limit of 1")
	}
	if n := l.tenants(); n != 1 {
		t.Fatalf("%d tenants tracked, want 1", n)
	}
	release()
	if n := l.tenants(); n != 0 {
		t.Fatalf("%d tenants tracked after the release, want 0", n)
	}
	for i := range 100 {
		r, _ := l.Acquire(domain.TenantID(fmt.Sprintf("t-%d", i)), SlotWaits)
		r()
	}
	if n := l.tenants(); n != 0 {
		t.Fatalf("%d tenants tracked after 100 acquire/release pairs, want 0", n)
	}
}
