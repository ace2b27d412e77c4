package fulfilment

import (
	"encoding/json"
	"fmt"

	"github.com/strata-es/strata/commands"
	"github.com/strata-es/strata/commands/commandapi"
	"github.com/strata-es/strata/commands/fulfilment/payhttp"
	cmdinventory "github.com/strata-es/strata/commands/inventory"
	cmdorders "github.com/strata-es/strata/commands/orders"
	"github.com/strata-es/strata/commands/process"
	"github.com/strata-es/strata/domain/fulfilment"
	"github.com/strata-es/strata/domain/inventory"
	"github.com/strata-es/strata/domain/order"
)

// Name is the process's name (fulfilment.Name): its checkpoint, lease,
// dead letters and idempotency-key prefix. Renaming it makes a new process
// that sees every order again.
const Name = fulfilment.Name

// Definition is the fulfilment process for the runtime: domain/fulfilment's
// Decide, with the runtime's inputs and decisions translated. cfg is used
// as given (Processes applies the defaults).
func Definition(cfg Config) process.Definition[fulfilment.State] {
	p := fulfilment.Process{PaymentTimeout: cfg.PaymentTimeout, CapturePayments: cfg.Provider == ProviderHTTP}
	return process.Definition[fulfilment.State]{
		Name:       Name,
		EventTypes: fulfilment.EventTypes(),
		Correlate: func(ev process.Event) (string, string, bool) {
			id, ok := fulfilment.Correlate(ev.Stream)
			return id, ev.Stream, ok
		},
		Decide: func(s fulfilment.State, exists bool, in process.Input) (process.Decision[fulfilment.State], error) {
			fin, err := input(in)
			if err != nil {
				return process.Decision[fulfilment.State]{}, err
			}
			d, err := p.Decide(s, exists, fin)
			if err != nil {
				return process.Decision[fulfilment.State]{}, fmt.Errorf("fulfilment of order %s: %w", in.Instance, err)
			}
			return decision(in.Instance, d), nil
		},
	}
}

// input translates the runtime's input.
func input(in process.Input) (fulfilment.Input, error) {
	out := fulfilment.Input{Kind: fulfilment.InputKind(in.Kind), At: in.At}
	switch in.Kind {
	case process.InputEvent:
		if in.Event == nil {
			return out, fmt.Errorf("%w: event input without an event", fulfilment.ErrUnknownInput)
		}
		out.Event = &fulfilment.Event{Version: in.Event.Version, Payload: in.Event.Payload}
	case process.InputOutcome:
		if in.Outcome == nil {
			return out, fmt.Errorf("%w: outcome input without an outcome", fulfilment.ErrUnknownInput)
		}
		o := fulfilment.Outcome{Step: in.Outcome.Step, OK: in.Outcome.OK, Reason: in.Outcome.Reason}
		if o.OK && o.Step == fulfilment.StepCapture {
			var c payhttp.Capture
			if err := json.Unmarshal(in.Outcome.Result, &c); err != nil || c.CaptureID == "" {
				return out, fmt.Errorf("capture outcome %s carries no capture_id", in.Outcome.Result)
			}
			o.Reference = c.CaptureID
		}
		out.Outcome = &o
	case process.InputTimeout:
		if in.Timeout == nil {
			return out, fmt.Errorf("%w: timeout input without a timeout", fulfilment.ErrUnknownInput)
		}
		out.Timeout = &fulfilment.Timeout{Name: in.Timeout.Name}
	}
	return out, nil
}

// decision translates the domain's decision: commands become the command
// structs of commands/inventory and commands/orders (their JSON is what
// Bind decodes), intents the payhttp.Request the port executes. A void
// names the capture by the idempotency key the runtime gave it.
func decision(instance string, d fulfilment.Decision) process.Decision[fulfilment.State] {
	out := process.Decision[fulfilment.State]{State: d.State, Status: d.Status, Done: d.Done, Cancel: d.Cancel, Note: d.Note}
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

func payload(c fulfilment.Command) any {
	switch c.Name {
	case fulfilment.CommandReserve:
		return cmdinventory.Reserve{SKU: c.SKU, ReservationID: c.OrderID, Quantity: c.Quantity}
	case fulfilment.CommandRelease:
		return cmdinventory.Release{SKU: c.SKU, ReservationID: c.OrderID}
	case fulfilment.CommandCommit:
		return cmdinventory.Commit{SKU: c.SKU, ReservationID: c.OrderID}
	case fulfilment.CommandPay:
		return cmdorders.PayOrder{OrderID: c.OrderID, PaymentReference: c.Reference}
	case fulfilment.CommandCancel:
		return cmdorders.CancelOrder{OrderID: c.OrderID, Reason: c.Reason}
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
	items, err := commands.NewHandler(cmdinventory.Aggregate, d.Store, d.Idempotency, d.Config)
	if err != nil {
		return nil, fmt.Errorf("fulfilment: inventory handler: %w", err)
	}
	orders, err := commands.NewHandler(cmdorders.Aggregate, d.Store, d.Idempotency, d.Config)
	if err != nil {
		return nil, fmt.Errorf("fulfilment: order handler: %w", err)
	}
	spec := process.Spec{
		Manager: mgr,
		Commands: map[string]process.CommandFunc{
			fulfilment.CommandReserve: process.Bind[*inventory.Item, cmdinventory.Reserve](items),
			fulfilment.CommandRelease: process.Bind[*inventory.Item, cmdinventory.Release](items),
			fulfilment.CommandCommit:  process.Bind[*inventory.Item, cmdinventory.Commit](items),
			fulfilment.CommandPay:     process.Bind[*order.Order, cmdorders.PayOrder](orders),
			fulfilment.CommandCancel:  process.Bind[*order.Order, cmdorders.CancelOrder](orders),
		},
	}
	if cfg.Provider == ProviderHTTP {
		port, err := payhttp.New(payhttp.Config{URL: cfg.PaymentURL, Timeout: cfg.HTTPTimeout})
		if err != nil {
			return nil, fmt.Errorf("fulfilment: %w", err)
		}
		spec.Ports = map[string]process.Port{fulfilment.PortPayment: port}
	}
	return []process.Spec{spec}, nil
}
