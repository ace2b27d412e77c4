package projections

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/strata-es/strata/domain/event"
)

// Progress carries the checkpoints committed by the runners of this
// process to the queries of this process, so that a read-your-writes
// query wakes on the commit instead of polling.
type Progress struct {
	mu  sync.Mutex
	pos map[string]event.Position
	sig *Signal
}

// NewProgress returns an empty Progress.
func NewProgress() *Progress { return &Progress{pos: map[string]event.Position{}, sig: NewSignal()} }

func (p *Progress) advance(name string, pos event.Position) {
	p.mu.Lock()
	if p.pos[name].Less(pos) {
		p.pos[name] = pos
	}
	p.mu.Unlock()
	p.sig.Fire()
}

// Position returns the last checkpoint committed in this process.
func (p *Progress) Position(name string) (event.Position, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pos, ok := p.pos[name]
	return pos, ok
}

// C returns a channel closed by the next committed checkpoint.
func (p *Progress) C() <-chan struct{} { return p.sig.C() }

// Consistency waits until projections have applied a position: the wait
// behind a query's X-Consistency-Token.
type Consistency struct {
	q        Querier
	progress *Progress
	minPoll  time.Duration
	maxPoll  time.Duration
}

// NewConsistency returns a waiter reading checkpoints through q (any strata
// role; the application role may read projection_checkpoints). progress
// may be nil; when it is the one the runners of this process report to,
// waits end as soon as the covering batch commits.
func NewConsistency(q Querier, progress *Progress) *Consistency {
	return &Consistency{q: q, progress: progress, minPoll: 2 * time.Millisecond, maxPoll: 50 * time.Millisecond}
}

// WaitFor returns nil once every named projection's checkpoint is at or
// after pos, i.e. each has applied the event at pos and everything before
// it; a partitioned projection's once every partition's is. It returns ctx.Err() when ctx ends first, and the error of reading
// the checkpoints if that fails.
//
// Checkpoints committed by runners of this process wake it at once; those
// of runners elsewhere are polled, every 2ms at first, backing off to 50ms.
func (c *Consistency) WaitFor(ctx context.Context, pos event.Position, names ...string) error {
	return c.WaitGated(ctx, 0, pos, nil, names...)
}

// Gate decides whether a wait may block: it is called at most once, when
// the position is found not yet applied, before the first pause. Its error
// ends the wait; otherwise release (if not nil) is called when the wait
// ends. A wait that finds the position applied at once never calls it, so
// the common read-your-writes query costs the gate nothing.
type Gate func(ctx context.Context) (release func(), err error)

// WaitGated is WaitFor with a gate (nil: none) and a budget for the
// waiting (0: until ctx ends). The first look at the checkpoints and the
// gate run under ctx alone, so what they decide (applied already, or
// refused by the gate: a token beyond the log is a 400) does not depend on
// how short the wait is or how loaded the machine; only the waiting after
// them is bounded by wait, and its end is context.DeadlineExceeded.
func (c *Consistency) WaitGated(ctx context.Context, wait time.Duration, pos event.Position, gate Gate, names ...string) error {
	delay := c.minPoll
	budgeted := false
	for {
		var advanced <-chan struct{}
		if c.progress != nil {
			advanced = c.progress.C()
			if c.reachedLocally(pos, names) {
				return nil
			}
		}
		reached, err := reachedAll(ctx, c.q, pos, names)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		if reached {
			return nil
		}
		if gate != nil {
			release, err := gate(ctx)
			if err != nil {
				return err
			}
			if release != nil {
				defer release()
			}
			gate = nil
		}
		if wait > 0 && !budgeted {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, wait)
			defer cancel()
			budgeted = true
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-advanced:
			t.Stop()
		case <-t.C:
			delay = min(2*delay, c.maxPoll)
		}
	}
}

func (c *Consistency) reachedLocally(pos event.Position, names []string) bool {
	for _, n := range names {
		p, ok := c.progress.Position(n)
		if !ok || p.Less(pos) {
			return false
		}
	}
	return true
}

// reachedSQL tells, per name, whether every checkpoint row the projection
// runs under is at or after a position: its own row, or the rows of its
// partitions (a row split into partitions no longer counts). A name
// without rows has not reached it.
const reachedSQL = `SELECT coalesce(bool_and((c.pos_major, c.pos_minor) >= ($2::text::numeric, $3::text::numeric)), false)
FROM unnest($1::text[]) AS n(name)
LEFT JOIN projection_checkpoints c ON (c.projection = n.name OR c.partition->>'projection' = n.name) AND c.status <> 'split'
GROUP BY n.name`

// reachedAll reports whether every named projection, in all its
// partitions, has applied pos.
func reachedAll(ctx context.Context, q Querier, pos event.Position, names []string) (bool, error) {
	if names == nil {
		names = []string{}
	}
	rows, err := q.Query(ctx, reachedSQL, names, u64(pos.Major), u64(pos.Minor))
	if err != nil {
		return false, fmt.Errorf("read checkpoints: %w", err)
	}
	defer rows.Close()
	all := true
	for rows.Next() {
		var ok bool
		if err := rows.Scan(&ok); err != nil {
			return false, fmt.Errorf("read checkpoints: %w", err)
		}
		all = all && ok
	}
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("read checkpoints: %w", err)
	}
	return all, nil
}
