package httpapi

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/strata-es/strata/domain"
)

func TestRateLimiterEvictsIdleTenants(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }

	l, err := NewRateLimiter(RateLimitConfig{
		Commands:    Rate{Limit: 10, Burst: 10}, // refills in 1 s
		IdleTimeout: time.Minute,
		Overrides:   map[domain.TenantID]TenantRates{"slow": {Commands: &Rate{Limit: 1.0 / 60, Burst: 10}}}, // refills in 10 min
		NowFunc:     clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		l.Allow(domain.TenantID(fmt.Sprintf("old-%d", i)), RateCommands)
	}
	for range 10 {
		l.Allow("slow", RateCommands) // drained
	}
	if n := l.buckets(); n != 1001 {
		t.Fatalf("%d buckets, want 1001", n)
	}

	advance(2 * time.Minute)
	// Sweeping is done by the requests themselves, a shard at a time;
	// a thousand tenants reach every shard.
	for i := range 1000 {
		l.Allow(domain.TenantID(fmt.Sprintf("new-%d", i)), RateCommands)
	}
	if n := l.buckets(); n != 1001 {
		t.Fatalf("%d buckets after the idle ones went, want the 1000 new ones and slow", n)
	}
	// Slow's bucket was kept: two tokens flowed in, where a fresh bucket
	// would hand out a new burst of ten.
	for i := range 3 {
		if _, ok := l.Allow("slow", RateCommands); ok != (i < 2) {
			t.Fatalf("slow's request %d: allowed %v; its drained bucket was dropped before it refilled", i+1, ok)
		}
	}
	advance(11 * time.Minute)
	for i := range 1000 {
		l.Allow(domain.TenantID(fmt.Sprintf("newer-%d", i)), RateCommands)
	}
	if n := l.buckets(); n != 1000 {
		t.Fatalf("%d buckets, want only the 1000 newest", n)
	}
}
