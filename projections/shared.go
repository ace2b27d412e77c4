package projections

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
)

// SharedReads lets the runners of one process share what they read while
// catching up: runners at the same checkpoint with the same batch size ask
// for exactly the same batch, which is then read from the log and decoded
// once instead of once per projection. A full rebuild of four projections
// otherwise reads and decodes the whole log four times.
//
// Full batches are shared with a runner that is catching up (its previous
// batch was full too): such a runner reads again at once, so a shared batch
// can never hide newer events from it. A runner following the head shares
// a read (full or not) only if that read began after the runner took its
// wake-up channel: an event committed before then is in the read, and one
// committed after closes the channel, so no wake-up is ever answered with a
// read that began before the event it announces. Runners woken by the same
// append thus read and decode the head once between them.
//
// Projections apply batches at different speeds. So that the fastest does
// not run so far ahead that the batches it read are evicted before the
// others get to them (and are read again), a catching-up runner about to
// read a new batch waits while the window holds keep batches that another
// catching-up runner, active in the last second, still has to apply. That
// bounds memory and does not slow a rebuild down: the work saved goes to
// the slower projections, which decide when the rebuild ends.
type SharedReads struct {
	log      eventstore.Log
	registry *event.Registry
	keep     int

	mu      sync.Mutex
	batches map[batchKey]*sharedBatch
	order   []entry                 // oldest first
	heads   [headReads]*sharedBatch // the latest reads at the head, any length
	readers map[any]*readerState
	moved   *Signal // a reader asked for its next batch
	stats   SharedStats
}

type readerState struct {
	after      event.Position
	catchingUp bool
	seen       time.Time
}

// readerIdle is how long a catching-up reader may go without reading
// before the others stop waiting for it (it failed, or stopped).
const readerIdle = time.Second

// readerGone is how long a reader may go without reading before it no
// longer keeps batches in the window (it stopped, or stands by): when it
// reads again, it reads for itself.
const readerGone = 10 * time.Second

// headReads is how many of the latest head reads are kept for sharing:
// one per position the process's runners are at, which is one or two.
const headReads = 8

// SharedStats counts how batches were obtained: read from the log, shared
// while catching up, shared at the head.
type SharedStats struct {
	Reads, Shared, SharedHeads int64
	// Prefetched counts the reads (of Reads) begun ahead of a reader.
	Prefetched int64
}

type entry struct {
	key   batchKey
	batch *sharedBatch
}

type batchKey struct {
	after event.Position
	limit int
}

type sharedBatch struct {
	key      batchKey
	started  time.Time     // just before the read was sent
	done     chan struct{} // closed once recs, payloads and err are set
	recs     []event.Record
	payloads []event.Payload // decoded with the registry; nil where decoding failed
	errs     []error
	err      error
}

// NewSharedReads returns a SharedReads reading log and decoding with
// registry (required), keeping the last keep full batches (default 32),
// and of batches of more than 2,000 events fewer, so that at most about
// keptEvents are kept (memory is about 1 KiB per event kept).
func NewSharedReads(log eventstore.Log, registry *event.Registry, keep int) *SharedReads {
	if registry == nil {
		// A programming error, found at startup: a silent default would
		// decode with a registry that lacks some module's events.
		panic("projections: NewSharedReads needs the process's event registry")
	}
	if keep <= 0 {
		keep = 32
	}
	return &SharedReads{log: log, registry: registry, keep: keep, batches: map[batchKey]*sharedBatch{},
		readers: map[any]*readerState{}, moved: NewSignal()}
}

