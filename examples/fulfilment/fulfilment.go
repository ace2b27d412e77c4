// Package fulfilment is the fulfilment module as the engine takes it:
// Module() holds its event codecs (fulfil), migration line and projection
// (fulfilview), query routes (fulfilquery), its process manager
// (fulfilcmd) and the payment settings the process reads.
package fulfilment

import (
	_ "embed"

	"github.com/strata-es/strata/commands/process"
	"github.com/strata-es/strata/examples/fulfilment/fulfil"
	"github.com/strata-es/strata/examples/fulfilment/fulfilcmd"
	"github.com/strata-es/strata/examples/fulfilment/fulfilquery"
	"github.com/strata-es/strata/examples/fulfilment/fulfilview"
	"github.com/strata-es/strata/module"
)

// Module returns the fulfilment module.
func Module() module.Module {
	return module.Module{
		Name:        "fulfilment",
		Codecs:      fulfil.Codecs,
		Migrations:  &fulfilview.Migrations,
		Settings:    fulfilcmd.Settings,
		Projections: fulfilview.All,
		Queries:     fulfilquery.Queries,
		OpenAPI:     openAPI,
		Processes:   processes,
	}
}

// processes reads the payment settings and makes the fulfilment process
// manager.
func processes(d module.Deps) ([]process.Spec, error) {
	cfg, err := fulfilcmd.ConfigFromEnv(d.Settings.Get)
	if err != nil {
		return nil, err
	}
	return fulfilcmd.Processes(cfg, d.Deps)
}

// openAPI is the module's part of the API document: its paths and schemas
// (cli/openapi merges it with the engine's).
//
//go:embed openapi.yaml
var openAPI []byte
