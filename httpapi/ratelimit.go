package httpapi

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/strata-es/strata/domain"
)

// RateClass names the token bucket a route draws from. Every tenant has
// one bucket per class.
type RateClass string

// The classes of routes.
const (
	RateCommands RateClass = "commands"
	RateQueries  RateClass = "queries"
)

// Rate is the setting of one token bucket: Limit tokens per second flow in,
// at most Burst are kept. Limit rate.Inf switches the limit off.
type Rate struct {
	Limit rate.Limit
	Burst int
}

// Unlimited is the Rate that never rejects.
var Unlimited = Rate{Limit: rate.Inf}

// Default rates per tenant.
var (
	DefaultCommandRate = Rate{Limit: 100, Burst: 200}
	DefaultQueryRate   = Rate{Limit: 500, Burst: 1000}
)

// String renders r in the syntax ParseRate reads, in the largest unit
// that gives a round count: "50/s,burst=100", "10/m,burst=1",
// "unlimited".
func (r Rate) String() string {
	if r.Limit == rate.Inf {
		return "unlimited"
	}
	var count float64
	var unit string
	for _, u := range []struct {
		per  float64
		name string
	}{{1, "s"}, {60, "m"}, {3600, "h"}} {
		count, unit = float64(r.Limit)*u.per, u.name
		if round := math.Round(count*1000) / 1000; round > 0 && math.Abs(count-round) <= 1e-9*count {
			count = round
			break
		}
	}
	return strconv.FormatFloat(count, 'f', -1, 64) + "/" + unit + ",burst=" + strconv.Itoa(r.Burst)
}

func (r Rate) validate() error {
	switch {
	case r.Limit == rate.Inf:
		return nil
	case !(r.Limit >= minRateLimit) || math.IsInf(float64(r.Limit), 0):
		return fmt.Errorf("rate must be at least 1/h, or unlimited (got %v/s)", float64(r.Limit))
	case r.Burst < 1 || r.Burst > maxRateBurst:
		return fmt.Errorf("burst must be from 1 to %d (got %d)", maxRateBurst, r.Burst)
	}
	return nil
}

// Bounds of a limited rate. With them a bucket refills within 10^6 hours
// and Retry-After stays below an hour.
const (
	minRateLimit = rate.Limit(1.0 / 3600)
	maxRateBurst = 1_000_000
)

// ParseRate reads a rate setting:
//
//	unlimited
//	<count>/<unit>[,burst=<n>]
//
// count is a positive decimal ("50", "0.5"); unit is s, m or h (per
// second, minute or hour), and the rate must come to at least 1/h; burst
// is an integer from 1 to 1,000,000. Without
// burst, the bucket holds one second's worth of tokens (at least 1):
// "50/s" means 50/s,burst=50 and "10/m" means burst=1. Examples:
// "50/s,burst=100", "3000/m", "unlimited".
func ParseRate(s string) (Rate, error) {
	s = strings.TrimSpace(s)
	if s == "unlimited" {
		return Unlimited, nil
	}
	spec, burstPart, hasBurst := strings.Cut(s, ",")
	count, unit, ok := strings.Cut(strings.TrimSpace(spec), "/")
	if !ok {
		return Rate{}, fmt.Errorf("rate %q: want <count>/<unit>[,burst=<n>] such as 50/s,burst=100, or unlimited", s)
	}
	count = strings.TrimSpace(count)
	n, err := strconv.ParseFloat(count, 64)
	if !decimalPattern.MatchString(count) || err != nil || !(n > 0) {
		return Rate{}, fmt.Errorf("rate %q: count %q must be a positive decimal number such as 50 or 0.5", s, count)
	}
	var per float64
	switch strings.TrimSpace(unit) {
	case "s":
		per = 1
	case "m":
		per = 60
	case "h":
		per = 3600
	default:
		if strings.Contains(unit, "burst") {
			return Rate{}, fmt.Errorf("rate %q: write the burst after a comma, as in 50/s,burst=100", s)
		}
		return Rate{}, fmt.Errorf("rate %q: unit %q must be s, m or h", s, strings.TrimSpace(unit))
	}
	r := Rate{Limit: rate.Limit(n / per)}
	r.Burst = int(math.Min(math.Ceil(n/per), maxRateBurst))
	if r.Burst < 1 {
		r.Burst = 1
	}
	if err := (Rate{Limit: r.Limit, Burst: 1}).validate(); err != nil {
		return Rate{}, fmt.Errorf("rate %q: %w", s, err)
	}
	if hasBurst {
		key, val, ok := strings.Cut(strings.TrimSpace(burstPart), "=")
		if !ok || strings.TrimSpace(key) != "burst" {
			return Rate{}, fmt.Errorf("rate %q: after the comma want burst=<n>", s)
		}
		b, err := strconv.Atoi(strings.TrimSpace(val))
		if err != nil || b < 1 || b > maxRateBurst {
			return Rate{}, fmt.Errorf("rate %q: burst %q must be an integer from 1 to %d", s, strings.TrimSpace(val), maxRateBurst)
		}
		r.Burst = b
	}
	return r, nil
}

