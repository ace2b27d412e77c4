package httpapi_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/httpapi"
)

// The tenant directory's quotas change at run time: a tenant's new rate
// applies to its existing bucket on the next request, env overrides stay
// the fallback, and other tenants keep theirs.
func TestRateLimiterTenantFuncChangesAtRunTime(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	var quota atomic.Pointer[httpapi.Rate]
	env := httpapi.Rate{Limit: 1, Burst: 2}
	l, err := httpapi.NewRateLimiter(httpapi.RateLimitConfig{
		Commands:  httpapi.Rate{Limit: 1, Burst: 1},
		Overrides: map[domain.TenantID]httpapi.TenantRates{"acme": {Commands: &env}},
		NowFunc:   func() time.Time { return now },
		TenantFunc: func(tenant domain.TenantID) httpapi.TenantRates {
			if tenant != "acme" {
				return httpapi.TenantRates{}
			}
			return httpapi.TenantRates{Commands: quota.Load()}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	allowed := func(tenant domain.TenantID) int {
		n := 0
		for i := 0; i < 50; i++ {
			if _, ok := l.Allow(tenant, httpapi.RateCommands); ok {
				n++
			}
		}
		return n
	}
	if n := allowed("acme"); n != 2 {
		t.Fatalf("with the env override acme got %d of 50, want its burst 2", n)
	}
	quota.Store(&httpapi.Rate{Limit: 10, Burst: 20})
	if n := allowed("acme"); n != 0 { // the bucket is empty; the new rate applies from now
		t.Fatalf("right after the quota change acme got %d, want 0", n)
	}
	now = now.Add(2 * time.Second) // 10/s refills the new burst of 20
	if n := allowed("acme"); n != 20 {
		t.Fatalf("after the quota change acme got %d of 50, want the new burst 20", n)
	}
	quota.Store(nil)
	now = now.Add(10 * time.Second)
	if n := allowed("acme"); n != 2 {
		t.Fatalf("after the quota was removed acme got %d of 50, want the env override's burst 2", n)
	}
	if n := allowed("beta"); n != 1 {
		t.Fatalf("beta got %d, want the default burst 1", n)
	}
}

func TestTenantLimiterTenantFunc(t *testing.T) {
	t.Parallel()
	var limit atomic.Int64
	l, err := httpapi.NewTenantLimiter(httpapi.TenantLimitConfig{Commands: 1,
		TenantFunc: func(tenant domain.TenantID) httpapi.TenantSlots {
			return httpapi.TenantSlots{Commands: int(limit.Load())}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if got := l.LimitFor("acme", httpapi.SlotCommands); got != 1 {
		t.Fatalf("limit %d, want the default 1", got)
	}
	limit.Store(3)
	if got := l.LimitFor("acme", httpapi.SlotCommands); got != 3 {
		t.Fatalf("limit %d, want the directory's 3", got)
	}
	limit.Store(httpapi.UnlimitedSlots)
	if _, ok := l.Acquire("acme", httpapi.SlotCommands); !ok {
		t.Fatal("unlimited refused")
	}
}
