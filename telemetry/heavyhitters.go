package telemetry

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/strata-es/strata/domain"
)

// HitKind is what the heavy hitters count.
type HitKind int

// The kinds counted.
const (
	HitCommands HitKind = iota // commands handled (any outcome)
	HitQueries                 // requests of the query API
	HitEvents                  // events appended
	hitKinds
)

// String is the kind's label value and JSON name.
func (k HitKind) String() string {
	return [...]string{"commands", "queries", "events"}[k]
}

// HitKinds lists the kinds.
var HitKinds = []HitKind{HitCommands, HitQueries, HitEvents}

// Defaults of HeavyHittersConfig.
const (
	DefaultHitWindow     = 5 * time.Minute
	DefaultHitBucket     = time.Minute
	DefaultHitTop        = 10
	DefaultHitMaxTenants = 10_000
)

// HeavyHittersConfig configures HeavyHitters.
type HeavyHittersConfig struct {
	Window time.Duration // the rolling window (DefaultHitWindow)
	Bucket time.Duration // its granularity (DefaultHitBucket)
	// Top is how many tenants /metrics shows per kind (DefaultHitTop).
	Top int
	// MaxTenants bounds the tenants one bucket tracks by name
	// (DefaultHitMaxTenants); the counts of tenants beyond it go to
	// Other, so memory is bounded and totals stay right.
	MaxTenants int
	NowFunc    func() time.Time
}

// HeavyHitters counts commands, queries and appended events per tenant in
// per-bucket maps over a rolling window: an exact count for every tenant
// a bucket tracks (at most MaxTenants per bucket), so the ranking is exact
// unless more than MaxTenants tenants are active within one bucket. A
// record is a mutex and a map update; Top merges at most Window/Bucket
// buckets.
type HeavyHitters struct {
	cfg     HeavyHittersConfig
	mu      sync.Mutex
	buckets []hitBucket // ring, indexed by bucket number mod len
}

type hitBucket struct {
	n      int64 // bucket number (unix time / Bucket); 0: unused
	counts map[domain.TenantID]*[hitKinds]uint64
	other  [hitKinds]uint64
}

// NewHeavyHitters returns an empty HeavyHitters.
func NewHeavyHitters(cfg HeavyHittersConfig) *HeavyHitters {
	if cfg.Bucket <= 0 {
		cfg.Bucket = DefaultHitBucket
	}
	if cfg.Window < cfg.Bucket {
		cfg.Window = DefaultHitWindow
	}
	if cfg.Top <= 0 {
		cfg.Top = DefaultHitTop
	}
	if cfg.MaxTenants <= 0 {
		cfg.MaxTenants = DefaultHitMaxTenants
	}
	if cfg.NowFunc == nil {
		cfg.NowFunc = time.Now
	}
	n := int(cfg.Window / cfg.Bucket)
	return &HeavyHitters{cfg: cfg, buckets: make([]hitBucket, n)}
}

// Config returns the configuration in effect (defaults filled in).
func (h *HeavyHitters) Config() HeavyHittersConfig { return h.cfg }

func (h *HeavyHitters) bucketNo(t time.Time) int64 { return t.UnixNano()/int64(h.cfg.Bucket) + 1 }

// Record counts n of kind for tenant now.
func (h *HeavyHitters) Record(tenant domain.TenantID, kind HitKind, n uint64) {
	if h == nil || tenant == "" || n == 0 {
		return
	}
	bn := h.bucketNo(h.cfg.NowFunc())
	h.mu.Lock()
	defer h.mu.Unlock()
	b := &h.buckets[bn%int64(len(h.buckets))]
	if b.n != bn {
		*b = hitBucket{n: bn, counts: map[domain.TenantID]*[hitKinds]uint64{}}
	}
	c, ok := b.counts[tenant]
	if !ok {
		if len(b.counts) >= h.cfg.MaxTenants {
			b.other[kind] += n
			return
		}
		c = new([hitKinds]uint64)
		b.counts[tenant] = c
	}
	c[kind] += n
}

// Hitter is one tenant's count of a kind over the window.
type Hitter struct {
	Tenant domain.TenantID `json:"tenant"`
	Count  uint64          `json:"count"`
}

// TopView is the heavy hitters of every kind.
type TopView struct {
	Window string              `json:"window"`
	Top    map[string][]Hitter `json:"top"`   // kind -> the top tenants, highest first
	Other  map[string]uint64   `json:"other"` // kind -> counts of untracked tenants
	Total  map[string]uint64   `json:"total"` // kind -> every tenant's count
}

// Top returns the n tenants with the highest counts of kind over the
// window, highest first (ties by tenant ID), and the untracked count.
func (h *HeavyHitters) Top(kind HitKind, n int) (top []Hitter, other, total uint64) {
	sums, other := h.window(kind)
	top = make([]Hitter, 0, len(sums))
	for t, c := range sums {
		top = append(top, Hitter{t, c})
		total += c
	}
	slices.SortFunc(top, func(a, b Hitter) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return cmp.Compare(a.Tenant, b.Tenant)
	})
	if len(top) > n {
		top = top[:n]
	}
	return top, other, total + other
}

// View returns the top n of every kind.
func (h *HeavyHitters) View(n int) TopView {
	v := TopView{Window: h.cfg.Window.String(), Top: map[string][]Hitter{}, Other: map[string]uint64{}, Total: map[string]uint64{}}
	for _, k := range HitKinds {
		v.Top[k.String()], v.Other[k.String()], v.Total[k.String()] = h.Top(k, n)
	}
	return v
}

func (h *HeavyHitters) window(kind HitKind) (map[domain.TenantID]uint64, uint64) {
	cur := h.bucketNo(h.cfg.NowFunc())
	oldest := cur - int64(len(h.buckets)) + 1
	sums := map[domain.TenantID]uint64{}
	var other uint64
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range h.buckets {
		b := &h.buckets[i]
		if b.n < oldest || b.n > cur {
			continue
		}
		for t, c := range b.counts {
			if c[kind] > 0 {
				sums[t] += c[kind]
			}
		}
		other += b.other[kind]
	}
	return sums, other
}
