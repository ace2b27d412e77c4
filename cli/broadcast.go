package cli

import "sync"

// broadcast wakes any number of waiters when something happened (an append
// committed in this process). Waiters take the current channel and are
// woken when it closes; fire never blocks.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

func newBroadcast() *broadcast { return &broadcast{ch: make(chan struct{})} }

// C returns a channel closed by the next fire.
func (b *broadcast) C() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ch
}

func (b *broadcast) fire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	close(b.ch)
	b.ch = make(chan struct{})
}
