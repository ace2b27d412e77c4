package fulfilcmd

import (
	"encoding/json"
	"fmt"

	"github.com/strata-es/strata/commands"
	"github.com/strata-es/strata/commands/commandapi"
	"github.com/strata-es/strata/commands/process"
	"github.com/strata-es/strata/examples/fulfilment/fulfil"
	"github.com/strata-es/strata/examples/fulfilment/fulfilcmd/payhttp"
	"github.com/strata-es/strata/examples/inventory/stock"
	"github.com/strata-es/strata/examples/inventory/stockcmd"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/ordercmd"
)

// Name is the process's name (fulfilment.Name): its checkpoint, lease,
// dead letters and idempotency-key prefix. Renaming it makes a new process
// that sees every order again.
const Name = fulfil.Name

// Definition is the fulfilment process for the runtime: examples/fulfilment/fulfil's
// Decide, with the runtime's inputs and decisions translated. cfg is used
// as given (Processes applies the defaults).
func Definition(cfg Config) process.Definition[fulfil.State] {
	p := fulfil.Process{PaymentTimeout: cfg.PaymentTimeout, CapturePayments: cfg.Provider == ProviderHTTP}
	return process.Definition[fulfil.State]{
		Name:       Name,
		EventTypes: fulfil.EventTypes(),
		Correlate: func(ev process.Event) (string, string, bool) {
			id, ok := fulfil.Correlate(ev.Stream)
			return id, ev.Stream, ok
		},
		Decide: func(s fulfil.State, exists bool, in process.Input) (process.Decision[fulfil.State], error) {
			fin, err := input(in)
			if err != nil {
				return process.Decision[fulfil.State]{}, err
			}
			d, err := p.Decide(s, exists, fin)
			if err != nil {
				return process.Decision[fulfil.State]{}, fmt.Errorf("fulfilment of order %s: %w", in.Instance, err)
			}
			return decision(in.Instance, d), nil
		},
	}
}

// input translates the runtime's input.
func input(in process.Input) (fulfil.Input, error) {
	out := fulfil.Input{Kind: fulfil.InputKind(in.Kind), At: in.At}
	switch in.Kind {
	case process.InputEvent:
		if in.Event == nil {
			return out, fmt.Errorf("%w: event input without an event", fulfil.ErrUnknownInput)
		}
		out.Event = &fulfil.Event{Version: in.Event.Version, Payload: in.Event.Payload}
	case process.InputOutcome:
		if in.Outcome == nil {
			return out, fmt.Errorf("%w: outcome input without an outcome", fulfil.ErrUnknownInput)
		}
		o := fulfil.Outcome{Step: in.Outcome.Step, OK: in.Outcome.OK, Reason: in.Outcome.Reason}
		if o.OK && o.Step == fulfil.StepCapture {
			var c payhttp.Capture
			if err := json.Unmarshal(in.Outcome.Result, &c); err != nil || c.CaptureID == "" {
				return out, fmt.Errorf("capture outcome %s carries no capture_id", in.Outcome.Result)
			}
			o.Reference = c.CaptureID
		}
		out.Outcome = &o
	case process.InputTimeout:
		if in.Timeout == nil {
			return out, fmt.Errorf("%w: timeout input without a timeout", fulfil.ErrUnknownInput)
		}
		out.Timeout = &fulfil.Timeout{Name: in.Timeout.Name}
	}
	return out, nil
}

// decision translates the domain's decision: commands become the command
// structs of examples/inventory/stockcmd and examples/orders/ordercmd (their JSON is what
// Bind decodes), intents the payhttp.Request the port executes. A void
// names the capture by the idempotency key the runtime gave it.
func decision(instance string, d fulfil.Decision) process.Decision[fulfil.State] {
	out := process.Decision[fulfil.State]{State: d.State, Status: d.Status, Done: d.Done, Cancel: d.Cancel, Note: d.Note}
	for _, c := range d.Commands {
		out.Commands = append(out.Commands, process.Command{Step: c.Step, Name: c.Name, Payload: payload(c)})
	}
	for _, i := range d.Intents {
		var req payhttp.Request
		switch {
		case i.Capture != nil:
			req = payhttp.Request{Op: payhttp.OpCapture, OrderID: i.Capture.OrderID, Amount: i.Capture.Amount.Amount, Currency: i.Capture.Amount.Currency}
		case i.Void != nil:
			req = payhttp.Request{Op: payhttp.OpVoid, OrderID: i.Void.OrderID, CaptureKey: process.StepKey(Name, instance, i.Void.CaptureStep)}
		}
		out.Intents = append(out.Intents, process.Intent{Step: i.Step, Port: i.Port, Payload: req})
	}
	for _, dl := range d.Deadlines {
		out.Deadlines = append(out.Deadlines, process.Deadline{Name: dl.Name, At: dl.At})
	}
	return out
}

func payload(c fulfil.Command) any {
	switch c.Name {
	case fulfil.CommandReserve:
		return stockcmd.Reserve{SKU: c.SKU, ReservationID: c.OrderID, Quantity: c.Quantity}
	case fulfil.CommandRelease:
		return stockcmd.Release{SKU: c.SKU, ReservationID: c.OrderID}
	case fulfil.CommandCommit:
		return stockcmd.Commit{SKU: c.SKU, ReservationID: c.OrderID}
	case fulfil.CommandPay:
		return ordercmd.PayOrder{OrderID: c.OrderID, PaymentReference: c.Reference}
	case fulfil.CommandCancel:
		return ordercmd.CancelOrder{OrderID: c.OrderID, Reason: c.Reason}
	}
	// Unreachable: the domain issues the five commands above only. The
	// runner refuses a name the Spec does not bind.
	return nil
}

// Processes returns the fulfilment process for the runtime: its manager,
// the five commands bound over the inventory and order handlers (each
// under its step's idempotency key) and, for the http provider, the
// payment port.
func Processes(cfg Config, d commandapi.Deps) ([]process.Spec, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("fulfilment: %w", err)
	}
	mgr, err := process.New(Definition(cfg))
	if err != nil {
		return nil, err
	}
	items, err := commands.NewHandler(stockcmd.Aggregate, d.Store, d.Idempotency, d.Config)
	if err != nil {
		return nil, fmt.Errorf("fulfilment: inventory handler: %w", err)
	}
	orders, err := commands.NewHandler(ordercmd.Aggregate, d.Store, d.Idempotency, d.Config)
	if err != nil {
		return nil, fmt.Errorf("fulfilment: order handler: %w", err)
	}
	spec := process.Spec{
		Manager: mgr,
		Commands: map[string]process.CommandFunc{
			fulfil.CommandReserve: process.Bind[*stock.Item, stockcmd.Reserve](items),
			fulfil.CommandRelease: process.Bind[*stock.Item, stockcmd.Release](items),
			fulfil.CommandCommit:  process.Bind[*stock.Item, stockcmd.Commit](items),
			fulfil.CommandPay:     process.Bind[*order.Order, ordercmd.PayOrder](orders),
			fulfil.CommandCancel:  process.Bind[*order.Order, ordercmd.CancelOrder](orders),
		},
	}
	if cfg.Provider == ProviderHTTP {
		port, err := payhttp.New(payhttp.Config{URL: cfg.PaymentURL, Timeout: cfg.HTTPTimeout})
		if err != nil {
			return nil, fmt.Errorf("fulfilment: %w", err)
		}
		spec.Ports = map[string]process.Port{fulfil.PortPayment: port}
	}
	return []process.Spec{spec}, nil
}
