package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/httpapi"
)

func TestParseSlots(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int{"1": 1, " 64 ": 64, "1000000": 1_000_000, "unlimited": httpapi.UnlimitedSlots} {
		if got, err := httpapi.ParseSlots(in); err != nil || got != want {
			t.Errorf("ParseSlots(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1", "1000001", "1.5", "abc", "Unlimited", "64/s"} {
		if got, err := httpapi.ParseSlots(in); err == nil {
			t.Errorf("ParseSlots(%q) = %d, want an error", in, got)
		}
	}
}

func TestParseSlotOverrides(t *testing.T) {
	t.Parallel()
	got, err := httpapi.ParseSlotOverrides(" acme:commands=128; acme:waits=unlimited;; beta : queries = 8 ;")
	if err != nil {
		t.Fatal(err)
	}
	want := map[domain.TenantID]httpapi.TenantSlots{
		"acme": {Commands: 128, Waits: httpapi.UnlimitedSlots},
		"beta": {Queries: 8},
	}
	if len(got) != len(want) || got["acme"] != want["acme"] || got["beta"] != want["beta"] {
		t.Errorf("got %+v, want %+v", got, want)
	}
	for _, tc := range []struct{ in, want string }{
		{"acme", "want <tenant>:<class>=<limit>"},
		{"ACME:commands=1", "must match"},
		{"acme:commands", "want <class>=<limit>"},
		{"acme:rates=1", "must be commands, queries or waits"},
		{"acme:commands=0", "want an integer from 1"},
		{"acme:commands=1; acme:commands=2", "set twice"},
	} {
		if _, err := httpapi.ParseSlotOverrides(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseSlotOverrides(%q): %v, want an error containing %q", tc.in, err, tc.want)
		}
	}
	if _, err := httpapi.NewTenantLimiter(httpapi.TenantLimitConfig{Commands: -2}); err == nil {
		t.Error("a negative limit other than UnlimitedSlots was accepted")
	}
}

func TestTenantLimiterOverridesAndUnlimited(t *testing.T) {
	t.Parallel()
	l, err := httpapi.NewTenantLimiter(httpapi.TenantLimitConfig{Queries: 2, Waits: httpapi.UnlimitedSlots,
		Overrides: map[domain.TenantID]httpapi.TenantSlots{"big": {Queries: 5}}})
	if err != nil {
		t.Fatal(err)
	}
	for tenant, want := range map[domain.TenantID]int{"small": 2, "big": 5} {
		var releases []func()
		for {
			release, ok := l.Acquire(tenant, httpapi.SlotQueries)
			if !ok {
				break
			}
			releases = append(releases, release)
		}
		if len(releases) != want {
			t.Errorf("%s: %d query slots, want %d", tenant, len(releases), want)
		}
		for _, r := range releases {
			r()
			r() // a second call must not free another slot
		}
		if n := l.InUse(tenant, httpapi.SlotQueries); n != 0 {
			t.Errorf("%s: %d in use after every release", tenant, n)
		}
	}
	if got := l.LimitFor("small", httpapi.SlotCommands); got != httpapi.DefaultTenantCommands {
		t.Errorf("default commands limit %d, want %d", got, httpapi.DefaultTenantCommands)
	}
	for range 1000 {
		if _, ok := l.Acquire("small", httpapi.SlotWaits); !ok {
			t.Fatal("an unlimited class refused a slot")
		}
	}
}

// The case, held open deterministically: tenant A fills its
// command slots with requests that do not finish; its next request is
// refused at once with 429 and Retry-After, while tenant B is served
// meanwhile. When A's requests end, A is admitted again.
func TestTenantLimiterSparesOtherTenants(t *testing.T) {
	t.Parallel()
	const limit = 3
	var rejected atomic.Int64
	l, err := httpapi.NewTenantLimiter(httpapi.TenantLimitConfig{Commands: limit,
		RejectFunc: func(_ *http.Request, c httpapi.SlotClass) {
			if c == httpapi.SlotCommands {
				rejected.Add(1)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	v, err := auth.NewVerifier(testSecret, nil)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{}, 100)
	release := make(chan struct{})
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tenant, _ := domain.TenantFromContext(r.Context()); tenant == "tenant-a" && r.URL.Path == "/block" {
			started <- struct{}{}
			<-release
		}
		w.WriteHeader(http.StatusNoContent)
	})
	srv := httptest.NewServer(httpapi.Authenticate(v)(l.Middleware(httpapi.SlotCommands)(handler)))
	defer srv.Close()
	client := srv.Client()
	client.Transport.(*http.Transport).MaxIdleConnsPerHost = 32
	tokA, tokB := token(t, "tenant-a", "a"), token(t, "tenant-b", "b")
	send := func(path, tok string) (int, string, string, time.Duration) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		began := time.Now()
		res, err := client.Do(req)
		if err != nil {
			t.Error(err)
			return 0, "", "", 0
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		var shape struct {
			Error struct{ Code string } `json:"error"`
		}
		json.Unmarshal(body, &shape) //nolint:errcheck
		return res.StatusCode, shape.Error.Code, res.Header.Get("Retry-After"), time.Since(began)
	}

	var wg sync.WaitGroup
	for range limit {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if status, _, _, _ := send("/block", tokA); status != http.StatusNoContent {
				t.Errorf("held request of A: %d", status)
			}
		}()
	}
	for range limit {
		<-started
	}
	if n := l.InUse("tenant-a", httpapi.SlotCommands); n != limit {
		t.Fatalf("A holds %d slots, want %d", n, limit)
	}
	for range 10 {
		status, code, retry, took := send("/block", tokA)
		if status != http.StatusTooManyRequests || code != httpapi.CodeRateLimited || retry != "1" {
			t.Fatalf("A beyond its limit: %d %q Retry-After %q, want 429 rate_limited with Retry-After 1", status, code, retry)
		}
		if took > 2*time.Second {
			t.Errorf("the refused request took %v", took)
		}
	}
	for range 20 {
		if status, _, _, _ := send("/other", tokB); status != http.StatusNoContent {
			t.Fatalf("B while A is at its limit: %d", status)
		}
	}
	select {
	case <-started:
		t.Fatal("a request of A beyond its limit reached the handler")
	default:
	}
	if rejected.Load() != 10 {
		t.Errorf("RejectFunc saw %d rejections, want 10", rejected.Load())
	}
	close(release)
	wg.Wait()
	if n := l.InUse("tenant-a", httpapi.SlotCommands); n != 0 {
		t.Errorf("A holds %d slots after its requests ended", n)
	}
	if status, _, _, _ := send("/other", tokA); status != http.StatusNoContent {
		t.Errorf("A after its requests ended: %d", status)
	}
}

// Under a storm of many tenants no tenant ever exceeds its limit, and every
// counter returns to zero.
func TestTenantLimiterUnderConcurrency(t *testing.T) {
	t.Parallel()
	const limit = 4
	l, err := httpapi.NewTenantLimiter(httpapi.TenantLimitConfig{Commands: limit, Queries: limit, Waits: limit})
	if err != nil {
		t.Fatal(err)
	}
	tenants := []domain.TenantID{"t-0", "t-1", "t-2"}
	classes := []httpapi.SlotClass{httpapi.SlotCommands, httpapi.SlotQueries, httpapi.SlotWaits}
	var held [3][3]atomic.Int64
	var over atomic.Int64
	var wg sync.WaitGroup
	for g := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ti, ci := g%3, (g/3)%3
			for range 2000 {
				release, ok := l.Acquire(tenants[ti], classes[ci])
				if !ok {
					continue
				}
				if held[ti][ci].Add(1) > limit {
					over.Add(1)
				}
				held[ti][ci].Add(-1)
				release()
			}
		}()
	}
	wg.Wait()
	if over.Load() > 0 {
		t.Errorf("a limit was exceeded %d times", over.Load())
	}
	for _, tenant := range tenants {
		for _, c := range classes {
			if n := l.InUse(tenant, c); n != 0 {
				t.Errorf("%s %s: %d in use at the end", tenant, c, n)
			}
		}
	}
}
