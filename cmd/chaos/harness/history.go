package harness

import (
	"bufio"
	"encoding/json"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/strata-es/strata/examples/customers/customer"
	"github.com/strata-es/strata/examples/orders/order"
)

// Outcome is what the harness learned about a command, Jepsen style.
type Outcome string

const (
	// OK: acknowledged (2xx, possibly a replay of the stored response);
	// its events must exist exactly once.
	OK Outcome = "ok"
	// Fail: definitely rejected (a 4xx that the server decided); no event
	// of it may exist.
	Fail Outcome = "fail"
	// Info: indeterminate (timeout, dropped connection, 5xx) and still so
	// after every retry; its events may exist at most once.
	Info Outcome = "info"
)

// Attempt is one HTTP request of a command.
type Attempt struct {
	Start, End time.Time
	Target     int    // index of the serve process
	Status     int    // 0: no response
	Code       string // the error code of an error body
	Err        string // transport error
	RetryAfter bool   // a Retry-After header was present
	Replayed   bool   // Idempotent-Replayed: true
	Outcome    Outcome
}

// Op is one command of the history, with every attempt it took.
type Op struct {
	ID     int
	Client int
	Tenant string
	Order  string
	// Customer and Email: a registration's customer and the address it
	// takes (Order is then empty).
	Customer string `json:",omitempty"`
	Email    string `json:",omitempty"`
	Kind     string // create, add_line, remove_line, place, pay, cancel; register
	Key      string // Idempotency-Key, the same for every attempt
	Start    time.Time
	End      time.Time
	Attempts []Attempt
	Outcome  Outcome
	Version  int64  // ok: the order's version after the command
	Status   int    // the final status (0 when unresolved)
	Code     string // fail: the error code
	// cmd is the request every attempt sent (MOVE sends it again after
	// the move, to see its stored outcome replayed).
	cmd command
}

// streamID is the stream the command appends to: its customer's for a
// registration, else its order's.
func (o *Op) streamID() string {
	if o.Customer != "" {
		return customer.StreamID(o.Customer)
	}
	return order.StreamID(o.Order)
}

// hadInfo reports whether some attempt was indeterminate (the command
// needed the retry with its idempotency key to resolve).
func (o *Op) hadInfo() bool {
	for _, a := range o.Attempts {
		if a.Outcome == Info {
			return true
		}
	}
	return false
}

// history collects the operations of a load run.
type history struct {
	mu  sync.Mutex
	ops []*Op
}

func (h *history) add(op *Op) {
	h.mu.Lock()
	op.ID = len(h.ops)
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

// Ops returns the operations ordered by start.
func (h *history) Ops() []*Op {
	h.mu.Lock()
	out := append([]*Op(nil), h.ops...)
	h.mu.Unlock()
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out
}

// attempts returns every attempt of every operation.
func (h *history) attempts() []Attempt {
	var out []Attempt
	for _, op := range h.Ops() {
		out = append(out, op.Attempts...)
	}
	return out
}

// WriteFile stores the history as JSON lines, one operation per line.
func (h *history) WriteFile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, op := range h.Ops() {
		if err := enc.Encode(op); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
