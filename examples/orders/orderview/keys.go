package orderview

import (
	"fmt"
	"time"

	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/projections"
)

// orderID returns the order the event belongs to, from its stream, and
// checks that the payload agrees.
func orderID(ev projections.Event) (string, error) {
	id, ok := order.OrderIDFromStream(ev.Stream)
	if !ok {
		return "", fmt.Errorf("%w: stream %q is not an order stream", projections.ErrUnexpectedEvent, ev.Stream)
	}
	var inPayload string
	switch e := ev.Payload.(type) {
	case order.Created:
		inPayload = e.OrderID
	case order.LineAdded:
		inPayload = e.OrderID
	case order.LineRemoved:
		inPayload = e.OrderID
	case order.Placed:
		inPayload = e.OrderID
	case order.Paid:
		inPayload = e.OrderID
	case order.Cancelled:
		inPayload = e.OrderID
	}
	if inPayload != "" && inPayload != id {
		return "", fmt.Errorf("%w: stream %q holds an event of order %q", projections.ErrUnexpectedEvent, ev.Stream, inPayload)
	}
	return id, nil
}

// orderRun is the events of one order within a batch, in log order.
type orderRun struct {
	id  string
	evs []projections.Event
}

// byOrder splits a tenant's events into runs per order, in the order each
// order first appears.
func byOrder(evs []projections.Event) ([]orderRun, error) {
	at := map[string]int{}
	var runs []orderRun
	for _, ev := range evs {
		id, err := orderID(ev)
		if err != nil {
			return nil, err
		}
		i, ok := at[id]
		if !ok {
			i = len(runs)
			at[id] = i
			runs = append(runs, orderRun{id: id})
		}
		runs[i].evs = append(runs[i].evs, ev)
	}
	return runs, nil
}

func timePtr(t time.Time) *time.Time { return &t }
