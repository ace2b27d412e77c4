package linearize

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/anishathalye/porcupine"
)

// Call is a recorded invocation whose return is still to be recorded.
type Call int

// history is the recorder both models share: operations stamped by one
// logical clock, safe for concurrent use.
type history struct {
	clock atomic.Int64
	mu    sync.Mutex
	ops   []porcupine.Operation
	open  map[Call]bool // invoked, not yet returned
	drop  map[Call]bool // to leave out: an operation with neither effect nor a known output
	info  map[Call]bool // indeterminate: returned without a known outcome
}

// call records an invocation; input builds the operation's input from
// its Call (appends are named by it).
func (h *history) call(client int, input func(Call) any) Call {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.open == nil {
		h.open, h.drop, h.info = map[Call]bool{}, map[Call]bool{}, map[Call]bool{}
	}
	// The tick is taken under the lock so that ops are appended in call
	// order; a caller's invocation happens after call returns, so the
	// stamp is no later than the real invocation.
	c := Call(len(h.ops))
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: input(c), Call: h.clock.Add(1)})
	h.open[c] = true
	return c
}

func (h *history) ret(c Call, output any) {
	t := h.clock.Add(1) // after the real return: stamped before taking the lock
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops[c].Output, h.ops[c].Return = output, t
	delete(h.open, c)
}

// indeterminate records that c returned without a known outcome: its
// effect may happen at any time after its call, also after its return (a
// commit the server finishes after the client gave up), so porcupine is
// told it returned at the end of the history.
func (h *history) indeterminate(c Call, output any) {
	t := h.clock.Add(1)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops[c].Output = output
	// The real return is kept as metadata: the visualisation shows it,
	// and a test can show what treating it as the return would do.
	h.ops[c].Metadata = Returned(t)
	h.info[c] = true
	delete(h.open, c)
}

// Returned is the metadata of an indeterminate operation: when its caller
// gave up on it (the history places its return at the end).
type Returned int64

func (r Returned) String() string {
	return fmt.Sprintf("outcome unknown; the caller gave up at t=%d", int64(r))
}

// forget leaves c out of the history: a read whose answer was lost has no
// effect and says nothing.
func (h *history) forget(c Call) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.drop[c] = true
	delete(h.open, c)
}

// operations returns the history for porcupine: indeterminate operations,
// and any still open, return after everything else. open reports how many
// were still open (a recorder bug or an abandoned goroutine).
func (h *history) operations(unknown func(input any) any) (ops []porcupine.Operation, open int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	end := h.clock.Load() + 1
	for i, op := range h.ops {
		c := Call(i)
		switch {
		case h.drop[c]:
			continue
		case h.open[c]:
			open++
			op.Output = unknown(op.Input)
			op.Return = end
		case h.info[c]:
			op.Return = end
		}
		ops = append(ops, op)
	}
	return ops, open
}

// Counts summarises a history.
type Counts struct {
	Operations, Indeterminate, Open int
}

func (h *history) counts() Counts {
	h.mu.Lock()
	defer h.mu.Unlock()
	return Counts{Operations: len(h.ops) - len(h.drop), Indeterminate: len(h.info), Open: len(h.open)}
}
