package commands

import (
	"encoding/binary"
	"errors"
	"sync"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/internal/lru"
)

// historyCache keeps the histories of recently written streams so that a
// command on an order this process just wrote needs no read before its
// append. It is only ever a guess: the append's exact expected version is
// what guarantees correctness. A stale entry (another process wrote the
// stream) makes the append conflict; the handler then drops the entry and
// reloads from the store.
//
// An entry is the stream's events as stored (type, schema version, data),
// packed into one byte slice, and decoded on every hit. Decoded payloads
// are dozens of small objects per stream; kept for minutes among the
// request garbage, they pinned far more of the Go heap than they used, and
// a soak's RSS grew as long as the cache churned. One slice per entry (and
// the cache's slab, internal/lru) leaves the heap nothing to fragment.
// Decoding a hit's few events costs microseconds; the read it saves, a
// round trip.
type historyCache struct {
	mu      sync.Mutex
	streams *lru.Cache[cacheKey, packedHistory]
	// bytes is what the entries hold (entryBytes), at most budget.
	bytes, budget int
}

type cacheKey struct{ tenant, stream string }

// entryOverhead approximates an entry's bytes beside its history: its
// slot, its share of the index, the stream name's header.
const entryOverhead = 96

// minEntryBytes sizes the slab: as many entries as the budget holds of
// this size (2,048 at the default budget). Smaller histories leave part of
// the budget unused rather than make the slab, allocated up front, big.
const minEntryBytes = 1024

func entryBytes(k cacheKey, h packedHistory) int { return entryOverhead + len(k.stream) + cap(h) }

func newHistoryCache(budget int) *historyCache {
	if budget <= 0 {
		return nil
	}
	return &historyCache{streams: lru.New[cacheKey, packedHistory](max(16, budget/minEntryBytes)), budget: budget}
}

// get returns the stream's packed history. It is never modified: extend
// it with packedHistory.with, which copies.
func (c *historyCache) get(k cacheKey) (packedHistory, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streams.Get(k)
}

// put keeps h as k's history, forgetting the least recently used streams
// while the entries hold more than the budget. A history larger than the
// whole budget is not kept.
func (c *historyCache) put(k cacheKey, h packedHistory) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := entryBytes(k, h)
	if n > c.budget {
		c.dropLocked(k)
		return
	}
	if lk, left, ok := c.streams.Put(k, h); ok { // k's old history, or a forgotten stream's
		c.bytes -= entryBytes(lk, left)
	}
	c.bytes += n
	for c.bytes > c.budget {
		ek, eh, ok := c.streams.RemoveOldest()
		if !ok {
			c.bytes = 0
			break
		}
		c.bytes -= entryBytes(ek, eh)
	}
}

func (c *historyCache) drop(k cacheKey) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropLocked(k)
}

func (c *historyCache) dropLocked(k cacheKey) {
	if h, ok := c.streams.Get(k); ok {
		c.streams.Delete(k)
		c.bytes -= entryBytes(k, h)
	}
}

// packedHistory is a stream's events, each as uvarint len(type), type,
// uvarint schema version, uvarint len(data), data. The raw records'
// metadata is not kept: it is needed only to find an earlier execution of
// an idempotent command, and idempotent commands always read the store.
type packedHistory []byte

// packRecords packs records read from the store.
func packRecords(recs []event.Record) packedHistory {
	n := 0
	for _, r := range recs {
		n += 3*binary.MaxVarintLen64 + len(r.Type) + len(r.Data)
	}
	b := make([]byte, 0, n)
	for _, r := range recs {
		b = packEvent(b, r.Type, r.SchemaVersion, r.Data)
	}
	return b
}

// with returns a new packed history: h, then the events. h is not changed.
func (h packedHistory) with(events []packedEvent) packedHistory {
	n := len(h)
	for _, e := range events {
		n += 3*binary.MaxVarintLen64 + len(e.typ) + len(e.data)
	}
	b := append(make([]byte, 0, n), h...)
	for _, e := range events {
		b = packEvent(b, e.typ, e.sv, e.data)
	}
	return b
}

type packedEvent struct {
	typ  string
	sv   int
	data []byte
}

func packEvent(b []byte, typ string, sv int, data []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(typ)))
	b = append(b, typ...)
	b = binary.AppendUvarint(b, uint64(sv))
	b = binary.AppendUvarint(b, uint64(len(data)))
	return append(b, data...)
}

var errBadPack = errors.New("history cache: malformed entry")

// decode returns the payloads of h's events, the history of k, decoded
// by reg (sealed personal fields opened, upcast to their current schema
// versions).
func (h packedHistory) decode(reg *event.Registry, k cacheKey) ([]event.Payload, error) {
	var out []event.Payload
	err := h.each(func(typ string, sv int, data []byte) error {
		p, err := reg.DecodeRecord(event.Record{Tenant: k.tenant, Stream: k.stream, Type: typ, SchemaVersion: sv, Data: data})
		if err != nil {
			return err
		}
		out = append(out, p)
		return nil
	})
	return out, err
}

// each calls fn with each of h's events in order.
func (h packedHistory) each(fn func(typ string, sv int, data []byte) error) error {
	for b := []byte(h); len(b) > 0; {
		typ, rest, ok := cut(b)
		if !ok {
			return errBadPack
		}
		sv, n := binary.Uvarint(rest)
		if n <= 0 {
			return errBadPack
		}
		data, rest, ok := cut(rest[n:])
		if !ok {
			return errBadPack
		}
		if err := fn(string(typ), int(sv), data); err != nil {
			return err
		}
		b = rest
	}
	return nil
}

// cut splits a uvarint-length-prefixed field off b.
func cut(b []byte) (field, rest []byte, ok bool) {
	l, n := binary.Uvarint(b)
	if n <= 0 || uint64(len(b)-n) < l {
		return nil, nil, false
	}
	return b[n : n+int(l)], b[n+int(l):], true
}
