package fulfil

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/strata-es/strata/domain/decision"
	"github.com/strata-es/strata/examples/orders/order"
)

// ErrUnknownStep: an outcome names a step this process never issues — a bug
// or a foreign input; the runtime parks the instance.
var ErrUnknownStep = errors.New("fulfilment: outcome of an unknown step")

// ErrUnknownInput: an input of no known kind, or an event payload that is
// not an order event the process consumes.
var ErrUnknownInput = errors.New("fulfilment: unknown input")

// ErrNoCaptureID: a capture succeeded without the provider's capture ID,
// the reference the order would be paid with; the runtime parks the
// instance rather than pay without one.
var ErrNoCaptureID = errors.New("fulfilment: capture outcome without a capture_id")

// Decide is the process: it folds one input into the state and then
// reconciles, issuing every step the facts now call for that was not
// issued before. Because each step is guarded by its own state, the same
// input twice (a duplicate event, outcome or timeout) changes nothing, and
// the order inputs arrive in does not matter beyond what the facts say.
//
// A Done state is returned unchanged: the runtime does not give a terminal
// instance its later events, and a late outcome (a capture answered after
// its void) needs nothing.
//
// An error (a foreign input, the outcome of a step never issued) parks the
// instance: the runtime keeps the decision out.
func (p Process) Decide(s State, exists bool, in decision.Input) (decision.Decision[State], error) {
	d, err := p.decide(s, exists, in)
	if err != nil {
		return decision.Decision[State]{}, fmt.Errorf("fulfilment of order %s: %w", in.Instance, err)
	}
	return d, nil
}

func (p Process) decide(s State, exists bool, in decision.Input) (decision.Decision[State], error) {
	s = s.clone()
	if s.Done {
		return decision.Decision[State]{State: s, Status: s.Status, Done: true, Note: "terminal: input ignored"}, nil
	}
	var note string
	var err error
	switch in.Kind {
	case decision.InputEvent:
		if in.Event == nil {
			return decision.Decision[State]{}, fmt.Errorf("%w: event input without an event", ErrUnknownInput)
		}
		note, err = s.applyEvent(exists, *in.Event)
	case decision.InputOutcome:
		if in.Outcome == nil {
			return decision.Decision[State]{}, fmt.Errorf("%w: outcome input without an outcome", ErrUnknownInput)
		}
		note, err = s.applyOutcome(*in.Outcome)
	case decision.InputTimeout:
		if in.Timeout == nil {
			return decision.Decision[State]{}, fmt.Errorf("%w: timeout input without a timeout", ErrUnknownInput)
		}
		note = s.applyTimeout(*in.Timeout)
	default:
		return decision.Decision[State]{}, fmt.Errorf("%w: kind %q", ErrUnknownInput, in.Kind)
	}
	if err != nil {
		return decision.Decision[State]{}, err
	}
	d := decision.Decision[State]{}
	if s.Untracked {
		s.Status, s.Done = StatusUntracked, true
	} else {
		p.reconcile(&s, &d, in.Instance)
		s.Status, s.Done = s.status()
	}
	d.State, d.Status, d.Done, d.Note = s, s.Status, s.Done, note
	return d, nil
}

