package commands

import (
	"container/list"
	"sync"

	"github.com/strata-es/strata/domain/event"
)

// historyCache keeps the histories of recently written streams so that a
// command on an order this process just wrote needs no read before its
// append. It is only ever a guess: the append's exact expected version is
// what guarantees correctness. A stale entry (another process wrote the
// stream) makes the append conflict; the handler then drops the entry and
// reloads from the store.
type historyCache struct {
	mu    sync.Mutex
	max   int
	order *list.List // of *cached, most recent first
	byKey map[cacheKey]*list.Element
}

type cacheKey struct{ tenant, stream string }

// cached keeps the decoded payloads only: the raw records (data and
// metadata) are needed just to find an earlier execution of an idempotent
// command, and idempotent commands always read the store.
type cached struct {
	key      cacheKey
	payloads []event.Payload
}

func newHistoryCache(max int) *historyCache {
	if max <= 0 {
		return nil
	}
	return &historyCache{max: max, order: list.New(), byKey: map[cacheKey]*list.Element{}}
}

// get returns a copy of the cached payloads (callers may append to it).
func (c *historyCache) get(k cacheKey) ([]event.Payload, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[k]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(el)
	e := el.Value.(*cached)
	return append([]event.Payload(nil), e.payloads...), true
}

func (c *historyCache) put(k cacheKey, payloads []event.Payload) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[k]; ok {
		e := el.Value.(*cached)
		e.payloads = payloads
		c.order.MoveToFront(el)
		return
	}
	c.byKey[k] = c.order.PushFront(&cached{key: k, payloads: payloads})
	for c.order.Len() > c.max {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.byKey, last.Value.(*cached).key)
	}
}

func (c *historyCache) drop(k cacheKey) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[k]; ok {
		c.order.Remove(el)
		delete(c.byKey, k)
	}
}
