// Package orders is the orders module as the engine takes it: Module()
// holds its event codecs (order), migration line and projections
// (orderview), command routes (ordercmd) and query routes (orderquery).
// An application lists it among its modules; it has no settings.
package orders

import (
	_ "embed"

	"github.com/gorilla/mux"

	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/ordercmd"
	"github.com/strata-es/strata/examples/orders/orderquery"
	"github.com/strata-es/strata/examples/orders/orderview"
	"github.com/strata-es/strata/module"
)

// Module returns the orders module.
func Module() module.Module {
	return module.Module{
		Name:        "orders",
		Codecs:      order.Codecs,
		Migrations:  &orderview.Migrations,
		Commands:    commands,
		Projections: orderview.All,
		Queries:     orderquery.Queries,
		OpenAPI:     openAPI,
	}
}

// commands mounts the module's command routes; it has no settings.
func commands(r *mux.Router, d module.Deps) error { return ordercmd.Commands(r, d.Deps) }

// openAPI is the module's part of the API document: its paths and schemas
// (cli/openapi merges it with the engine's).
//
//go:embed openapi.yaml
var openAPI []byte
