package httpapi

import (
	"errors"
	"fmt"
	"hash/maphash"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/strata-es/strata/domain"
)

// SlotClass names what a tenant's in-flight slot is held for.
type SlotClass string

// The classes of slots. Commands and queries are held for a whole request
// of their API (its body read included); waits only while a query waits for
// its consistency token, inside a query slot.
const (
	SlotCommands SlotClass = "commands"
	SlotQueries  SlotClass = "queries"
	SlotWaits    SlotClass = "waits"
)

var slotClasses = []SlotClass{SlotCommands, SlotQueries, SlotWaits}

// UnlimitedSlots switches a class's limit off.
const UnlimitedSlots = -1

// Default per-tenant limits. One tenant then holds at most 96 of the
// DefaultMaxInFlight shared slots (waits are inside queries), so a single
// tenant cannot take all of them however slow its requests are.
const (
	DefaultTenantCommands = 32
	DefaultTenantQueries  = 64
	DefaultTenantWaits    = 16
)

// maxSlots bounds a configured limit (beyond it, say unlimited).
const maxSlots = 1_000_000

// TenantSlots overrides the default limits for one tenant; zero keeps the
// default of that class.
type TenantSlots struct {
	Commands, Queries, Waits int
}

func (t TenantSlots) get(c SlotClass) int {
	switch c {
	case SlotCommands:
		return t.Commands
	case SlotQueries:
		return t.Queries
	}
	return t.Waits
}

func (t *TenantSlots) set(c SlotClass, n int) {
	switch c {
	case SlotCommands:
		t.Commands = n
	case SlotQueries:
		t.Queries = n
	default:
		t.Waits = n
	}
}

// ParseSlots reads a limit: a positive integer, or "unlimited".
func ParseSlots(s string) (int, error) {
	s = strings.TrimSpace(s)
	if s == "unlimited" {
		return UnlimitedSlots, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxSlots {
		return 0, fmt.Errorf("limit %q: want an integer from 1 to %d, or unlimited", s, maxSlots)
	}
	return n, nil
}

// ParseSlotOverrides reads per-tenant limits in the syntax of
// ParseRateOverrides: entries separated by ";", each
// "<tenant>:<class>=<limit>" with class commands, queries or waits and
// limit as ParseSlots reads it. Example:
//
//	acme:commands=128; acme:waits=unlimited; beta:queries=8
func ParseSlotOverrides(s string) (map[domain.TenantID]TenantSlots, error) {
	out := map[domain.TenantID]TenantSlots{}
	err := parseOverrides(s, "limit", "tenant-a:commands=64", func(tenant domain.TenantID, c, value string) error {
		class := SlotClass(c)
		if class != SlotCommands && class != SlotQueries && class != SlotWaits {
			return fmt.Errorf("class %q must be commands, queries or waits", class)
		}
		n, err := ParseSlots(value)
		if err != nil {
			return err
		}
		ts := out[tenant]
		if ts.get(class) != 0 {
			return fmt.Errorf("%s of %s is set twice", class, tenant)
		}
		ts.set(class, n)
		out[tenant] = ts
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// TenantLimitConfig configures a TenantLimiter.
type TenantLimitConfig struct {
	// Commands, Queries and Waits are every tenant's limits; zero means
	// the Default* constants, UnlimitedSlots no limit.
	Commands, Queries, Waits int
	// Overrides replace the defaults of single tenants.
	Overrides map[domain.TenantID]TenantSlots
	// TenantFunc, if set, returns a tenant's own limits at the time of the
	// request (the tenant directory's quotas); a zero field falls back to
	// Overrides, then to the default.
	TenantFunc func(domain.TenantID) TenantSlots
	// RetryAfter is sent with a rejection (default 1s).
	RetryAfter time.Duration
	// RejectFunc, if set, is called for every rejected request (metrics).
	RejectFunc func(r *http.Request, class SlotClass)
}

func (c *TenantLimitConfig) setDefaults() {
	if c.Commands == 0 {
		c.Commands = DefaultTenantCommands
	}
	if c.Queries == 0 {
		c.Queries = DefaultTenantQueries
	}
	if c.Waits == 0 {
		c.Waits = DefaultTenantWaits
	}
	if c.RetryAfter == 0 {
		c.RetryAfter = time.Second
	}
}

func validSlots(n int) bool { return n == UnlimitedSlots || n >= 0 && n <= maxSlots }

// Validate reports every invalid setting.
func (c TenantLimitConfig) Validate() error {
	var errs []error
	for _, class := range slotClasses {
		if n := (TenantSlots{c.Commands, c.Queries, c.Waits}).get(class); !validSlots(n) {
			errs = append(errs, fmt.Errorf("%s: want 1 to %d, or unlimited (got %d)", class, maxSlots, n))
		}
	}
	for tenant, ts := range c.Overrides {
		if _, err := domain.ParseTenantID(string(tenant)); err != nil {
			errs = append(errs, fmt.Errorf("override for %q: %w", tenant, err))
		}
		for _, class := range slotClasses {
			if n := ts.get(class); !validSlots(n) {
				errs = append(errs, fmt.Errorf("%s override for %s: want 1 to %d, or unlimited (got %d)", class, tenant, maxSlots, n))
			}
		}
	}
	if c.RetryAfter < 0 {
		errs = append(errs, errors.New("retry after must not be negative"))
	}
	return errors.Join(errs...)
}

// tenantShards spreads tenants over independently locked maps, as the rate
// limiter does.
const tenantShards = 32

// TenantLimiter bounds how many requests of each class one tenant has in
// flight. The shared capacity (the InFlightCap, the database pools) is then
// never all one tenant's: a tenant whose requests are slow (bodies that
// trickle, consistency waits, expensive queries) is refused with 429 beyond
// its own limit while every other tenant is served as before. A slot is
// taken without waiting; a tenant's counters are dropped when they return
// to zero, so memory follows the tenants with requests in flight.
type TenantLimiter struct {
	cfg    TenantLimitConfig
	seed   maphash.Seed
	shards [tenantShards]tenantShard
}

type tenantShard struct {
	mu    sync.Mutex
	inUse map[domain.TenantID]*[3]int // indexed like slotClasses
}

// NewTenantLimiter returns a limiter for cfg.
func NewTenantLimiter(cfg TenantLimitConfig) (*TenantLimiter, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("tenant in-flight limits: %w", err)
	}
	overrides := make(map[domain.TenantID]TenantSlots, len(cfg.Overrides)) // the caller's map may change later
	for k, v := range cfg.Overrides {
		overrides[k] = v
	}
	cfg.Overrides = overrides
	l := &TenantLimiter{cfg: cfg, seed: maphash.MakeSeed()}
	for i := range l.shards {
		l.shards[i].inUse = map[domain.TenantID]*[3]int{}
	}
	return l, nil
}

// LimitFor returns tenant's limit of class (UnlimitedSlots: none).
func (l *TenantLimiter) LimitFor(tenant domain.TenantID, class SlotClass) int {
	if l.cfg.TenantFunc != nil {
		if n := l.cfg.TenantFunc(tenant).get(class); n != 0 && validSlots(n) {
			return n
		}
	}
	if n := l.cfg.Overrides[tenant].get(class); n != 0 {
		return n
	}
	return TenantSlots{l.cfg.Commands, l.cfg.Queries, l.cfg.Waits}.get(class)
}

func classIndex(c SlotClass) int {
	switch c {
	case SlotCommands:
		return 0
	case SlotQueries:
		return 1
	case SlotWaits:
		return 2
	}
	panic(fmt.Sprintf("httpapi: unknown slot class %q", c))
}

// Acquire takes one of tenant's slots of class. It returns false, taking
// nothing, when all are in use; otherwise release must be called exactly
// once when the work is done (later calls do nothing).
func (l *TenantLimiter) Acquire(tenant domain.TenantID, class SlotClass) (release func(), ok bool) {
	i := classIndex(class)
	limit := l.LimitFor(tenant, class)
	sh := &l.shards[maphash.String(l.seed, string(tenant))%tenantShards]
	sh.mu.Lock()
	n := sh.inUse[tenant]
	if n == nil {
		n = new([3]int)
		sh.inUse[tenant] = n
	}
	if limit != UnlimitedSlots && n[i] >= limit {
		if *n == ([3]int{}) {
			delete(sh.inUse, tenant)
		}
		sh.mu.Unlock()
		return nil, false
	}
	n[i]++
	sh.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			sh.mu.Lock()
			n[i]--
			if *n == ([3]int{}) {
				delete(sh.inUse, tenant)
			}
			sh.mu.Unlock()
		})
	}, true
}

