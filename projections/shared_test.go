package projections

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/strata-es/strata/domain/event"
)

// memLog is an in-memory global log that counts reads.
type memLog struct {
	mu    sync.Mutex
	recs  []event.Record
	reads int
}

func (l *memLog) ReadAll(_ context.Context, after event.Position, limit int) ([]event.Record, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reads++
	var out []event.Record
	for _, r := range l.recs {
		if after.Less(r.Position) && len(out) < limit {
			out = append(out, r)
		}
	}
	return out, nil
}

func (l *memLog) Head(context.Context) (event.Position, error) { return event.Position{}, nil }

func (l *memLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reads
}

// settled waits until every batch in the window is read (a read ahead
// runs on its own goroutine) and returns the stats.
func (s *SharedReads) settled() SharedStats {
	s.mu.Lock()
	var pending []*sharedBatch
	for _, b := range s.batches {
		pending = append(pending, b)
	}
	s.mu.Unlock()
	for _, b := range pending {
		<-b.done
	}
	return s.Stats()
}

func (l *memLog) add(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for range n {
		i := len(l.recs) + 1
		data, _ := json.Marshal(happened{N: i})
		l.recs = append(l.recs, event.Record{Tenant: "t", Stream: "order-o", Version: int64(i), Type: happenedType,
			SchemaVersion: 1, Data: data, Position: event.Position{Major: uint64(i), Minor: uint64(i)}})
	}
}

// newMemShared returns a log of n events and shared reads keeping keep
// batches of it.
func newMemShared(n, keep int) (*memLog, *SharedReads) {
	log := &memLog{}
	log.add(n)
	return log, NewSharedReads(log, event.NewRegistry(happenedCodec), keep)
}

func TestSharedReads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	log, s := newMemShared(10, 2)
	a, b := new(int), new(int) // two readers

	// A full batch read by one runner is shared with a catching-up one,
	// decoded once.
	first, err := s.read(ctx, a, event.Position{}, 4, false, time.Time{})
	if err != nil || len(first.recs) != 4 || first.payloads[0] == nil {
		t.Fatalf("first read: %v %+v", err, first)
	}
	second, err := s.read(ctx, b, event.Position{}, 4, true, time.Time{})
	if err != nil || second != first {
		t.Fatalf("catching-up read was not shared")
	}
	// The catching-up reader's next batch was read ahead for it.
	if st := s.settled(); st.Prefetched != 1 || log.count() != 2 {
		t.Fatalf("after a catching-up read: %+v, %d log reads; want the shared one and the next batch read ahead", st, log.count())
	}
	next, err := s.read(ctx, b, first.recs[3].Position, 4, true, time.Time{})
	if st := s.settled(); err != nil || len(next.recs) != 4 || log.count() != 1+int(st.Prefetched) {
		t.Fatalf("the batch read ahead was read again: %v, %d log reads, %+v", err, log.count(), st)
	}
	// A runner following the head without a wake-up time reads for itself.
	reads := log.count()
	if third, _ := s.read(ctx, b, event.Position{}, 4, false, time.Time{}); third == first || log.count() != reads+1 {
		t.Fatalf("a live read was served from the cache (%d log reads)", log.count())
	}
	// A partial batch is never shared: more may have become visible since.
	tail := event.Position{Major: 8, Minor: 8}
	if p, _ := s.read(ctx, a, tail, 4, true, time.Time{}); len(p.recs) != 2 {
		t.Fatalf("partial read: %d records", len(p.recs))
	}
	log.add(3)
	if p, _ := s.read(ctx, b, tail, 4, true, time.Time{}); len(p.recs) != 4 {
		t.Fatalf("a partial batch was shared: %d records, want the 4 now visible", len(p.recs))
	}
	// The window keeps at most keep batches.
	s.mu.Lock()
	n := len(s.batches)
	s.mu.Unlock()
	if n > 2 {
		t.Errorf("%d batches kept, want at most 2", n)
	}
}

// happened is the one event type of these tests: the engine's tests of
// shared reads need no domain.
type happened struct {
	N int `json:"n"`
}

const happenedType = "test.happened"

func (happened) EventType() string { return happenedType }

var happenedCodec = event.Codec{Type: happenedType, Version: 1, New: func() event.Payload { return &happened{} }}