var decimalPattern = regexp.MustCompile(`^[0-9]{1,15}(\.[0-9]{1,20})?$`)

// TenantRates overrides the default rates for one tenant; a nil field
// keeps the default of that class.
type TenantRates struct {
	Commands *Rate
	Queries  *Rate
}

func (t TenantRates) get(c RateClass) *Rate {
	if c == RateCommands {
		return t.Commands
	}
	return t.Queries
}

// ParseRateOverrides reads per-tenant overrides: entries separated by
// ";", each "<tenant>:<class>=<rate>" with class commands or queries and
// rate in ParseRate's syntax. Whitespace around separators and empty
// entries are ignored; a (tenant, class) pair given twice is an error.
// Example:
//
//	tenant-a:commands=500/s,burst=1000; tenant-a:queries=unlimited; tenant-b:queries=10/s
func ParseRateOverrides(s string) (map[domain.TenantID]TenantRates, error) {
	out := map[domain.TenantID]TenantRates{}
	err := parseOverrides(s, "rate", "tenant-a:commands=500/s,burst=1000", func(tenant domain.TenantID, c, value string) error {
		class := RateClass(c)
		if class != RateCommands && class != RateQueries {
			return fmt.Errorf("class %q must be commands or queries", class)
		}
		r, err := ParseRate(value)
		if err != nil {
			return err
		}
		tr := out[tenant]
		if tr.get(class) != nil {
			return fmt.Errorf("%s of %s is set twice", class, tenant)
		}
		if class == RateCommands {
			tr.Commands = &r
		} else {
			tr.Queries = &r
		}
		out[tenant] = tr
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// RateLimitConfig configures a RateLimiter.
type RateLimitConfig struct {
	// Commands and Queries are every tenant's default rates; the zero
	// Rate means DefaultCommandRate and DefaultQueryRate.
	Commands Rate
	Queries  Rate
	// Overrides replace the defaults of single tenants.
	Overrides map[domain.TenantID]TenantRates
	// TenantFunc, if set, returns a tenant's own rates at the time of the
	// request (the tenant directory's quotas, which change at run time);
	// a nil field falls back to Overrides, then to the default. A changed
	// rate applies to the tenant's existing bucket at once.
	TenantFunc func(domain.TenantID) TenantRates
	// IdleTimeout is how long a tenant's bucket is kept unused before it
	// is dropped (default 10 minutes). A bucket is never dropped before it
	// would have refilled completely, so dropping it never gives a tenant
	// more than its burst.
	IdleTimeout time.Duration
	// NowFunc is the clock (default time.Now).
	NowFunc func() time.Time
	// RejectFunc, if set, is called for every rejected request (metrics).
	RejectFunc func(r *http.Request, class RateClass)
}

func (c *RateLimitConfig) setDefaults() {
	if c.Commands == (Rate{}) {
		c.Commands = DefaultCommandRate
	}
	if c.Queries == (Rate{}) {
		c.Queries = DefaultQueryRate
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 10 * time.Minute
	}
	if c.NowFunc == nil {
		c.NowFunc = time.Now
	}
}

// Validate reports every invalid setting.
func (c RateLimitConfig) Validate() error {
	var errs []error
	if err := c.Commands.validate(); err != nil {
		errs = append(errs, fmt.Errorf("commands: %w", err))
	}
	if err := c.Queries.validate(); err != nil {
		errs = append(errs, fmt.Errorf("queries: %w", err))
	}
	for tenant, tr := range c.Overrides {
		if _, err := domain.ParseTenantID(string(tenant)); err != nil {
			errs = append(errs, fmt.Errorf("override for %q: %w", tenant, err))
		}
		for _, class := range []RateClass{RateCommands, RateQueries} {
			if r := tr.get(class); r != nil {
				if err := r.validate(); err != nil {
					errs = append(errs, fmt.Errorf("%s override for %s: %w", class, tenant, err))
				}
			}
		}
	}
	if c.IdleTimeout < 0 {
		errs = append(errs, errors.New("idle timeout must not be negative"))
	}
	return errors.Join(errs...)
}

// rateShards spreads tenants over independently locked maps, so tenants
// rarely share a lock, and never for longer than a map access.
const rateShards = 32

// RateLimiter keeps a token bucket per tenant and class. Requests never
// wait: one that finds its bucket empty is rejected at once with the delay
// after which a token will be there. Buckets live in sharded maps and are
// dropped after IdleTimeout unused, so memory follows the active tenants.
type RateLimiter struct {
	cfg        RateLimitConfig
	seed       maphash.Seed
	sweepEvery time.Duration
	shards     [rateShards]rateShard
}

type rateShard struct {
	mu        sync.Mutex
	buckets   map[rateKey]*bucket
	lastSweep time.Time
}

type rateKey struct {
	tenant domain.TenantID
	class  RateClass
}

type bucket struct {
	// mu makes reserve-then-cancel atomic. Interleaved, two rejected
	// reservations would each restore less than they took (see
	// rate.Reservation.CancelAt) and leave the bucket in debt.
	mu       sync.Mutex
	lim      *rate.Limiter
	lastUsed atomic.Int64 // unix nanoseconds; written under the shard lock
	keep     atomic.Int64 // nanoseconds unused before the bucket may be dropped
}

// NewRateLimiter returns a limiter for cfg.
func NewRateLimiter(cfg RateLimitConfig) (*RateLimiter, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("rate limits: %w", err)
	}
	overrides := make(map[domain.TenantID]TenantRates, len(cfg.Overrides)) // the caller's map may change later
	for tenant, tr := range cfg.Overrides {
		var own TenantRates
		if tr.Commands != nil {
			own.Commands = new(*tr.Commands)
		}
		if tr.Queries != nil {
			own.Queries = new(*tr.Queries)
		}
		overrides[tenant] = own
	}
	cfg.Overrides = overrides
	l := &RateLimiter{cfg: cfg, seed: maphash.MakeSeed(), sweepEvery: cfg.IdleTimeout / 2}
	now := cfg.NowFunc()
	for i := range l.shards {
		l.shards[i].buckets = map[rateKey]*bucket{}
		l.shards[i].lastSweep = now
	}
	return l, nil
}

// RateFor returns the rate that applies to tenant's requests of class.
func (l *RateLimiter) RateFor(tenant domain.TenantID, class RateClass) Rate {
	if l.cfg.TenantFunc != nil {
		if r := l.cfg.TenantFunc(tenant).get(class); r != nil && r.validate() == nil {
			return *r
		}
	}
	if r := l.cfg.Overrides[tenant].get(class); r != nil {
		return *r
	}
	if class == RateCommands {
		return l.cfg.Commands
	}
	return l.cfg.Queries
}

// Allow takes a token from tenant's bucket of class. When the bucket is
// empty it takes nothing and returns false and how long until a token is
// there (always > 0).
func (l *RateLimiter) Allow(tenant domain.TenantID, class RateClass) (retryAfter time.Duration, ok bool) {
	r := l.RateFor(tenant, class)
	if r.Limit == rate.Inf {
		return 0, true
	}
	now := l.cfg.NowFunc()
	b := l.bucket(rateKey{tenant, class}, r, now)

	b.mu.Lock()
	defer b.mu.Unlock()
	if b.lim.Limit() != r.Limit || b.lim.Burst() != r.Burst {
		// The tenant's quota changed since the bucket was made: the tokens
		// already in it stay (up to the new burst), the new rate refills,
		// and the bucket is kept as long as the new rate needs to refill.
		b.lim.SetLimitAt(now, r.Limit)
		b.lim.SetBurstAt(now, r.Burst)
		b.keep.Store(int64(l.keepFor(r)))
	}
	res := b.lim.ReserveN(now, 1)
	if !res.OK() { // cannot happen with Burst >= 1; fail closed anyway
		return time.Second, false
	}
	delay := res.DelayFrom(now)
	if delay <= 0 {
		return 0, true
	}
	res.CancelAt(now)
	return delay, false
}

func (l *RateLimiter) bucket(k rateKey, r Rate, now time.Time) *bucket {
	sh := &l.shards[maphash.String(l.seed, string(k.tenant))%rateShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if now.Sub(sh.lastSweep) >= l.sweepEvery {
		sh.sweep(now)
	}
	b := sh.buckets[k]
	if b == nil {
		b = &bucket{lim: rate.NewLimiter(r.Limit, r.Burst)}
		b.keep.Store(int64(l.keepFor(r)))
		sh.buckets[k] = b
	}
	b.lastUsed.Store(now.UnixNano())
	return b
}

// keepFor is how long a bucket of rate r is kept unused: IdleTimeout, or
// as long as r takes to refill the whole burst if that is longer.
func (l *RateLimiter) keepFor(r Rate) time.Duration {
	keep := l.cfg.IdleTimeout
	if refill := time.Duration(float64(r.Burst) / float64(r.Limit) * float64(time.Second)); refill > keep {
		keep = refill
	}
	return keep
}

// sweep drops the buckets unused for longer than they take to refill and
// than IdleTimeout. Called with sh.mu held.
func (sh *rateShard) sweep(now time.Time) {
	for k, b := range sh.buckets {
		if now.Sub(time.Unix(0, b.lastUsed.Load())) > time.Duration(b.keep.Load()) {
			delete(sh.buckets, k)
		}
	}
	sh.lastSweep = now
}

// buckets counts the live buckets (tests).
func (l *RateLimiter) buckets() int {
	n := 0
	for i := range l.shards {
		l.shards[i].mu.Lock()
		n += len(l.shards[i].buckets)
		l.shards[i].mu.Unlock()
	}
	return n
}

// Middleware limits the requests of class per tenant: beyond the rate it
// answers 429 rate_limited with Retry-After (whole seconds, at least 1).
// Mount it after Authenticate, which puts the tenant into the context; a
// request without a tenant is a wiring mistake and gets a 500. It panics
// on a class other than RateCommands and RateQueries (at wiring time).
func (l *RateLimiter) Middleware(class RateClass) func(http.Handler) http.Handler {
	if class != RateCommands && class != RateQueries {
		panic(fmt.Sprintf("httpapi: unknown rate class %q", class))
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tenant, ok := domain.TenantFromContext(r.Context())
			if !ok {
				WriteError(w, r, errors.New("rate limiter: no tenant in the request context (mount it after Authenticate)"))
				return
			}
			retryAfter, ok := l.Allow(tenant, class)
			if !ok {
				if l.cfg.RejectFunc != nil {
					l.cfg.RejectFunc(r, class)
				}
				WriteError(w, r, &Error{Status: http.StatusTooManyRequests, Code: CodeRateLimited,
					Message: "too many " + string(class) + " for this tenant: retry after the Retry-After delay", RetryAfter: retryAfter})
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}