// InUse returns how many of tenant's slots of class are taken now.
func (l *TenantLimiter) InUse(tenant domain.TenantID, class SlotClass) int {
	sh := &l.shards[maphash.String(l.seed, string(tenant))%tenantShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if n := sh.inUse[tenant]; n != nil {
		return n[classIndex(class)]
	}
	return 0
}

// tenants counts the tenants with slots in use (tests).
func (l *TenantLimiter) tenants() int {
	t := 0
	for i := range l.shards {
		l.shards[i].mu.Lock()
		t += len(l.shards[i].inUse)
		l.shards[i].mu.Unlock()
	}
	return t
}

// Enter takes a slot of class for the request's tenant (from the context,
// see Authenticate). Beyond the tenant's limit it returns a 429
// rate_limited *Error with Retry-After.
func (l *TenantLimiter) Enter(r *http.Request, class SlotClass) (release func(), err error) {
	tenant, ok := domain.TenantFromContext(r.Context())
	if !ok {
		return nil, errors.New("tenant limiter: no tenant in the request context (mount it after Authenticate)")
	}
	release, ok = l.Acquire(tenant, class)
	if !ok {
		if l.cfg.RejectFunc != nil {
			l.cfg.RejectFunc(r, class)
		}
		what := "requests to the " + string(class) + " API"
		if class == SlotWaits {
			what = "queries waiting for a consistency token"
		}
		return nil, &Error{Status: http.StatusTooManyRequests, Code: CodeRateLimited,
			Message:    fmt.Sprintf("this tenant has %d %s in flight, its limit: retry after the Retry-After delay", l.LimitFor(tenant, class), what),
			RetryAfter: l.cfg.RetryAfter}
	}
	return release, nil
}

// Middleware holds a slot of class for the whole request. Mount it after
// Authenticate and the rate limiter. It panics on SlotWaits (waits are
// taken by the query API around the wait only).
func (l *TenantLimiter) Middleware(class SlotClass) func(http.Handler) http.Handler {
	if class != SlotCommands && class != SlotQueries {
		panic(fmt.Sprintf("httpapi: slot class %q is not a middleware class", class))
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			release, err := l.Enter(r, class)
			if err != nil {
				WriteError(w, r, err)
				return
			}
			defer release()
			next.ServeHTTP(w, r)
		})
	}
}
