package esdb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"

	"github.com/strata-es/strata/domain/event"
)

// The global log is served from catch-up subscriptions to $all with a
// server-side stream-prefix filter (the namespace; it also excludes every
// system stream). A subscription feeds a buffer (a cursor) that ReadAll
// drains. $all is totally ordered by position and the server delivers a
// subscription's events in that order, so a cursor that continues where
// the previous page ended never skips: the only way to lose an event would
// be to resume from the wrong place, and a cursor resumes exactly from the
// last position it received.
//
// ReadAll(after) reuses a cursor when after lies between the last event it
// returned and the farthest position it has verified (its last event or a
// later checkpoint); any other position opens a new subscription from
// after. Up to WithMaxSubscriptions cursors stay open, so several
// projection runners reading at different positions each keep theirs.

const (
	cursorBuffer = 512 // events (and checkpoints) buffered per subscription
	headPage     = 128 // events per backwards page in Head
)

type item struct {
	rec        *event.Record
	checkpoint *event.Position // the server has scanned up to here
	live       *bool           // the subscription caught up (true) or fell behind (false)
	err        error
	fatal      bool // the cursor can never go past this error
}

// cursor is one subscription's buffer and the reader's place in it. The
// reader fields are used only by the caller that took the cursor from the
// pool.
type cursor struct {
	prefix string // the server-side filter: the namespace's, or one tenant's
	items  chan item
	done   chan struct{} // closed when the pump has stopped
	stop   context.CancelFunc

	last    event.Position // the last event returned, or where the cursor started
	scanned event.Position // >= last; no namespace event lies in (last, scanned]
	pending *item          // an error met after some events, returned next time
	err     error          // sticky
	live    bool           // the server said the subscription has caught up

	catchUpWait time.Duration
}

func newCursor(prefix string, from event.Position, stop context.CancelFunc) *cursor {
	return &cursor{prefix: prefix, items: make(chan item, cursorBuffer), done: make(chan struct{}), stop: stop,
		last: from, scanned: from, catchUpWait: defaultCatchUpWait}
}

// covers reports whether reading after p through the filter prefix can
// continue from this cursor.
func (c *cursor) covers(prefix string, p event.Position) bool {
	return c.prefix == prefix && !p.Less(c.last) && !c.scanned.Less(p)
}

// defaultCatchUpWait is how long an empty read waits while the
// subscription has not reported that it caught up: the server may still be
// scanning foreign events towards the next one of ours, and an empty page
// tells a runner "nothing more is visible". Servers that never send
// CaughtUp (before 23.10) pay it on every empty read; events still return
// at once.
const defaultCatchUpWait = 5 * time.Second

// read returns up to limit events after `after` (which the cursor covers).
// It waits for the first one (wait once the subscription is live,
// catchUpWait before), then takes only what is buffered.
func (c *cursor) read(ctx context.Context, after event.Position, limit int, wait time.Duration) ([]event.Record, error) {
	if c.err != nil {
		return nil, c.err
	}
	if c.last.Less(after) {
		c.last = after
	}
	var out []event.Record
	var timeout <-chan time.Time
	for len(out) < limit {
		var it item
		switch {
		case c.pending != nil:
			it, c.pending = *c.pending, nil
		case len(out) > 0:
			select {
			case it = <-c.items:
			default:
				return out, nil
			}
		default:
			if timeout == nil {
				d := wait
				if !c.live {
					d = max(wait, c.catchUpWait)
				}
				t := time.NewTimer(d)
				defer t.Stop()
				timeout = t.C
			}
			select {
			case it = <-c.items:
			case <-timeout:
				return nil, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-c.done:
				select {
				case it = <-c.items:
				default:
					c.err = errors.New("read all: subscription stopped")
					return nil, c.err
				}
			}
		}
		switch {
		case it.rec != nil:
			out = append(out, *it.rec)
			c.last = it.rec.Position
			if c.scanned.Less(c.last) {
				c.scanned = c.last
			}
		case it.checkpoint != nil:
			if c.scanned.Less(*it.checkpoint) {
				c.scanned = *it.checkpoint
			}
		case it.live != nil:
			c.live = *it.live
			if c.live && len(out) == 0 && timeout != nil {
				// Caught up with nothing for us: wait only the poll wait.
				t := time.NewTimer(wait)
				defer t.Stop()
				timeout = t.C
			}
		case it.err != nil:
			if it.fatal {
				c.err = it.err
			} else if len(out) > 0 {
				c.pending = &it
			}
			if len(out) > 0 {
				return out, nil
			}
			return nil, it.err
		}
	}
	return out, nil
}

