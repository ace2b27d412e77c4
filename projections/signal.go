package projections

import (
	"context"
	"sync"
)

// Signal wakes any number of waiters when something happened. A waiter
// takes C before looking for work and waits on it afterwards: a Fire in
// between closes the channel it holds, so no wake-up is lost. Fire never
// blocks.
type Signal struct {
	mu sync.Mutex
	ch chan struct{}
}

// NewSignal returns a Signal.
func NewSignal() *Signal { return &Signal{ch: make(chan struct{})} }

// C returns a channel closed by the next Fire.
func (s *Signal) C() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ch
}

// Fire wakes everyone waiting on a channel from C.
func (s *Signal) Fire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.ch)
	s.ch = make(chan struct{})
}

// Forward fires to every time from fires, until ctx ends. from has the
// shape of Signal.C (e.g. the append broadcast of a serve process).
func Forward(ctx context.Context, from func() <-chan struct{}, to *Signal) {
	ch := from()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
		ch = from() // before firing: a fire from now on is seen next round
		to.Fire()
	}
}
