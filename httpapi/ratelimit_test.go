package httpapi_test

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/httpapi"
)

func TestParseRate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want httpapi.Rate
	}{
		{"50/s", httpapi.Rate{Limit: 50, Burst: 50}},
		{"50/s,burst=100", httpapi.Rate{Limit: 50, Burst: 100}},
		{" 50 / s , burst = 100 ", httpapi.Rate{Limit: 50, Burst: 100}},
		{"3000/m", httpapi.Rate{Limit: 50, Burst: 50}},
		{"10/m", httpapi.Rate{Limit: rate.Limit(10.0 / 60), Burst: 1}},
		{"0.5/s", httpapi.Rate{Limit: 0.5, Burst: 1}},
		{"1/h,burst=5", httpapi.Rate{Limit: rate.Limit(1.0 / 3600), Burst: 5}},
		{"2.5/s,burst=1000000", httpapi.Rate{Limit: 2.5, Burst: 1_000_000}},
		{"unlimited", httpapi.Unlimited},
	} {
		got, err := httpapi.ParseRate(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseRate(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		if err == nil {
			// String gives the canonical spelling back.
			if again, err := httpapi.ParseRate(got.String()); err != nil || again != got {
				t.Errorf("ParseRate(%q.String() = %q) = %+v, %v", tc.in, got.String(), again, err)
			}
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"", "want <count>/<unit>"},
		{"50", "want <count>/<unit>"},
		{"50/x", `unit "x" must be s, m or h`},
		{"50/sec", `unit "sec" must be s, m or h`},
		{"0/s", "must be a positive decimal"},
		{"-1/s", "must be a positive decimal"},
		{"abc/s", "must be a positive decimal"},
		{"1e3/s", "must be a positive decimal"},
		{"NaN/s", "must be a positive decimal"},
		{"Inf/s", "must be a positive decimal"},
		{"0.1/h", "at least 1/h"},
		{"50/s,burst=0", "burst \"0\" must be an integer from 1 to 1000000"},
		{"50/s,burst=-1", "must be an integer from 1"},
		{"50/s,burst=x", "must be an integer from 1"},
		{"50/s,burst=1000001", "must be an integer from 1"},
		{"50/s,burst=1,burst=2", "must be an integer from 1"},
		{"50/s,brust=1", "after the comma want burst=<n>"},
		{"50/s:burst=100", "write the burst after a comma"},
		{"Unlimited", "want <count>/<unit>"},
	} {
		if got, err := httpapi.ParseRate(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseRate(%q) = %+v, %v; want an error containing %q", tc.in, got, err, tc.want)
		}
	}
}

func ptr(r httpapi.Rate) *httpapi.Rate { return &r }

func TestParseRateOverrides(t *testing.T) {
	t.Parallel()
	got, err := httpapi.ParseRateOverrides(" tenant-a:commands=500/s,burst=1000; tenant-a:queries=unlimited;tenant-b:queries=10/s ; ")
	want := map[domain.TenantID]httpapi.TenantRates{
		"tenant-a": {Commands: ptr(httpapi.Rate{Limit: 500, Burst: 1000}), Queries: ptr(httpapi.Unlimited)},
		"tenant-b": {Queries: ptr(httpapi.Rate{Limit: 10, Burst: 10})},
	}
	if err != nil || fmt.Sprint(render(got)) != fmt.Sprint(render(want)) {
		t.Errorf("ParseRateOverrides = %v, %v; want %v", render(got), err, render(want))
	}
	if got, err := httpapi.ParseRateOverrides(""); err != nil || len(got) != 0 {
		t.Errorf("empty overrides = %v, %v", got, err)
	}
	for _, tc := range []struct{ in, want string }{
		{"tenant-a", `override 1 "tenant-a": want <tenant>:<class>=<rate>`},
		{"tenant-a:commands", "want <class>=<rate>"},
		{"Tenant-A:commands=1/s", `tenant "Tenant-A" must match`},
		{":commands=1/s", `tenant "" must match`},
		{"tenant-a:writes=1/s", `class "writes" must be commands or queries`},
		{"tenant-a:commands=fast", `rate "fast"`},
		{"tenant-a:commands=500/s:burst=1000", "write the burst after a comma"},
		{"tenant-a:commands=1/s;tenant-b:queries=2/s;tenant-a:commands=3/s", `override 3 "tenant-a:commands=3/s": commands of tenant-a is set twice`},
	} {
		if got, err := httpapi.ParseRateOverrides(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseRateOverrides(%q) = %v, %v; want an error containing %q", tc.in, got, err, tc.want)
		}
	}
}

func render(m map[domain.TenantID]httpapi.TenantRates) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		s := ""
		if v.Commands != nil {
			s += "commands=" + v.Commands.String() + " "
		}
		if v.Queries != nil {
			s += "queries=" + v.Queries.String()
		}
		out[string(k)] = s
	}
	return out
}

func TestRateLimitConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  httpapi.RateLimitConfig
		want string
	}{
		{"burst 0", httpapi.RateLimitConfig{Commands: httpapi.Rate{Limit: 5}}, "commands: burst must be from 1"},
		{"rate 0", httpapi.RateLimitConfig{Queries: httpapi.Rate{Burst: 5}}, "queries: rate must be at least 1/h"},
		{"negative", httpapi.RateLimitConfig{Commands: httpapi.Rate{Limit: -1, Burst: 1}}, "rate must be at least 1/h"},
		{"bad override tenant", httpapi.RateLimitConfig{Overrides: map[domain.TenantID]httpapi.TenantRates{"A B": {}}}, `override for "A B"`},
		{"bad override rate", httpapi.RateLimitConfig{Overrides: map[domain.TenantID]httpapi.TenantRates{"a": {Queries: &httpapi.Rate{Limit: 1}}}}, "queries override for a: burst"},
		{"negative idle timeout", httpapi.RateLimitConfig{IdleTimeout: -time.Second}, "idle timeout"},
	} {
		if _, err := httpapi.NewRateLimiter(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	l, err := httpapi.NewRateLimiter(httpapi.RateLimitConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if l.RateFor("a", httpapi.RateCommands) != httpapi.DefaultCommandRate || l.RateFor("a", httpapi.RateQueries) != httpapi.DefaultQueryRate {
		t.Errorf("defaults: %v %v", l.RateFor("a", httpapi.RateCommands), l.RateFor("a", httpapi.RateQueries))
	}
}

// clock is a settable clock for the limiter.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestRateLimiterAllow(t *testing.T) {
	t.Parallel()
	clk := newClock()
	l, err := httpapi.NewRateLimiter(httpapi.RateLimitConfig{
		Commands: httpapi.Rate{Limit: 1, Burst: 3},
		Queries:  httpapi.Rate{Limit: 10, Burst: 1},
		Overrides: map[domain.TenantID]httpapi.TenantRates{
			"big":  {Commands: &httpapi.Rate{Limit: 100, Burst: 100}},
			"free": {Commands: &httpapi.Unlimited},
		},
		NowFunc: clk.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if d, ok := l.Allow("a", httpapi.RateCommands); !ok {
			t.Fatalf("request %d of the burst rejected (retry after %v)", i+1, d)
		}
	}
	d, ok := l.Allow("a", httpapi.RateCommands)
	if ok || d != time.Second {
		t.Fatalf("beyond the burst: %v, %v; want rejected with 1s", d, ok)
	}
	// Rejections take nothing: a thousand of them leave the bucket as it was.
	for range 1000 {
		l.Allow("a", httpapi.RateCommands)
	}
	clk.Add(500 * time.Millisecond)
	if d, ok := l.Allow("a", httpapi.RateCommands); ok || d != 500*time.Millisecond {
		t.Fatalf("half a token later: %v, %v", d, ok)
	}
	clk.Add(500 * time.Millisecond)
	if _, ok := l.Allow("a", httpapi.RateCommands); !ok {
		t.Fatal("a token later: rejected")
	}
	// Classes and tenants have their own buckets.
	if _, ok := l.Allow("a", httpapi.RateQueries); !ok {
		t.Error("queries share the commands bucket")
	}
	if _, ok := l.Allow("b", httpapi.RateCommands); !ok {
		t.Error("tenant b shares tenant a's bucket")
	}
	for i := range 100 {
		if _, ok := l.Allow("big", httpapi.RateCommands); !ok {
			t.Fatalf("override: request %d rejected", i+1)
		}
	}
	if _, ok := l.Allow("big", httpapi.RateQueries); !ok {
		t.Error("override of commands changed queries")
	}
	if _, ok := l.Allow("big", httpapi.RateQueries); ok {
		t.Error("tenant big's queries are not at the default")
	}
	for range 10_000 {
		if _, ok := l.Allow("free", httpapi.RateCommands); !ok {
			t.Fatal("unlimited tenant rejected")
		}
	}
}

// Rejected requests racing on one bucket must not leave it in debt: after
// any number of concurrent rejections, one token's worth of time buys
// exactly one request.
func TestRateLimiterConcurrentRejectionsTakeNothing(t *testing.T) {
	t.Parallel()
	clk := newClock()
	l, err := httpapi.NewRateLimiter(httpapi.RateLimitConfig{Commands: httpapi.Rate{Limit: 10, Burst: 5}, NowFunc: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 500 {
				if _, ok := l.Allow("a", httpapi.RateCommands); ok {
					allowed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if allowed.Load() != 5 {
		t.Fatalf("%d allowed from a burst of 5", allowed.Load())
	}
	clk.Add(100 * time.Millisecond)
	if _, ok := l.Allow("a", httpapi.RateCommands); !ok {
		t.Fatal("one token's worth of time later: rejected (the rejections left a debt)")
	}
	if _, ok := l.Allow("a", httpapi.RateCommands); ok {
		t.Fatal("two requests for one token")
	}
}

type rateBundle struct {
	srv     *httptest.Server
	client  *http.Client
	limiter *httpapi.RateLimiter
	rejects atomic.Int64
}

func rateSetup(t *testing.T, cfg httpapi.RateLimitConfig) *rateBundle {
	t.Helper()
	b := &rateBundle{}
	cfg.RejectFunc = func(*http.Request, httpapi.RateClass) { b.rejects.Add(1) }
	l, err := httpapi.NewRateLimiter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.limiter = l
	v, err := auth.NewVerifier(testSecret, nil)
	if err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	b.srv = httptest.NewServer(httpapi.Authenticate(v)(l.Middleware(httpapi.RateCommands)(ok)))
	t.Cleanup(b.srv.Close)
	b.client = b.srv.Client()
	b.client.Transport.(*http.Transport).MaxIdleConnsPerHost = 64
	return b
}

type outcome struct {
	status     int
	retryAfter string
	code       string
	took       time.Duration
}

func (b *rateBundle) send(t *testing.T, tok string) outcome {
	req, _ := http.NewRequest(http.MethodPost, b.srv.URL, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	start := time.Now()
	resp, err := b.client.Do(req)
	if err != nil {
		t.Error(err)
		return outcome{}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var shape struct {
		Error struct{ Code string } `json:"error"`
	}
	json.Unmarshal(body, &shape) //nolint:errcheck
	return outcome{resp.StatusCode, resp.Header.Get("Retry-After"), shape.Error.Code, time.Since(start)}
}

// The acceptance test: a burst of 1,000 requests from tenant A
// gets 429s while tenant B's requests in the same second all succeed.
func TestRateLimitBurstOfOneTenantSparesAnother(t *testing.T) {
	t.Parallel()
	const limit, burst = 50, 100
	b := rateSetup(t, httpapi.RateLimitConfig{Commands: httpapi.Rate{Limit: limit, Burst: burst}})
	tokA, tokB := token(t, "tenant-a", "user-a"), token(t, "tenant-b", "user-b")

	start := time.Now()
	var mu sync.Mutex
	counts := map[int]int{}
	var badRetry []string
	var wg sync.WaitGroup
	jobs := make(chan struct{})
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				o := b.send(t, tokA)
				mu.Lock()
				counts[o.status]++
				if o.status == http.StatusTooManyRequests {
					if n, err := strconv.Atoi(o.retryAfter); err != nil || n < 1 || n > int(math.Ceil(1.0/limit)) || o.code != httpapi.CodeRateLimited {
						badRetry = append(badRetry, fmt.Sprintf("Retry-After %q code %q", o.retryAfter, o.code))
					}
				}
				mu.Unlock()
			}
		}()
	}
	// Tenant B sends its requests while A's burst is going on.
	var bOutcomes []outcome
	bDone := make(chan struct{})
	go func() {
		defer close(bDone)
		for range 50 {
			bOutcomes = append(bOutcomes, b.send(t, tokB))
		}
	}()
	for range 1000 {
		jobs <- struct{}{}
	}
	close(jobs)
	wg.Wait()
	<-bDone
	elapsed := time.Since(start)

	if counts[http.StatusTooManyRequests] == 0 || counts[http.StatusNoContent]+counts[http.StatusTooManyRequests] != 1000 {
		t.Fatalf("tenant A's 1,000 requests: %v", counts)
	}
	// A gets its burst and what flowed in meanwhile, no more.
	if maxOK := burst + int(math.Ceil(limit*elapsed.Seconds())) + 1; counts[http.StatusNoContent] < burst || counts[http.StatusNoContent] > maxOK {
		t.Errorf("tenant A: %d allowed in %v, want %d to %d", counts[http.StatusNoContent], elapsed, burst, maxOK)
	}
	if int(b.rejects.Load()) != counts[http.StatusTooManyRequests] {
		t.Errorf("RejectFunc saw %d rejections, clients %d", b.rejects.Load(), counts[http.StatusTooManyRequests])
	}
	if len(badRetry) > 0 {
		t.Errorf("%d bad 429s, e.g. %s", len(badRetry), badRetry[0])
	}
	var slowest time.Duration
	for i, o := range bOutcomes {
		if o.status != http.StatusNoContent {
			t.Errorf("tenant B's request %d: %d %s", i+1, o.status, o.code)
		}
		slowest = max(slowest, o.took)
	}
	t.Logf("A: %v in %v; B: %d requests, slowest %v", counts, elapsed, len(bOutcomes), slowest)
}

func TestRateLimitWithoutTenantIsAWiringError(t *testing.T) {
	t.Parallel()
	l, err := httpapi.NewRateLimiter(httpapi.RateLimitConfig{})
	if err != nil {
		t.Fatal(err)
	}
	called := false
	rec := httptest.NewRecorder()
	httpapi.LogRequests(quiet)(l.Middleware(httpapi.RateQueries)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { called = true }))).
		ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if called || rec.Code != http.StatusInternalServerError {
		t.Errorf("no tenant: called %v, status %d", called, rec.Code)
	}
}
