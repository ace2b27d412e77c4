package projections

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
)

func TestStreamCacheEvictsLeastRecentlyUsed(t *testing.T) {
	t.Parallel()
	c := newStreamCache(2)
	a, b, x := streamKey{"t", "a"}, streamKey{"t", "b"}, streamKey{"t", "c"}
	c.put(a, 1)
	c.put(b, 1)
	c.get(a) // a is now the most recent
	c.put(x, 1)
	if _, ok := c.get(b); ok {
		t.Error("b should have been evicted")
	}
	if v, ok := c.get(a); !ok || v != 1 {
		t.Error("a should be cached")
	}
	c.put(a, 2)
	if v, _ := c.get(a); v != 2 {
		t.Errorf("a = %d, want 2", v)
	}
	c.reset()
	if _, ok := c.get(a); ok {
		t.Error("reset kept a")
	}
}

// fakeLocator answers LocateVersions from a map (a pure unit test of
// checkContiguous; the runner's tests use the real log).
type fakeLocator map[streamKey]map[int64]event.Position

func (f fakeLocator) LocateVersions(_ context.Context, refs []eventstore.StreamVersion) ([]event.Position, []bool, error) {
	pos, found := make([]event.Position, len(refs)), make([]bool, len(refs))
	for i, r := range refs {
		pos[i], found[i] = f[streamKey{r.Tenant, r.Stream}][r.Version]
	}
	return pos, found, nil
}

// TestVersionOneAgainAfterAPurge: a runner's cache remembers a stream the
// log no longer holds (the tenant's rows were purged when it moved away);
// when the tenant comes back, the stream's version 1 arrives again at a
// new position. The log has one version 1 per stream: if it is this
// record, the stream starts again; if the log's version 1 is elsewhere,
// it is a hole as before.
func TestVersionOneAgainAfterAPurge(t *testing.T) {
	k := streamKey{"zeta", "order-1"}
	cache := newStreamCache(10)
	cache.put(k, 3) // applied versions 1..3 before the purge
	rec := event.Record{Tenant: "zeta", Stream: "order-1", Version: 1, Position: event.Position{Major: 900, Minor: 40}}
	seen, err := checkContiguous(context.Background(), fakeLocator{k: {1: rec.Position}}, cache, []event.Record{rec})
	if err != nil || seen[k] != 1 {
		t.Fatalf("the stream starting again: %v %v", seen, err)
	}
	_, err = checkContiguous(context.Background(), fakeLocator{k: {1: {Major: 800, Minor: 2}}}, cache, []event.Record{rec})
	if !errors.Is(err, ErrStreamHole) || !strings.Contains(err.Error(), "version 1 arrives again") {
		t.Fatalf("a version 1 the log holds elsewhere: %v", err)
	}
}