// globalLog owns the cursors of one Store.
type globalLog struct {
	s      *Store
	ctx    context.Context // parent of every subscription; cancelled by close
	cancel context.CancelFunc
	pumps  sync.WaitGroup

	mu     sync.Mutex
	idle   []*cursor // least recently used first
	closed bool

	headMu sync.Mutex
	head   headCache
}

// headCache remembers the result of the last Head scan: head was the
// newest namespace event at or before upTo, the newest event of $all then.
type headCache struct {
	valid bool
	upTo  event.Position
	head  event.Position
}

func newGlobalLog(s *Store) *globalLog {
	ctx, cancel := context.WithCancel(context.Background())
	return &globalLog{s: s, ctx: ctx, cancel: cancel}
}

// ReadAll implements eventstore.Log: up to limit events after `after`, in
// $all order, waiting up to the poll wait (WithPollWait) for the first one.
func (s *Store) ReadAll(ctx context.Context, after event.Position, limit int) ([]event.Record, error) {
	if limit <= 0 {
		limit = 500
	}
	l := s.log
	c, err := l.take(ctx, s.names.prefix, after)
	if err != nil {
		return nil, err
	}
	recs, err := c.read(ctx, after, limit, s.cfg.pollWait)
	l.put(c)
	return recs, err
}

// ReadTenant implements eventstore.TenantLog on EventStoreDB's terms: a
// subscription to $all that the server filters by the tenant's stream-name
// prefix (<namespace>-<tenant>.), so the other tenants' events never leave
// the server (it still scans them: $all has no index by tenant). Its cursor
// is kept and continued like ReadAll's. An empty answer means the tenant
// has no event between after and the head as it was when the call began:
// it returns only once the server has said it caught up, or has scanned
// to that head, never on the poll wait alone (the server may still be
// passing other tenants' events).
func (s *Store) ReadTenant(ctx context.Context, tenant string, after event.Position, limit int) ([]event.Record, error) {
	if !tenantPattern.MatchString(tenant) {
		return nil, fmt.Errorf("read tenant: %w: tenant %q", ErrInvalidName, tenant)
	}
	if limit <= 0 {
		limit = 500
	}
	head, err := s.Head(ctx)
	if err != nil {
		return nil, err
	}
	if !after.Less(head) {
		return nil, nil // nothing of anyone's up to the head
	}
	l := s.log
	c, err := l.take(ctx, s.names.prefix+tenant+".", after)
	if err != nil {
		return nil, err
	}
	defer l.put(c)
	proofBy := time.Now().Add(2 * c.catchUpWait)
	for {
		recs, err := c.read(ctx, after, limit, s.cfg.pollWait)
		if err != nil || len(recs) > 0 || c.live || !c.scanned.Less(head) {
			return recs, err
		}
		if time.Now().After(proofBy) {
			// A server that sends neither CaughtUp (before 23.10) nor a
			// checkpoint at the head: read the namespace's events up to
			// the head and keep the tenant's.
			return s.readTenantFiltered(ctx, tenant, after, head, limit)
		}
	}
}

// readTenantFiltered is ReadTenant through the namespace's own reads: up
// to limit events of tenant after `after`, scanning the namespace's events
// up to head.
func (s *Store) readTenantFiltered(ctx context.Context, tenant string, after, head event.Position, limit int) ([]event.Record, error) {
	var out []event.Record
	for after.Less(head) && len(out) < limit {
		recs, err := s.ReadAll(ctx, after, 500)
		if err != nil {
			return out, err
		}
		for _, r := range recs { // none yet: the server is still scanning
			if head.Less(r.Position) || len(out) == limit {
				return out, nil
			}
			if r.Tenant == tenant {
				out = append(out, r)
			}
			after = r.Position
		}
	}
	return out, nil
}

// LatestCheckpoint returns the farthest position p >= after up to which the
// server has verified that the namespace has no event after `after`, as far
// as an open subscription knows (after itself when none does). A runner that
// has applied everything up to after, and whose last ReadAll came back
// empty, may store p as its checkpoint: ReadAll(p) continues the same
// subscription, and a restart resumes from p instead of rescanning every
// foreign event between (which matters on a shared server where the
// namespace's events are rare). Both commit and prepare positions count.
func (s *Store) LatestCheckpoint(after event.Position) event.Position {
	l := s.log
	l.mu.Lock()
	defer l.mu.Unlock()
	best := after
	for _, c := range l.idle {
		if c.err == nil && c.covers(s.names.prefix, after) && best.Less(c.scanned) {
			best = c.scanned
		}
	}
	return best
}