// applyEvent folds an order event into the state.
func (s *State) applyEvent(exists bool, ev decision.Event) (string, error) {
	if exists && ev.Version <= s.Version {
		return fmt.Sprintf("duplicate event (version %d, at %d): ignored", ev.Version, s.Version), nil
	}
	payload := deref(ev.Payload)
	if _, created := payload.(order.Created); !exists && !created {
		s.Untracked, s.Version = true, ev.Version
		return fmt.Sprintf("first event seen is %T, not order.created: the order predates the process, left alone", payload), nil
	}
	s.Version = ev.Version
	switch e := payload.(type) {
	case order.Created:
		s.OrderID, s.Currency = e.OrderID, e.Currency
		return "order created", nil
	case order.LineAdded:
		if i := s.line(e.ProductID); i >= 0 {
			s.Lines[i].Quantity += e.Quantity
		} else {
			s.Lines = append(s.Lines, Line{SKU: e.ProductID, Quantity: e.Quantity})
		}
		return "line added: " + e.ProductID, nil
	case order.LineRemoved:
		if i := s.line(e.ProductID); i >= 0 {
			s.Lines = slices.Delete(s.Lines, i, i+1)
		}
		return "line removed: " + e.ProductID, nil
	case order.Placed:
		if s.Placed {
			return "placed again: ignored", nil
		}
		s.Placed, s.PlacedAt, s.Total = true, e.At, e.Total
		for _, l := range s.Lines {
			s.Reservations = append(s.Reservations, Reservation{SKU: l.SKU, Quantity: l.Quantity})
		}
		return fmt.Sprintf("order placed with %d line(s)", len(s.Lines)), nil
	case order.Paid:
		s.Paid, s.PaymentReference = true, e.PaymentReference
		return "order paid: " + e.PaymentReference, nil
	case order.Cancelled:
		s.Cancelled, s.CancelReason = true, e.Reason
		return "order cancelled: " + e.Reason, nil
	default:
		return "", fmt.Errorf("%w: event payload %T", ErrUnknownInput, ev.Payload)
	}
}

// applyOutcome records a step's outcome. An outcome for a step that is not
// pending (delivered twice) changes nothing. A capture's carries the
// provider's capture ID (Captured), the order's payment reference.
func (s *State) applyOutcome(o decision.Outcome) (string, error) {
	st, ok := s.step(o.Step)
	if !ok {
		return "", fmt.Errorf("%w: %q", ErrUnknownStep, o.Step)
	}
	if *st != StepPending {
		return fmt.Sprintf("outcome of %s again (it is %s): ignored", o.Step, *st), nil
	}
	if o.OK {
		if o.Step == StepCapture {
			var c Captured
			if err := json.Unmarshal(o.Result, &c); err != nil || c.CaptureID == "" {
				return "", fmt.Errorf("%w: %s", ErrNoCaptureID, o.Result)
			}
			s.CaptureRef = c.CaptureID
		}
		*st = StepOK
		return o.Step + ": ok", nil
	}
	*st = StepRefused
	s.LastRefusal = o.Step + ": " + o.Reason
	return o.Step + " refused: " + o.Reason, nil
}

func (s *State) applyTimeout(t decision.Timeout) string {
	if t.Name != DeadlinePayment {
		return "unknown deadline " + t.Name + ": ignored"
	}
	if s.TimedOut {
		return "payment deadline again: ignored"
	}
	s.TimedOut = true
	return "payment deadline passed"
}

// step returns the state of the step with key, false for a key the process
// never issues.
func (s *State) step(key string) (*StepState, bool) {
	switch key {
	case StepCapture:
		return &s.Capture, true
	case StepVoid:
		return &s.Void, true
	case StepPay:
		return &s.Pay, true
	case StepCancel:
		return &s.Cancel, true
	}
	kind, sku, ok := strings.Cut(key, ":")
	if !ok {
		return nil, false
	}
	for i := range s.Reservations {
		if s.Reservations[i].SKU != sku {
			continue
		}
		switch kind {
		case "reserve":
			return &s.Reservations[i].Reserve, true
		case "release":
			return &s.Reservations[i].Release, true
		case "commit":
			return &s.Reservations[i].Commit, true
		}
	}
	return nil, false
}

func (s *State) line(sku string) int {
	return slices.IndexFunc(s.Lines, func(l Line) bool { return l.SKU == sku })
}

// clone copies the slices, so that a decision never aliases the state it
// was given (a caller may keep both).
func (s State) clone() State {
	s.Lines = slices.Clone(s.Lines)
	s.Reservations = slices.Clone(s.Reservations)
	return s
}

func deref(p any) any {
	switch e := p.(type) {
	case nil:
		return nil
	case *order.Created:
		return *e
	case *order.LineAdded:
		return *e
	case *order.LineRemoved:
		return *e
	case *order.Placed:
		return *e
	case *order.Paid:
		return *e
	case *order.Cancelled:
		return *e
	}
	return p
}
