package fulfilcmd

import (
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
// Decide and Correlate as they are, since they speak the runtime's types
// (domain/decision). cfg is used as given (Processes applies the defaults).
func Definition(cfg Config) process.Definition[fulfil.State] {
	p := fulfil.Process{PaymentTimeout: cfg.PaymentTimeout, CapturePayments: cfg.Provider == ProviderHTTP}
	return process.Definition[fulfil.State]{
		Name:       Name,
		EventTypes: fulfil.EventTypes(),
		Correlate:  fulfil.Correlate,
		Decide:     p.Decide,
		Personal:   fulfil.Personal,
	}
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