// Stats returns how many batches were read and how many were shared.
func (s *SharedReads) Stats() SharedStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// read returns the batch after pos for reader. When catchingUp, a batch
// another runner read (or is reading) is reused if it is full. Otherwise,
// when since is set (the reader took its wake-up channel then), a read of
// the same batch begun at or after since is reused, whatever its length.
func (s *SharedReads) read(ctx context.Context, reader any, after event.Position, limit int, catchingUp bool, since time.Time) (*sharedBatch, error) {
	k := batchKey{after, limit}
	s.mu.Lock()
	st := s.readers[reader]
	if st == nil {
		st = &readerState{}
		s.readers[reader] = st
	}
	st.after, st.catchingUp, st.seen = after, catchingUp, time.Now()
	s.mu.Unlock()
	s.moved.Fire()
	if catchingUp {
		if err := s.throttle(ctx, reader, k); err != nil {
			return nil, err
		}
		s.mu.Lock()
		b, ok := s.batches[k]
		if !ok {
			b = &sharedBatch{done: make(chan struct{})}
			s.batches[k] = b
			s.order = append(s.order, entry{k, b})
			s.stats.Reads++
			s.mu.Unlock()
			s.load(ctx, k, b)
		} else {
			s.stats.Shared++
			s.dropPassedLocked() // this reader has moved: what all have passed goes
			s.mu.Unlock()
			select {
			case <-b.done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if b.err == nil && len(b.recs) == limit {
			s.mu.Lock()
			s.prefetchLocked(ctx, b, limit)
			s.mu.Unlock()
			return b, nil
		}
		// Failed or partial: not for sharing; read afresh below.
	}
	s.mu.Lock()
	if !since.IsZero() {
		if h := s.headLocked(k, since); h != nil {
			s.stats.SharedHeads++
			s.mu.Unlock()
			select {
			case <-h.done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if h.err == nil {
				return h, nil
			}
			s.mu.Lock() // failed: read afresh
		}
	}
	b := &sharedBatch{key: k, started: time.Now(), done: make(chan struct{})}
	s.stats.Reads++
	s.pushHeadLocked(b)
	s.mu.Unlock()
	s.load(ctx, k, b)
	if b.err != nil {
		return nil, b.err
	}
	if len(b.recs) == limit {
		s.mu.Lock()
		if _, ok := s.batches[k]; !ok {
			s.batches[k] = b
			s.order = append(s.order, entry{k, b})
			s.evictLocked()
		}
		s.mu.Unlock()
	}
	return b, nil
}

// prefetchLocked starts reading (and decoding) the batch after the full
// batch b, unless it is read already or the window is full: a catching-up
// reader then finds it ready when it is done with b, instead of waiting for
// the database and the decoding each time (a rebuild's folds read the log
// about twice as fast so). It reads under ctx, the reader's: if that ends,
// the read fails, and a failed batch is read afresh by whoever needs it.
func (s *SharedReads) prefetchLocked(ctx context.Context, b *sharedBatch, limit int) {
	if len(b.recs) == 0 || len(s.batches) >= s.keepFor(limit) {
		return
	}
	next := batchKey{b.recs[len(b.recs)-1].Position, limit}
	if _, ok := s.batches[next]; ok {
		return
	}
	nb := &sharedBatch{key: next, done: make(chan struct{})}
	s.batches[next] = nb
	s.order = append(s.order, entry{next, nb})
	s.stats.Reads++
	s.stats.Prefetched++
	go s.load(ctx, next, nb)
}

// headLocked returns a head read begun at or after since that answers k:
// the latest read of k itself (perhaps still in flight), or else the part
// after k.after of a finished partial read from an earlier position, which
// held every event visible when it ran (runners under steady load drift
// apart by a few events and would otherwise never ask for the same batch).
func (s *SharedReads) headLocked(k batchKey, since time.Time) *sharedBatch {
	for i := len(s.heads) - 1; i >= 0; i-- {
		if h := s.heads[i]; h != nil && h.key == k && !h.started.Before(since) {
			return h
		}
	}
	for i := len(s.heads) - 1; i >= 0; i-- {
		h := s.heads[i]
		if h == nil || h.started.Before(since) || !h.key.after.Less(k.after) {
			continue
		}
		select {
		case <-h.done:
		default:
			continue // still reading: whether it is partial is not known yet
		}
		n := len(h.recs)
		if h.err != nil || n >= h.key.limit || n == 0 || h.recs[n-1].Position.Less(k.after) {
			continue
		}
		j := sort.Search(n, func(j int) bool { return k.after.Less(h.recs[j].Position) })
		end := min(n, j+k.limit)
		return &sharedBatch{key: k, started: h.started, done: h.done,
			recs: h.recs[j:end:end], payloads: h.payloads[j:end:end], errs: h.errs[j:end:end]}
	}
	return nil
}

// pushHeadLocked keeps b as the latest head read, forgetting the oldest.
func (s *SharedReads) pushHeadLocked(b *sharedBatch) {
	copy(s.heads[:], s.heads[1:])
	s.heads[len(s.heads)-1] = b
}

// throttle waits while reading a new batch k would push out of the window
// batches that other active, catching-up readers have yet to apply.
func (s *SharedReads) throttle(ctx context.Context, reader any, k batchKey) error {
	for {
		moved := s.moved.C()
		s.mu.Lock()
		if _, cached := s.batches[k]; cached {
			s.mu.Unlock()
			return nil
		}
		// Only a reader at the front waits: one behind another must never
		// wait for those ahead of it, or two could wait for each other.
		var slowest *event.Position
		now := time.Now()
		for r, st := range s.readers {
			if r == reader || !st.catchingUp || now.Sub(st.seen) >= readerIdle {
				continue
			}
			if k.after.Less(st.after) {
				s.mu.Unlock()
				return nil
			}
			if slowest == nil || st.after.Less(*slowest) {
				after := st.after
				slowest = &after
			}
		}
		needed := 0
		if slowest != nil {
			for _, e := range s.order {
				if s.batches[e.key] == e.batch && !e.key.after.Less(*slowest) {
					needed++
				}
			}
		}
		s.mu.Unlock()
		if needed < s.keepFor(k.limit) {
			return nil
		}
		t := time.NewTimer(readerIdle / 4)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-moved:
			t.Stop()
		case <-t.C:
		}
	}
}

// dropPassedLocked drops the batches that no reader can ask for again:
// every reader seen within readerGone has read past them (a reader's
// position only moves forward; one set back, by a rebuild, reads afresh).
// Without it the last full batches of a catch-up (the backlog of an outage,
// a long transaction elsewhere) stayed in memory until the next catch-up,
// up to keep batches of every runner's events: the soak (R18) saw a serving
// process's heap grow in steps after every fault.
func (s *SharedReads) dropPassedLocked() {
	now := time.Now()
	for r, st := range s.readers {
		if now.Sub(st.seen) > readerGone {
			delete(s.readers, r)
		}
	}
	kept := s.order[:0]
	for _, e := range s.order {
		if s.batches[e.key] != e.batch {
			continue
		}
		needed := false
		for _, st := range s.readers {
			if !e.key.after.Less(st.after) { // not read past it yet
				needed = true
				break
			}
		}
		if needed {
			kept = append(kept, e)
		} else {
			delete(s.batches, e.key)
		}
	}
	clear(s.order[len(kept):]) // no stale pointers beyond the kept entries
	s.order = kept
}

// load reads and decodes the batch, then publishes it (evicting the
// oldest batches, and dropping it again unless it is full).
func (s *SharedReads) load(ctx context.Context, k batchKey, b *sharedBatch) {
	b.recs, b.err = s.log.ReadAll(ctx, k.after, k.limit)
	if b.err == nil {
		b.payloads, b.errs = make([]event.Payload, len(b.recs)), make([]error, len(b.recs))
		s.decode(b)
	}
	close(b.done)
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.batches[k]; ok && cur == b && (b.err != nil || len(b.recs) < k.limit) {
		delete(s.batches, k)
	}
	s.evictLocked()
}

// decodeSplit is the size of a batch above which its halves are decoded
// on two goroutines.
const decodeSplit = 2_000

// decode decodes b's records into b.payloads and b.errs.
func (s *SharedReads) decode(b *sharedBatch) {
	one := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			b.payloads[i], b.errs[i] = s.registry.DecodeRecord(b.recs[i])
		}
	}
	n := len(b.recs)
	if n < decodeSplit {
		one(0, n)
		return
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		one(n/2, n)
	}()
	one(0, n/2)
	wg.Wait()
}

// keptEvents bounds the events kept in full batches: 32 batches of the
// default catch-up batch (2,000 events), 6 of the largest (10,000).
const keptEvents = 64_000

// keepFor returns how many full batches of limit events are kept.
func (s *SharedReads) keepFor(limit int) int {
	return min(s.keep, max(2, keptEvents/max(limit, 1)))
}

func (s *SharedReads) evictLocked() {
	s.dropPassedLocked()
	for len(s.order) > 0 {
		oldest := s.order[0]
		if b, ok := s.batches[oldest.key]; ok && b == oldest.batch && len(s.batches) <= s.keepFor(oldest.key.limit) {
			return
		}
		if s.batches[oldest.key] == oldest.batch {
			delete(s.batches, oldest.key)
		}
		s.order = s.order[1:]
	}
}