// take removes a cursor of the filter prefix that can continue after
// `after` from the pool, or opens a new one.
func (l *globalLog) take(ctx context.Context, prefix string, after event.Position) (*cursor, error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, fmt.Errorf("read all: %w", ErrClosed)
	}
	for i := len(l.idle) - 1; i >= 0; i-- {
		if c := l.idle[i]; c.covers(prefix, after) {
			l.idle = append(l.idle[:i], l.idle[i+1:]...)
			l.mu.Unlock()
			return c, nil
		}
	}
	l.mu.Unlock()
	return l.open(ctx, prefix, after)
}

// put returns a cursor to the pool, closing the least recently used one
// beyond the limit.
func (l *globalLog) put(c *cursor) {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-c.done:
		if c.err == nil {
			c.stop()
			return
		}
	default:
	}
	if l.closed {
		c.stop()
		return
	}
	l.idle = append(l.idle, c)
	for len(l.idle) > l.s.cfg.maxCursors {
		l.idle[0].stop()
		l.idle = l.idle[1:]
	}
}

// open subscribes from after and starts the cursor's pump. The subscribe
// call waits for ctx; the subscription itself lives until the cursor stops.
func (l *globalLog) open(ctx context.Context, prefix string, after event.Position) (*cursor, error) {
	subCtx, stop := context.WithCancel(l.ctx)
	sub, err := l.subscribe(ctx, subCtx, prefix, after)
	if err != nil {
		stop() // also ends a subscription that completes after ctx gave up
		return nil, err
	}
	c := newCursor(prefix, after, stop)
	if w := l.s.cfg.catchUpWait; w > 0 {
		c.catchUpWait = w
	}
	l.pumps.Add(1)
	go func() {
		defer l.pumps.Done()
		l.pump(subCtx, c, sub, after)
	}()
	return c, nil
}

