// Package modules lists the application's bounded contexts: the one place
// that names them (ARCHITECTURE decision 9). The engine's packages never
// import a module; cmd/strata wires what this list holds, and tools and
// tests that need every module (the fault harness, the benchmarks, the
// engine's integration tests) take it from here.
package modules

import (
	"errors"
	"fmt"
	"sort"

	"github.com/gorilla/mux"

	"github.com/strata-es/strata/commands/commandapi"
	"github.com/strata-es/strata/commands/process"
	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/examples/fulfilment/fulfil"
	"github.com/strata-es/strata/examples/fulfilment/fulfilcmd"
	"github.com/strata-es/strata/examples/fulfilment/fulfilquery"
	"github.com/strata-es/strata/examples/fulfilment/fulfilview"
	"github.com/strata-es/strata/examples/inventory/stock"
	"github.com/strata-es/strata/examples/inventory/stockcmd"
	"github.com/strata-es/strata/examples/inventory/stockquery"
	"github.com/strata-es/strata/examples/inventory/stockview"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/ordercmd"
	"github.com/strata-es/strata/examples/orders/orderquery"
	"github.com/strata-es/strata/examples/orders/orderview"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/readmodels"
	"github.com/strata-es/strata/readmodels/queryapi"
)

// All returns the modules, in a stable order. A new bounded context is one
// more line here.
func All() Set {
	return Set{
		{Name: "orders", Codecs: order.Codecs, Migrations: &orderview.Migrations, Commands: ordercmd.Commands, Projections: orderview.All, Queries: orderquery.Queries},
		{Name: "inventory", Codecs: stock.Codecs, Migrations: &stockview.Migrations, Commands: stockcmd.Commands, Projections: stockview.All, Queries: stockquery.Queries},
		{Name: "fulfilment", Codecs: fulfil.Codecs, Migrations: &fulfilview.Migrations, Projections: fulfilview.All, Queries: fulfilquery.Queries, Processes: fulfilmentProcesses},
	}
}

// fulfilmentProcesses reads the payment settings (STRATA_PAYMENT_*) and
// makes the fulfilment process manager.
func fulfilmentProcesses(d ProcessDeps) ([]process.Spec, error) {
	cfg, err := fulfilcmd.ConfigFromEnv(d.Getenv)
	if err != nil {
		return nil, err
	}
	return fulfilcmd.Processes(cfg, d.Deps)
}

// Module is one bounded context: what the engine needs of it. Every part
// but Name and Codecs is optional.
type Module struct {
	// Name identifies the module in messages.
	Name string
	// Codecs are the module's event types.
	Codecs func() []event.Codec
	// Migrations is the module's own migration line (its tables).
	Migrations *db.Line
	// Commands mounts the module's command routes (commandapi.Mount per
	// aggregate type).
	Commands func(r *mux.Router, d commandapi.Deps) error
	// Projections returns the module's projections writing into their
	// live tables.
	Projections func() []projections.Projection
	// Queries returns the module's query routes.
	Queries func(d *readmodels.DB) []queryapi.Route
	// Processes returns the module's process managers (ARCHITECTURE
	// decision 10), with the commands they issue bound to d's store and the
	// ports of their external effects; a module reads its own settings
	// through d.Getenv.
	Processes func(d ProcessDeps) ([]process.Spec, error)
}

// ProcessDeps is what a module's process managers are made with: the
// command side's dependencies (their commands run through the same
// handlers, under idempotency keys) and the process's settings.
type ProcessDeps struct {
	commandapi.Deps
	Getenv func(string) string
}

// Set is the modules of one process.
type Set []Module

// Registry returns the one registry holding every module's codecs: every
// path that decodes events (handlers, runners, rebuilds, retries, relay
// consumers, replay) gets this one. It fails on an event type two modules
// both claim.
func (s Set) Registry() (*event.Registry, error) {
	var codecs []event.Codec
	owner := map[string]string{}
	for _, m := range s {
		for _, c := range m.Codecs() {
			if o, dup := owner[c.Type]; dup {
				return nil, fmt.Errorf("modules %s and %s both register event type %q", o, m.Name, c.Type)
			}
			owner[c.Type] = m.Name
			codecs = append(codecs, c)
		}
	}
	return event.NewRegistry(codecs...), nil
}

// MustRegistry is Registry for tests and tools, where a clash is a bug.
func (s Set) MustRegistry() *event.Registry {
	r, err := s.Registry()
	if err != nil {
		panic(err)
	}
	return r
}

// Projections returns every module's projections, in module order; it
// fails on a projection name two modules both use (the name is the
// checkpoint key).
func (s Set) Projections() []projections.Projection {
	var out []projections.Projection
	for _, m := range s {
		if m.Projections != nil {
			out = append(out, m.Projections()...)
		}
	}
	return out
}

// Tables returns every table the modules' projections write (their live
// tables), sorted: what a tool resets or compares to cover every read model.
func (s Set) Tables() []string {
	var out []string
	for _, p := range s.Projections() {
		out = append(out, p.Tables()...)
	}
	sort.Strings(out)
	return out
}

// CheckProjections reports projection names used twice.
func (s Set) CheckProjections() error {
	seen := map[string]bool{}
	var errs []error
	for _, p := range s.Projections() {
		if seen[p.Name()] {
			errs = append(errs, fmt.Errorf("projection name %q is used twice", p.Name()))
		}
		seen[p.Name()] = true
	}
	return errors.Join(errs...)
}

// Lines returns the modules' migration lines, in module order (the
// engine's own line is always applied first).
func (s Set) Lines() []db.Line {
	var out []db.Line
	for _, m := range s {
		if m.Migrations != nil {
			out = append(out, *m.Migrations)
		}
	}
	return out
}

// MountCommands mounts every module's command routes on r.
func (s Set) MountCommands(r *mux.Router, d commandapi.Deps) error {
	for _, m := range s {
		if m.Commands != nil {
			if err := m.Commands(r, d); err != nil {
				return fmt.Errorf("module %s: %w", m.Name, err)
			}
		}
	}
	return nil
}

// Queries returns every module's query routes.
func (s Set) Queries(d *readmodels.DB) []queryapi.Route {
	var out []queryapi.Route
	for _, m := range s {
		if m.Queries != nil {
			out = append(out, m.Queries(d)...)
		}
	}
	return out
}

// Processes returns every module's process managers; it fails on a
// module's bad settings and on a process name used twice or also used by
// a projection (the name is a checkpoint key).
func (s Set) Processes(d ProcessDeps) ([]process.Spec, error) {
	seen := map[string]string{}
	for _, p := range s.Projections() {
		seen[p.Name()] = "a projection"
	}
	var out []process.Spec
	for _, m := range s {
		if m.Processes == nil {
			continue
		}
		specs, err := m.Processes(d)
		if err != nil {
			return nil, fmt.Errorf("module %s: %w", m.Name, err)
		}
		for _, sp := range specs {
			name := sp.Manager.Name()
			if by, dup := seen[name]; dup {
				return nil, fmt.Errorf("module %s: process name %q is used by %s too", m.Name, name, by)
			}
			seen[name] = "module " + m.Name
			out = append(out, sp)
		}
	}
	return out, nil
}