// TestSharedReadsDropsPassedBatches: once every reader has read past a
// batch it leaves the window, so the end of a catch-up keeps no memory; a
// reader gone quiet (stopped, standing by) does not keep batches either.
func TestSharedReadsDropsPassedBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, s := newMemShared(20, 8)
	a, b, gone := new(int), new(int), new(int)
	kept := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.batches)
	}
	for _, r := range []any{a, b} {
		for after := 0; after < 12; after += 4 {
			if _, err := s.read(ctx, r, event.Position{Major: uint64(after), Minor: uint64(after)}, 4, true, time.Time{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Both are at 8: the batch after 8 is theirs and the one after 12 was
	// read ahead for them; the two before are passed.
	s.mu.Lock()
	var keys []uint64
	for k := range s.batches {
		keys = append(keys, k.after.Minor)
	}
	s.mu.Unlock()
	slices.Sort(keys)
	if !slices.Equal(keys, []uint64{8, 12}) {
		t.Fatalf("batches after %v kept while both readers are past all but the last, want after 8 and (read ahead) after 12", keys)
	}
	// A reader that has not read for longer than readerGone, far behind,
	// keeps nothing.
	if _, err := s.read(ctx, gone, event.Position{}, 4, true, time.Time{}); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.readers[gone].seen = time.Now().Add(-2 * readerGone)
	s.mu.Unlock()
	for _, r := range []any{a, b} {
		if _, err := s.read(ctx, r, event.Position{Major: 16, Minor: 16}, 4, false, time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := kept(); n != 1 {
		t.Fatalf("%d batches kept once both readers follow the head and the third has gone quiet, want 1 (the last read)", n)
	}
}

// TestSharedHeadReads: runners following the head share a read begun after
// each took its wake-up channel, and never one begun before: an event
// committed in between closes no channel they hold, so it would wait for
// the next poll.
func TestSharedHeadReads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	log, s := newMemShared(2, 2)
	a, b, c := new(int), new(int), new(int)

	woken := time.Now() // a and b took the channel the same append closed
	first, err := s.read(ctx, a, event.Position{}, 10, false, woken)
	if err != nil || len(first.recs) != 2 || first.payloads[0] == nil {
		t.Fatalf("first head read: %v %+v", err, first)
	}
	second, err := s.read(ctx, b, event.Position{}, 10, false, woken)
	if err != nil || second != first || log.count() != 1 {
		t.Fatalf("a head read begun after the wake-up was not shared (%d log reads)", log.count())
	}

	// An event committed after that read; c took its channel after it.
	log.add(1)
	for !time.Now().After(first.started) {
		time.Sleep(time.Microsecond)
	}
	later := time.Now()
	third, err := s.read(ctx, c, event.Position{}, 10, false, later)
	if err != nil || third == first || len(third.recs) != 3 || log.count() != 2 {
		t.Fatalf("a head read begun before the wake-up was shared: %d records, %d log reads", len(third.recs), log.count())
	}

	// A runner a little ahead (it applied the first event already) gets the
	// rest of a partial read from before its position: that read held
	// every visible event. Not so from a full read, which may have stopped
	// short of the head.
	d := new(int)
	one := event.Position{Major: 1, Minor: 1}
	rest, err := s.read(ctx, d, one, 10, false, later)
	if err != nil || log.count() != 2 || len(rest.recs) != 2 || rest.recs[0].Position != (event.Position{Major: 2, Minor: 2}) || rest.payloads[1] == nil {
		t.Fatalf("the rest of a partial head read was not shared: %v, %d log reads, %+v", err, log.count(), rest)
	}
	full, err := s.read(ctx, d, event.Position{}, 2, false, time.Now())
	if err != nil || len(full.recs) != 2 || log.count() != 3 {
		t.Fatalf("full read: %v, %d log reads", err, log.count())
	}
	if _, err := s.read(ctx, a, one, 2, false, full.started); err != nil || log.count() != 4 {
		t.Fatalf("the rest of a full head read was shared (%d log reads)", log.count())
	}

	// Without a wake-up time (CatchUp, a runner without Wake) a head read
	// is never shared.
	if fourth, _ := s.read(ctx, a, event.Position{}, 10, false, time.Time{}); fourth == third || log.count() != 5 {
		t.Fatalf("a head read without a wake-up time was shared (%d log reads)", log.count())
	}
	if st := s.Stats(); st.SharedHeads != 2 || st.Reads != 5 {
		t.Fatalf("stats %+v, want 5 reads and 2 shared heads", st)
	}
}
