// Package inventory is the inventory module as the engine takes it:
// Module() holds its event codecs (stock), migration line and projection
// (stockview), command routes (stockcmd) and query routes (stockquery). It
// has no settings.
package inventory

import (
	_ "embed"

	"github.com/gorilla/mux"

	"github.com/strata-es/strata/examples/inventory/stock"
	"github.com/strata-es/strata/examples/inventory/stockcmd"
	"github.com/strata-es/strata/examples/inventory/stockquery"
	"github.com/strata-es/strata/examples/inventory/stockview"
	"github.com/strata-es/strata/module"
)

// Module returns the inventory module.
func Module() module.Module {
	return module.Module{
		Name:        "inventory",
		Codecs:      stock.Codecs,
		Migrations:  &stockview.Migrations,
		Commands:    commands,
		Projections: stockview.All,
		Queries:     stockquery.Queries,
		OpenAPI:     openAPI,
	}
}

// commands mounts the module's command routes; it has no settings.
func commands(r *mux.Router, d module.Deps) error { return stockcmd.Commands(r, d.Deps) }

// openAPI is the module's part of the API document: its paths and schemas
// (cli/openapi merges it with the engine's).
//
//go:embed openapi.yaml
var openAPI []byte
