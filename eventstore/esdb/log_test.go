package esdb

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/strata-es/strata/domain/event"
)

func pos(n uint64) event.Position { return event.Position{Major: n, Minor: n} }

func recAt(n uint64) item {
	return item{rec: &event.Record{ID: "e", Tenant: "t", Stream: "s", Version: int64(n), Position: pos(n)}}
}

func checkpointAt(n uint64) item {
	p := pos(n)
	return item{checkpoint: &p}
}

// feed returns a live cursor started at from whose buffer holds items.
func feed(from event.Position, items ...item) *cursor {
	c := newCursor("strata-", from, func() {})
	c.live = true
	for _, it := range items {
		c.items <- it
	}
	return c
}

func positions(recs []event.Record) []uint64 {
	var out []uint64
	for _, r := range recs {
		out = append(out, r.Position.Major)
	}
	return out
}

func equal(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestCursorPagesWithoutWaitingOnceItHasEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := feed(event.Position{}, recAt(10), checkpointAt(15), recAt(20), recAt(30))
	got, err := c.read(ctx, event.Position{}, 2, time.Hour)
	if err != nil || !equal(positions(got), []uint64{10, 20}) {
		t.Fatalf("first page %v, %v", positions(got), err)
	}
	if c.last != pos(20) || c.scanned != pos(20) {
		t.Fatalf("cursor at %v/%v", c.last, c.scanned)
	}
	began := time.Now()
	got, err = c.read(ctx, pos(20), 10, time.Hour)
	if err != nil || !equal(positions(got), []uint64{30}) {
		t.Fatalf("second page %v, %v", positions(got), err)
	}
	if time.Since(began) > 30*time.Second {
		t.Fatal("a page with events waited for more")
	}
}

func TestCursorEmptyPageAfterWait(t *testing.T) {
	t.Parallel()
	c := feed(pos(5), checkpointAt(40), checkpointAt(50))
	began := time.Now()
	got, err := c.read(context.Background(), pos(5), 10, 30*time.Millisecond)
	if err != nil || len(got) != 0 {
		t.Fatalf("page %v, %v", positions(got), err)
	}
	if took := time.Since(began); took < 30*time.Millisecond {
		t.Fatalf("returned after %s, before the poll wait", took)
	}
	// The checkpoints were taken in: the cursor covers everything to 50.
	if c.last != pos(5) || c.scanned != pos(50) {
		t.Fatalf("cursor at %v/%v, want 5/50", c.last, c.scanned)
	}
	for _, p := range []uint64{5, 6, 40, 50} {
		if !c.covers("strata-", pos(p)) {
			t.Errorf("cursor does not cover %d", p)
		}
	}
	for _, p := range []uint64{4, 51} {
		if c.covers("strata-", pos(p)) {
			t.Errorf("cursor covers %d", p)
		}
	}
	// Continuing from a checkpoint inside the range moves the cursor there.
	c.items <- recAt(60)
	got, _ = c.read(context.Background(), pos(50), 10, time.Hour)
	if !equal(positions(got), []uint64{60}) || c.last != pos(60) {
		t.Fatalf("after the checkpoint: %v, cursor %v", positions(got), c.last)
	}
}

func TestCursorTransientError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	transient := errors.New("resubscribe failed")
	c := feed(event.Position{}, recAt(1), item{err: transient}, recAt(2))
	got, err := c.read(ctx, event.Position{}, 10, time.Hour)
	if err != nil || !equal(positions(got), []uint64{1}) {
		t.Fatalf("events before the error: %v, %v", positions(got), err)
	}
	if _, err := c.read(ctx, pos(1), 10, time.Hour); !errors.Is(err, transient) {
		t.Fatalf("then the error: %v", err)
	}
	got, err = c.read(ctx, pos(1), 10, time.Hour)
	if err != nil || !equal(positions(got), []uint64{2}) {
		t.Fatalf("then the events again: %v, %v", positions(got), err)
	}
}

