package projections

import "testing"

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
