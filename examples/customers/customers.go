// Package customers is the customers module as the engine takes it: its
// event codecs (customer) and command routes (customercmd). It shows an
// invariant across aggregates held by append conditions (issue 31): a
// customer's e-mail address is theirs alone in the tenant. It has no read
// model and no settings.
package customers

import (
	_ "embed"

	"github.com/gorilla/mux"

	"github.com/strata-es/strata/examples/customers/customer"
	"github.com/strata-es/strata/examples/customers/customercmd"
	"github.com/strata-es/strata/module"
)

// Module returns the customers module.
func Module() module.Module {
	return module.Module{
		Name:     "customers",
		Codecs:   customer.Codecs,
		Commands: func(r *mux.Router, d module.Deps) error { return customercmd.Commands(r, d.Deps) },
		OpenAPI:  openAPI,
	}
}

// openAPI is the module's part of the API document.
//
//go:embed openapi.yaml
var openAPI []byte
