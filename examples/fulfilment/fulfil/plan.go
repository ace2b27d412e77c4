package fulfil

import "github.com/strata-es/strata/domain/decision"

// reconcile issues the steps the facts call for that were not issued yet.
// It is the whole flow, written as "given what is known, what must happen
// next", so that any order of inputs ends in the same place:
//
//   - placed: reserve every line and set the payment deadline;
//   - money we captured must not be kept for an order that is cancelled,
//     or paid by another path: void it;
//   - paid: commit every line when every line is held; when a line could
//     not be held, release the others (paid_unfulfilled);
//   - cancelled: release every line held (each reservation's outcome is
//     waited for, since a late success holds stock too);
//   - open: out of stock (every outcome known, one refused) releases and
//     cancels; a passed deadline voids an outstanding capture and then
//     cancels; every line held starts the capture (http), a capture turns
//     into order.pay, a decline into a cancel.
func (p Process) reconcile(s *State, d *decision.Decision[State], instance string) {
	if !s.Placed {
		return
	}
	if s.Deadline.IsZero() {
		s.Deadline = s.PlacedAt.Add(p.PaymentTimeout)
		d.Deadlines = append(d.Deadlines, decision.Deadline{Name: DeadlinePayment, At: s.Deadline})
	}
	for i := range s.Reservations {
		r := &s.Reservations[i]
		if r.Reserve == StepNone {
			r.Reserve = StepPending
			d.Commands = append(d.Commands, decision.Command{Step: StepReserve(r.SKU), Name: CommandReserve,
				Payload: ReserveStock{SKU: r.SKU, ReservationID: s.OrderID, Quantity: r.Quantity}})
		}
	}
	resolved, held, refused := s.reservations()

	// A capture is live from the moment it is asked for until the
	// provider declines it: it may have taken the money.
	captureLive := s.Capture == StepPending || s.Capture == StepOK
	ourPayment := s.Paid && s.Capture == StepOK && s.PaymentReference == s.CaptureRef
	if captureLive && s.Void == StepNone && (s.Cancelled || s.Paid && !ourPayment) {
		p.void(s, d, instance)
	}

	switch {
	case s.Paid:
		if held == len(s.Reservations) {
			for i := range s.Reservations {
				s.commit(i, d)
			}
		} else if resolved {
			s.releaseHeld(d)
		}
	case s.Cancelled:
		s.releaseHeld(d)
	case resolved && refused > 0:
		s.releaseHeld(d)
		s.cancel(ReasonOutOfStock, d)
	case s.TimedOut:
		switch {
		case s.Capture == StepOK && s.Pay != StepNone:
			// Captured before the deadline was seen: the payment is
			// being recorded, the order is not late.
		case captureLive:
			switch s.Void {
			case StepNone:
				p.void(s, d, instance)
			case StepOK:
				s.cancel(ReasonPaymentTimeout, d)
			case StepRefused:
				// The provider would not void: the capture stands, so
				// the payment is recorded when it comes.
				s.pay(d)
			}
		default:
			s.cancel(ReasonPaymentTimeout, d)
		}
	case held == len(s.Reservations):
		if p.CapturePayments && s.Capture == StepNone {
			s.Capture = StepPending
			d.Intents = append(d.Intents, decision.Intent{Step: StepCapture, Port: PortPayment,
				Payload: Payment{Op: PaymentCapture, OrderID: s.OrderID, Amount: s.Total.Amount, Currency: s.Total.Currency}})
		}
		if s.Void == StepNone {
			s.pay(d)
		}
		if s.Capture == StepRefused {
			s.cancel(ReasonPaymentDeclined, d)
		}
	}

	if (s.Paid || s.Cancelled) && !s.DeadlineClosed {
		s.DeadlineClosed = true
		if !s.TimedOut {
			d.Cancel = append(d.Cancel, DeadlinePayment)
		}
	}
}

// void voids our capture, named by its idempotency key: the provider
// refuses a capture under a voided key from then on, so a void may run
// before the capture it voids.
func (p Process) void(s *State, d *decision.Decision[State], instance string) {
	s.Void = StepPending
	d.Intents = append(d.Intents, decision.Intent{Step: StepVoid, Port: PortPayment,
		Payload: Payment{Op: PaymentVoid, OrderID: s.OrderID, CaptureKey: decision.StepKey(Name, instance, StepCapture)}})
}