func (l *globalLog) subscribe(ctx, subCtx context.Context, prefix string, from event.Position) (*esdb.Subscription, error) {
	var sub *esdb.Subscription
	err := l.s.conn.call(ctx, "read all: subscribe to $all", func(c *esdb.Client) error {
		var err error
		sub, err = c.SubscribeToAll(subCtx, esdb.SubscribeToAllOptions{
			From: allFrom(from),
			Filter: &esdb.SubscriptionFilter{
				Type:     esdb.StreamFilterType,
				Prefixes: []string{prefix},
			},
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	return sub, nil
}

// pump moves a subscription's events into the cursor until the cursor
// stops or meets an event it cannot deliver. A dropped subscription is
// resubscribed from the last position received, with backoff.
func (l *globalLog) pump(ctx context.Context, c *cursor, sub *esdb.Subscription, from event.Position) {
	defer close(c.done)
	defer func() {
		if sub != nil {
			_ = sub.Close()
		}
	}()
	logger := l.s.cfg.logger
	send := func(it item) bool {
		select {
		case c.items <- it:
			return true
		case <-ctx.Done():
			return false
		}
	}
	pos := from
	const minBackoff, maxBackoff = 100 * time.Millisecond, 5 * time.Second
	backoff := minBackoff
	for {
		e := sub.Recv()
		switch {
		case e.EventAppeared != nil:
			ev := e.EventAppeared.OriginalEvent()
			if ev == nil {
				continue
			}
			p := positionOf(ev.Position)
			if !pos.IsZero() && !pos.Less(p) {
				continue // at or before where this cursor already is
			}
			pos = p
			rec, ok, err := l.s.names.record(ev)
			switch {
			case err != nil:
				send(item{err: fmt.Errorf("read all: %w", err), fatal: true})
				return
			case !ok:
				// A stream under the prefix that is not a strata stream:
				// skip it, but the position counts as scanned.
				logger.Warn("eventstoredb: skipping an event of a stream that is not a strata stream", "stream", ev.StreamID, "position", p.String())
				if !send(item{checkpoint: &p}) {
					return
				}
			default:
				if !send(item{rec: &rec}) {
					return
				}
			}
			backoff = minBackoff
		case e.CheckPointReached != nil:
			if !plausibleCheckpoint(*e.CheckPointReached) {
				continue
			}
			if p := positionOf(*e.CheckPointReached); pos.Less(p) {
				pos = p
				if !send(item{checkpoint: &p}) {
					return
				}
			}
		case e.CaughtUp != nil, e.FellBehind != nil:
			live := e.CaughtUp != nil
			if !send(item{live: &live}) {
				return
			}
		case e.SubscriptionDropped != nil:
			_ = sub.Close()
			sub = nil
			if ctx.Err() != nil {
				return
			}
			l.s.conn.suspect()
			logger.Warn("eventstoredb: $all subscription dropped; resubscribing from the last position received",
				"position", pos.String(), "err", l.s.conn.red.redact(fmt.Sprint(e.SubscriptionDropped.Error)))
			for sub == nil {
				select {
				case <-time.After(backoff):
				case <-ctx.Done():
					return
				}
				backoff = min(2*backoff, maxBackoff)
				s, err := l.subscribe(ctx, ctx, c.prefix, pos)
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					logger.Warn("eventstoredb: resubscribing to $all failed", "position", pos.String(), "err", err)
					select { // tell a waiting reader, if there is room
					case c.items <- item{err: err}:
					default:
					}
					continue
				}
				sub = s
			}
		}
	}
}

// close stops every cursor and waits for the pumps.
func (l *globalLog) close() {
	l.mu.Lock()
	l.closed = true
	for _, c := range l.idle {
		c.stop()
	}
	l.idle = nil
	l.mu.Unlock()
	l.cancel() // also stops the cursors that readers hold now
	l.pumps.Wait()
}

// Head implements eventstore.Log: the position of the newest event of the
// namespace. It reads $all backwards from its end, a page of 128 events at
// a time, until it meets a namespace event, or the position where the
// previous call met the end of $all (whose answer it then reuses). On a
// server used only by this namespace that is one small read; on a shared
// server it costs one read per 128 foreign events written since the last
// call, and the first call on a server where the namespace is empty reads
// all of $all once. Reading $all needs the $ops or $admins group.
func (s *Store) Head(ctx context.Context) (event.Position, error) {
	l := s.log
	l.headMu.Lock()
	defer l.headMu.Unlock()
	var newest, head event.Position // newest: the end of $all now
	err := s.scanBackwards(ctx, "head", func(e scanned) bool {
		if newest.IsZero() {
			newest = e.pos
		}
		if l.head.valid && !l.head.upTo.Less(e.pos) {
			head = l.head.head // nothing of ours since the last scan
			return false
		}
		if e.ours {
			head = e.pos
			return false
		}
		return true
	})
	if err != nil {
		return event.Position{}, err
	}
	if newest.IsZero() {
		newest = l.head.upTo
	}
	l.head = headCache{valid: true, upTo: newest, head: head}
	return head, nil
}

// lagScanLimit bounds the events of $all that Lag reads.
const lagScanLimit = 10000

// Lag counts the namespace's events after `after` and returns the
// recording time of the oldest of them, for the projections monitor. It
// reads $all backwards from its end down to after, so it costs one read per
// 128 events written since; past 10,000 events of $all it stops and
// reports what it has seen: then the count is a lower bound, and the
// oldest time is that of the oldest event seen (the true one is older).
func (s *Store) Lag(ctx context.Context, after event.Position) (events int64, oldest time.Time, err error) {
	n := 0
	err = s.scanBackwards(ctx, "lag", func(e scanned) bool {
		if !after.Less(e.pos) {
			return false
		}
		if e.ours {
			events++
			oldest = e.created
		}
		n++
		return n < lagScanLimit
	})
	if err != nil {
		return 0, time.Time{}, err
	}
	return events, oldest, nil
}

// scanned is one event met by scanBackwards.
type scanned struct {
	pos     event.Position
	ours    bool // a strata stream of this namespace
	created time.Time
}

// scanBackwards calls fn for the events of $all from its end backwards, a
// page at a time, until fn returns false or the start of $all.
func (s *Store) scanBackwards(ctx context.Context, op string, fn func(scanned) bool) error {
	var from esdb.AllPosition = esdb.End{}
	var fromPos event.Position
	for {
		page := make([]scanned, 0, headPage)
		err := s.conn.call(ctx, op, func(c *esdb.Client) error {
			rs, err := c.ReadAll(ctx, esdb.ReadAllOptions{Direction: esdb.Backwards, From: from}, headPage)
			if err != nil {
				return err
			}
			defer rs.Close()
			for {
				ev, err := rs.Recv()
				if errors.Is(err, io.EOF) {
					return nil
				}
				if err != nil {
					return err
				}
				if e := ev.OriginalEvent(); e != nil {
					_, _, ours := s.names.decode(e.StreamID)
					page = append(page, scanned{positionOf(e.Position), ours, e.CreatedDate})
				}
			}
		})
		if err != nil {
			return err
		}
		for _, e := range page {
			if !fromPos.IsZero() && !e.pos.Less(fromPos) {
				continue // the page's start, seen already
			}
			if !fn(e) {
				return nil
			}
		}
		if len(page) < headPage {
			return nil
		}
		fromPos = page[len(page)-1].pos
		from = esdb.Position{Commit: fromPos.Major, Prepare: fromPos.Minor}
	}
}
