package projections

import (
	"context"
	"errors"
	"fmt"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/internal/lru"
)

// ErrStreamHole: a stream's versions did not arrive contiguous. The global
// log never skips (decision 1), so this means a damaged log or a broken
// append path; skipping would silently corrupt the read model, so the
// projection stops at the event instead.
var ErrStreamHole = errors.New("stream versions are not contiguous")

type streamKey struct{ tenant, stream string }

// streamCache remembers the last version applied per stream, least
// recently used first out, in a slab (internal/lru: a churning cache of
// small objects fragments the heap). It belongs to the goroutine holding
// the lease. Tenant names are interned: every record scanned from the log
// carries its own copy, and a tenant's thousands of entries need one.
type streamCache struct {
	versions *lru.Cache[streamKey, int64]
	tenants  map[string]string
}

func newStreamCache(max int) *streamCache {
	return &streamCache{versions: lru.New[streamKey, int64](max), tenants: map[string]string{}}
}

func (c *streamCache) get(k streamKey) (int64, bool) { return c.versions.Get(k) }

func (c *streamCache) put(k streamKey, v int64) {
	t, ok := c.tenants[k.tenant]
	if !ok {
		if len(c.tenants) >= c.versions.Cap() { // a bound, however many tenants pass
			clear(c.tenants)
		}
		t = k.tenant
		c.tenants[t] = t
	}
	k.tenant = t
	c.versions.Put(k, v)
}

func (c *streamCache) reset() {
	c.versions.Reset()
	clear(c.tenants)
}

// checkContiguous verifies that every event of recs directly follows the
// previous version of its stream, and returns the last version per stream
// to remember once the batch commits. A stream seen before (in the cache
// or earlier in the batch) is checked in memory; otherwise, for a version
// above 1, the predecessor must exist at an earlier log position, which the
// log's VersionLocator checks for the whole batch at once. Catching up from the start
// needs no query at all: every stream begins at version 1.
func checkContiguous(ctx context.Context, locator eventstore.VersionLocator, cache *streamCache, recs []event.Record) (map[streamKey]int64, error) {
	seen := make(map[streamKey]int64, len(recs))
	var misses []int
	for i, rec := range recs {
		k := streamKey{rec.Tenant, rec.Stream}
		last, inBatch := seen[k]
		known := inBatch
		if !known {
			last, known = cache.get(k)
		}
		switch {
		case known && last == rec.Version-1:
		case !known && rec.Version == 1:
		case inBatch:
			// A batch is a contiguous stretch of the log: a missing
			// version between two of the batch's events is a hole.
			return nil, holeError(rec, fmt.Sprintf("it follows version %d", last))
		default:
			// Not known, or the cache disagrees: ask the log.
			misses = append(misses, i)
		}
		seen[k] = rec.Version
	}
	if len(misses) == 0 {
		return seen, nil
	}
	refs := make([]eventstore.StreamVersion, len(misses))
	for j, i := range misses {
		// A version 1 the cache says came before is looked up itself: the
		// log holds one version 1 per stream, so if it is this record the
		// one the cache remembers is gone from the log (the tenant's rows
		// were purged when it moved away, and it came back), and the
		// stream starts again here.
		v := recs[i].Version - 1
		if recs[i].Version == 1 {
			v = 1
		}
		refs[j] = eventstore.StreamVersion{Tenant: recs[i].Tenant, Stream: recs[i].Stream, Version: v}
	}
	positions, exists, err := locator.LocateVersions(ctx, refs)
	if err != nil {
		return nil, fmt.Errorf("check stream contiguity: %w", err)
	}
	found := make(map[int]event.Position, len(misses))
	for j := range refs {
		if exists[j] {
			found[j] = positions[j]
		}
	}
	for j, i := range misses {
		rec := recs[i]
		if rec.Version == 1 {
			if at, ok := found[j]; !ok || at != rec.Position {
				return nil, holeError(rec, "version 1 arrives again")
			}
			continue
		}
		prev, ok := found[j]
		switch {
		case !ok:
			return nil, holeError(rec, fmt.Sprintf("version %d is not in the log", rec.Version-1))
		case !prev.Less(rec.Position):
			return nil, holeError(rec, fmt.Sprintf("version %d is at %s, after it in the log", rec.Version-1, prev))
		}
	}
	return seen, nil
}

func holeError(rec event.Record, detail string) error {
	return fmt.Errorf("%w: stream %q of tenant %q: version %d at %s: %s", ErrStreamHole, rec.Stream, rec.Tenant, rec.Version, rec.Position, detail)
}
