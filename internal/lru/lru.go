// Package lru is a bounded map that forgets its least recently used entry
// first, with every entry in one slab allocated up front.
//
// Why not container/list and a map of elements: a long-lived cache that
// churns (a soak writes a new stream every few hundred microseconds, each
// entry lives minutes) allocates its list elements one by one among the
// request garbage, and every element that outlives its neighbours keeps
// their whole span of the Go heap in use. The heap's in-use bytes then
// drift far above its live bytes, and RSS grows for as long as the churn
// goes on (R18 measured it). Here the entries are one slice of max slots,
// linked by index; only what a caller puts inside a value is allocated
// per entry.
//
// A Cache is not safe for concurrent use.
package lru

// Cache maps keys to values, at most max of them.
type Cache[K comparable, V any] struct {
	index map[K]int32
	slots []slot[K, V]
	// head is the most recently used slot, tail the least; -1 when empty.
	head, tail int32
	// free chains the slots not in use (through next), -1 at its end.
	free int32
}

type slot[K comparable, V any] struct {
	key        K
	val        V
	prev, next int32
}

// New returns a cache of at most n entries (at least 1, at most 2^30).
func New[K comparable, V any](n int) *Cache[K, V] {
	n = min(1<<30, max(n, 1))
	c := &Cache[K, V]{index: make(map[K]int32, n), slots: make([]slot[K, V], n)}
	c.Reset()
	return c
}

// Len is how many entries the cache holds.
func (c *Cache[K, V]) Len() int { return len(c.index) }

// Cap is the most entries the cache holds.
func (c *Cache[K, V]) Cap() int { return len(c.slots) }

// Get returns k's value and makes it the most recently used.
func (c *Cache[K, V]) Get(k K) (V, bool) {
	i, ok := c.index[k]
	if !ok {
		var zero V
		return zero, false
	}
	c.toFront(i)
	return c.slots[i].val, true
}

// Put sets k's value and makes it the most recently used, forgetting the
// least recently used entry if the cache is full. It returns the value
// that left the cache and its key, if one did (k's previous value, or the
// forgotten entry), for callers that account for what their values hold.
func (c *Cache[K, V]) Put(k K, v V) (leftKey K, left V, ok bool) {
	if i, found := c.index[k]; found {
		left, c.slots[i].val = c.slots[i].val, v
		c.toFront(i)
		return k, left, true
	}
	i := c.free
	if i < 0 {
		i = c.tail
		c.unlink(i)
		delete(c.index, c.slots[i].key)
		leftKey, left, ok = c.slots[i].key, c.slots[i].val, true
	} else {
		c.free = c.slots[i].next
	}
	c.slots[i] = slot[K, V]{key: k, val: v, prev: -1, next: -1}
	c.pushFront(i)
	c.index[k] = i
	return leftKey, left, ok
}

// RemoveOldest forgets the least recently used entry and returns it.
func (c *Cache[K, V]) RemoveOldest() (K, V, bool) {
	if c.tail < 0 {
		var k K
		var v V
		return k, v, false
	}
	s := c.slots[c.tail]
	c.Delete(s.key)
	return s.key, s.val, true
}

// Delete forgets k.
func (c *Cache[K, V]) Delete(k K) {
	i, ok := c.index[k]
	if !ok {
		return
	}
	c.unlink(i)
	delete(c.index, k)
	c.slots[i] = slot[K, V]{prev: -1, next: c.free} // drop what the value referenced
	c.free = i
}

// Reset forgets every entry (the slab and the map's buckets are kept).
func (c *Cache[K, V]) Reset() {
	clear(c.index)
	c.head, c.tail = -1, -1
	for i := range c.slots {
		c.slots[i] = slot[K, V]{prev: -1, next: int32(i + 1)}
	}
	c.slots[len(c.slots)-1].next = -1
	c.free = 0
}

func (c *Cache[K, V]) toFront(i int32) {
	if c.head == i {
		return
	}
	c.unlink(i)
	c.pushFront(i)
}

func (c *Cache[K, V]) pushFront(i int32) {
	s := &c.slots[i]
	s.prev, s.next = -1, c.head
	if c.head >= 0 {
		c.slots[c.head].prev = i
	}
	c.head = i
	if c.tail < 0 {
		c.tail = i
	}
}

func (c *Cache[K, V]) unlink(i int32) {
	s := &c.slots[i]
	if s.prev >= 0 {
		c.slots[s.prev].next = s.next
	} else {
		c.head = s.next
	}
	if s.next >= 0 {
		c.slots[s.next].prev = s.prev
	} else {
		c.tail = s.prev
	}
	s.prev, s.next = -1, -1
}
