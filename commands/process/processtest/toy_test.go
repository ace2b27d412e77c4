package processtest_test

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-es/strata/commands/process"
	"github.com/strata-es/strata/domain/event"
)

// The toy process of the kit's tests: a ticket, once opened, is assigned
// (command test.assign), then someone is notified (intent on port
// "notifier"); closing it ends the instance, and so does its escalation
// deadline (TimeoutMS after it was opened, by the event's At).

const (
	typeOpened = "test.opened"
	typeClosed = "test.closed"
)

type opened struct {
	ID        string `json:"id"`
	TimeoutMS int64  `json:"timeout_ms,omitempty"`
}

func (opened) EventType() string { return typeOpened }

type closed struct {
	ID string `json:"id"`
}

func (closed) EventType() string { return typeClosed }

// The registry decodes payloads as values (event.Registry.Decode): a
// scenario with Codecs gives Decide the value even for a pointer the test
// wrote, as the runtime would.
var registry = event.NewRegistry(
	event.Codec{Type: typeOpened, Version: 1, New: func() event.Payload { return &opened{} }},
	event.Codec{Type: typeClosed, Version: 1, New: func() event.Payload { return &closed{} }},
)

type assign struct {
	Ticket string `json:"ticket"`
}

type ticket struct {
	Ticket   string `json:"ticket"`
	Assigned bool   `json:"assigned,omitempty"`
	Notified bool   `json:"notified,omitempty"`
}

func decideTicket(s ticket, exists bool, in process.Input) (process.Decision[ticket], error) {
	keep := func(status, note string) (process.Decision[ticket], error) {
		return process.Decision[ticket]{State: s, Status: status, Note: note}, nil
	}
	switch in.Kind {
	case process.InputEvent:
		switch p := in.Event.Payload.(type) {
		case opened:
			if exists {
				return keep(statusOf(s), "opened again")
			}
			timeout := time.Hour
			if p.TimeoutMS > 0 {
				timeout = time.Duration(p.TimeoutMS) * time.Millisecond
			}
			s.Ticket = p.ID
			return process.Decision[ticket]{State: s, Status: "assigning",
				Commands:  []process.Command{{Step: "assign", Name: "test.assign", Payload: assign{Ticket: p.ID}}},
				Deadlines: []process.Deadline{{Name: "escalate", At: in.At.Add(timeout)}}}, nil
		case closed:
			return process.Decision[ticket]{State: s, Status: "closed", Done: true}, nil
		}
		return process.Decision[ticket]{}, fmt.Errorf("unexpected event %T", in.Event.Payload)
	case process.InputOutcome:
		switch o := in.Outcome; {
		case o.Step == "assign" && o.OK:
			s.Assigned = true
			return process.Decision[ticket]{State: s, Status: "notifying",
				Intents: []process.Intent{{Step: "notify", Port: "notifier", Payload: map[string]string{"ticket": s.Ticket}}}}, nil
		case o.Step == "assign":
			return process.Decision[ticket]{State: s, Status: "unassigned", Done: true, Note: o.Reason}, nil
		case o.Step == "notify" && o.OK:
			s.Notified = true
			return keep("waiting", "")
		case o.Step == "notify":
			return process.Decision[ticket]{State: s, Status: "declined", Done: true, Note: o.Reason}, nil
		}
		return process.Decision[ticket]{}, fmt.Errorf("%w: %s", errUnknownStep, in.Outcome.Step)
	case process.InputTimeout:
		return process.Decision[ticket]{State: s, Status: "escalated", Done: true, Cancel: []string{"escalate"}}, nil
	}
	return process.Decision[ticket]{}, fmt.Errorf("unexpected input %s", in.Kind)
}

var errUnknownStep = fmt.Errorf("unknown step")

func statusOf(s ticket) string {
	switch {
	case s.Notified:
		return "waiting"
	case s.Assigned:
		return "notifying"
	}
	return "assigning"
}

var ticketDefinition = process.Definition[ticket]{
	Name:       "ticket",
	EventTypes: []string{typeOpened, typeClosed},
	Correlate: func(ev process.Event) (string, string, bool) {
		switch p := ev.Payload.(type) {
		case opened:
			return p.ID, ev.Stream, true
		case closed:
			return p.ID, ev.Stream, true
		}
		return "", "", false
	},
	Decide: decideTicket,
}

// spy is a testing.TB that records failures instead of failing the test:
// the kit's own tests prove that it fails a test when it should. Fatal
// ends the spied goroutine as testing's does; everything else (Cleanup,
// Name...) is the real test's.
type spy struct {
	testing.TB
	mu   sync.Mutex
	msgs []string
}

func (s *spy) Helper() {}

func (s *spy) Errorf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.msgs = append(s.msgs, fmt.Sprintf(format, args...))
}

func (s *spy) Error(args ...any) { s.Errorf("%s", fmt.Sprint(args...)) }

func (s *spy) Fatalf(format string, args ...any) {
	s.Errorf(format, args...)
	runtime.Goexit()
}

func (s *spy) Fatal(args ...any) { s.Fatalf("%s", fmt.Sprint(args...)) }

func (s *spy) failures() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.msgs, "\n")
}

// failures runs fn with a spy in a goroutine of its own (a Fatal ends it)
// and returns what it reported.
func failures(t *testing.T, fn func(tb testing.TB)) string {
	t.Helper()
	s := &spy{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(s)
	}()
	<-done
	return s.failures()
}