func TestCursorFatalErrorSticks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bad := errors.New("bad metadata")
	c := feed(event.Position{}, recAt(1), item{err: bad, fatal: true})
	got, err := c.read(ctx, event.Position{}, 10, time.Hour)
	if err != nil || !equal(positions(got), []uint64{1}) {
		t.Fatalf("events before the error: %v, %v", positions(got), err)
	}
	for i := 0; i < 2; i++ {
		if _, err := c.read(ctx, pos(1), 10, time.Hour); !errors.Is(err, bad) {
			t.Fatalf("read %d after a fatal error: %v", i, err)
		}
	}
}

func TestCursorStopsWithContextAndPump(t *testing.T) {
	t.Parallel()
	c := feed(event.Position{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.read(ctx, event.Position{}, 10, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled read: %v", err)
	}
	c.items <- recAt(1)
	close(c.done) // the pump stopped after buffering one event
	got, err := c.read(context.Background(), event.Position{}, 10, time.Hour)
	if err != nil || !equal(positions(got), []uint64{1}) {
		t.Fatalf("buffered event after the pump stopped: %v, %v", positions(got), err)
	}
	if _, err := c.read(context.Background(), pos(1), 10, time.Hour); err == nil {
		t.Fatal("a stopped cursor returned an empty page instead of an error")
	}
}

func TestCursorPool(t *testing.T) {
	t.Parallel()
	s := &Store{cfg: config{maxCursors: 2}, names: naming{ns: "strata", prefix: "strata-"}}
	l := newGlobalLog(s)
	s.log = l
	stopped := map[string]bool{}
	mk := func(name string, last, scanned uint64) *cursor {
		c := newCursor("strata-", pos(last), func() { stopped[name] = true })
		c.scanned = pos(scanned)
		return c
	}
	a, b, c := mk("a", 10, 10), mk("b", 20, 35), mk("c", 50, 50)
	l.put(a)
	l.put(b)
	l.put(c) // a is the least recently used beyond the limit of 2
	if !stopped["a"] || stopped["b"] || stopped["c"] {
		t.Fatalf("stopped %v, want only a", stopped)
	}
	if got := s.LatestCheckpoint(pos(25)); got != pos(35) {
		t.Fatalf("LatestCheckpoint(25) = %v, want 35", got)
	}
	if got := s.LatestCheckpoint(pos(40)); got != pos(40) {
		t.Fatalf("LatestCheckpoint(40) = %v, want 40 (no cursor covers it)", got)
	}
	got, err := l.take(context.Background(), "strata-", pos(30))
	if err != nil || got != b {
		t.Fatalf("take(30) = %p, %v; want cursor b", got, err)
	}
	if got, err := l.take(context.Background(), "strata-", pos(50)); err != nil || got != c {
		t.Fatalf("take(50) = %p, %v; want cursor c", got, err)
	}
	l.put(b)
	l.close()
	if !stopped["b"] {
		t.Fatal("close left a cursor running")
	}
	if _, err := l.take(context.Background(), "strata-", pos(20)); !errors.Is(err, ErrClosed) {
		t.Fatalf("take after close: %v", err)
	}
	l.put(c) // a cursor returned after close is stopped
	if !stopped["c"] {
		t.Fatal("a cursor returned after close kept running")
	}
}

func TestCursorWaitsLongerUntilCaughtUp(t *testing.T) {
	t.Parallel()
	c := newCursor("strata-", event.Position{}, func() {})
	c.catchUpWait = time.Hour
	// Not caught up: an empty read outlasts the poll wait (it would wait an
	// hour; the context ends it).
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if got, err := c.read(ctx, event.Position{}, 10, time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("empty read before catching up: %v, %v; want it still waiting", positions(got), err)
	}
	// Caught up: the poll wait applies again, even in the read that learns it.
	caught := true
	c.items <- item{live: &caught}
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if got, err := c.read(ctx, event.Position{}, 10, time.Millisecond); err != nil || len(got) != 0 || !c.live {
		t.Fatalf("empty read after catching up: %v, %v, live %v", positions(got), err, c.live)
	}
	behind := false
	c.items <- item{live: &behind}
	c.items <- recAt(7)
	got, _ := c.read(context.Background(), event.Position{}, 10, time.Hour)
	if !equal(positions(got), []uint64{7}) || c.live {
		t.Fatalf("after falling behind: %v, live %v", positions(got), c.live)
	}
}
