package processtest

import (
	"sync"
	"time"
)

// Clock is a clock the test moves: the Runtime's runner takes deadlines'
// due times, steps' retry times and the times it records from it, and the
// Runtime's command handlers (Deps) decide at it. It stands still until
// Set or Advance moves it.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock standing at start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock d forward.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Set moves the clock to t (which may be earlier: a clock stepped back).
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}