// pay records a capture the provider made as the order's payment.
func (s *State) pay(d *decision.Decision[State]) {
	if s.Capture != StepOK || s.Pay != StepNone {
		return
	}
	s.Pay = StepPending
	d.Commands = append(d.Commands, decision.Command{Step: StepPay, Name: CommandPay, Payload: PayOrder{OrderID: s.OrderID, PaymentReference: s.CaptureRef}})
}

func (s *State) cancel(reason string, d *decision.Decision[State]) {
	if s.Cancel != StepNone {
		return
	}
	s.Cancel, s.CancelAsked = StepPending, reason
	d.Commands = append(d.Commands, decision.Command{Step: StepCancel, Name: CommandCancel, Payload: CancelOrder{OrderID: s.OrderID, Reason: reason}})
}

func (s *State) commit(i int, d *decision.Decision[State]) {
	r := &s.Reservations[i]
	if r.Commit != StepNone {
		return
	}
	r.Commit = StepPending
	d.Commands = append(d.Commands, decision.Command{Step: StepCommit(r.SKU), Name: CommandCommit, Payload: CommitStock{SKU: r.SKU, ReservationID: s.OrderID}})
}

// releaseHeld releases every reservation that succeeded and is not
// released yet. One still outstanding is released once it succeeds (the
// next reconcile after its outcome).
func (s *State) releaseHeld(d *decision.Decision[State]) {
	for i := range s.Reservations {
		r := &s.Reservations[i]
		if r.Reserve == StepOK && r.Release == StepNone && r.Commit == StepNone {
			r.Release = StepPending
			d.Commands = append(d.Commands, decision.Command{Step: StepRelease(r.SKU), Name: CommandRelease, Payload: ReleaseStock{SKU: r.SKU, ReservationID: s.OrderID}})
		}
	}
}

// reservations counts: resolved (every reservation has its outcome), how
// many are held (reserved), how many were refused.
func (s *State) reservations() (resolved bool, held, refused int) {
	resolved = true
	for _, r := range s.Reservations {
		switch r.Reserve {
		case StepOK:
			held++
		case StepRefused:
			refused++
		default:
			resolved = false
		}
	}
	return resolved, held, refused
}

// settled reports that no reservation is outstanding and every one held is
// released (or its release has a definite outcome).
func (s *State) settled() bool {
	for _, r := range s.Reservations {
		if !r.Reserve.resolved() || r.Reserve == StepOK && r.Commit == StepNone && !r.Release.resolved() {
			return false
		}
	}
	return true
}

// status labels the state and says whether it is terminal.
func (s *State) status() (string, bool) {
	voidOpen := s.Void == StepPending
	switch {
	case !s.Placed && s.Cancelled:
		return StatusCancelled, true
	case !s.Placed:
		return StatusDraft, false
	case s.Paid:
		_, held, _ := s.reservations()
		if held == len(s.Reservations) {
			committed, open := 0, false
			for _, r := range s.Reservations {
				switch r.Commit {
				case StepOK:
					committed++
				case StepPending, StepNone:
					open = true
				}
			}
			switch {
			case open || voidOpen:
				return StatusCommitting, false
			case committed == len(s.Reservations):
				return StatusCompleted, true
			default: // a commit refused: the stock is not there
				return StatusPaidUnfulfilled, true
			}
		}
		resolved, _, _ := s.reservations()
		if !resolved {
			return StatusCommitting, false
		}
		if !s.settled() || voidOpen {
			return StatusReleasing, false
		}
		return StatusPaidUnfulfilled, true
	case s.Cancelled:
		if !s.settled() || voidOpen {
			return StatusReleasing, false
		}
		if s.Void == StepRefused {
			return StatusVoidRefused, true
		}
		return StatusCancelled, true
	case voidOpen:
		return StatusVoiding, false
	case s.Cancel != StepNone:
		for _, r := range s.Reservations {
			if r.Release == StepPending {
				return StatusReleasing, false
			}
		}
		return StatusCancelling, false
	}
	resolved, held, _ := s.reservations()
	switch {
	case !resolved:
		return StatusReserving, false
	case held == len(s.Reservations) && s.Pay != StepNone:
		return StatusPaying, false
	}
	return StatusAwaitingPayment, false
}
