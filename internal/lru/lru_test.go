package lru

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// model is the obvious LRU: keys in use order, most recent first.
type model struct {
	max   int
	order []int
	vals  map[int]int
}

func (m *model) touch(k int) {
	m.order = slices.DeleteFunc(m.order, func(x int) bool { return x == k })
	m.order = append([]int{k}, m.order...)
}

func (m *model) get(k int) (int, bool) {
	v, ok := m.vals[k]
	if ok {
		m.touch(k)
	}
	return v, ok
}

func (m *model) put(k, v int) (leftKey, left int, ok bool) {
	left, ok = m.vals[k]
	leftKey = k
	m.vals[k] = v
	m.touch(k)
	if len(m.order) > m.max {
		leftKey, left, ok = m.order[m.max], m.vals[m.order[m.max]], true
		delete(m.vals, m.order[m.max])
		m.order = m.order[:m.max]
	}
	if !ok {
		leftKey = 0
	}
	return leftKey, left, ok
}

func (m *model) del(k int) {
	delete(m.vals, k)
	m.order = slices.DeleteFunc(m.order, func(x int) bool { return x == k })
}

// order walks the cache from most to least recently used.
func (c *Cache[K, V]) order() []K {
	var out []K
	for i := c.head; i >= 0; i = c.slots[i].next {
		out = append(out, c.slots[i].key)
	}
	return out
}

func TestAgainstModel(t *testing.T) {
	for _, size := range []int{1, 2, 7, 64} {
		rng := rand.New(rand.NewPCG(uint64(size), 9))
		c := New[int, int](size)
		m := &model{max: size, vals: map[int]int{}}
		for step := 0; step < 20_000; step++ {
			k := rng.IntN(3 * size)
			switch op := rng.IntN(10); {
			case op < 4:
				got, ok := c.Get(k)
				want, wok := m.get(k)
				if got != want || ok != wok {
					t.Fatalf("size %d step %d: Get(%d) = %d, %v; want %d, %v", size, step, k, got, ok, want, wok)
				}
			case op < 8:
				lk, left, ok := c.Put(k, step)
				wlk, wleft, wok := m.put(k, step)
				if lk != wlk || left != wleft || ok != wok {
					t.Fatalf("size %d step %d: Put(%d) left %d=%d, %v; want %d=%d, %v", size, step, k, lk, left, ok, wlk, wleft, wok)
				}
			case op == 8:
				k, v, ok := c.RemoveOldest()
				if len(m.order) == 0 {
					if ok {
						t.Fatalf("size %d step %d: RemoveOldest of an empty cache gave %d", size, step, k)
					}
					break
				}
				wk := m.order[len(m.order)-1]
				if !ok || k != wk || v != m.vals[wk] {
					t.Fatalf("size %d step %d: RemoveOldest = %d, %d, %v; want %d, %d", size, step, k, v, ok, wk, m.vals[wk])
				}
				m.del(wk)
			case op == 9 && rng.IntN(50) == 0:
				c.Reset()
				m.order, m.vals = nil, map[int]int{}
			default:
				c.Delete(k)
				m.del(k)
			}
			if c.Len() != len(m.order) || !slices.Equal(c.order(), m.order) {
				t.Fatalf("size %d step %d: order %v, want %v (len %d)", size, step, c.order(), m.order, c.Len())
			}
		}
	}
}

func TestDeleteDropsTheValue(t *testing.T) {
	c := New[string, []byte](2)
	c.Put("a", make([]byte, 10))
	c.Delete("a")
	for i := range c.slots {
		if c.slots[i].val != nil {
			t.Fatalf("slot %d still references a deleted value", i)
		}
	}
	if c.Cap() != 2 || c.Len() != 0 {
		t.Fatalf("cap %d len %d", c.Cap(), c.Len())
	}
}

func TestPutAllocatesNothingOnceFull(t *testing.T) {
	c := New[int, int](128)
	for k := range 128 {
		c.Put(k, k)
	}
	k := 128
	allocs := testing.AllocsPerRun(1000, func() {
		c.Put(k, k)
		c.Get(k - 5)
		k++
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per Put and Get, want 0", allocs)
	}
}
