// Package loyalty is a bounded context written the way a team writes its
// own, in its own Go module against strata's public API only: customers
// earn and redeem points (account, accountcmd), each account's balance is a
// read model (accountview) served by a query route (accountquery), and one
// setting bounds a redemption. Module() is what the application's main
// hands to strata.Main (cmd/loyalty).
package loyalty

import (
	_ "embed"

	"github.com/gorilla/mux"

	"github.com/strata-es/strata/module"

	"example.com/loyalty/account"
	"example.com/loyalty/accountcmd"
	"example.com/loyalty/accountquery"
	"example.com/loyalty/accountview"
)

// Module returns the loyalty module.
func Module() module.Module {
	return module.Module{
		Name:       "loyalty",
		Codecs:     account.Codecs,
		Migrations: &accountview.Migrations,
		Settings: []module.Setting{{Name: accountcmd.SettingMaxRedeem, Default: "0",
			Doc: "the most points one redemption may take (0: no limit beyond the balance)"}},
		Commands: func(r *mux.Router, d module.Deps) error {
			return accountcmd.Commands(r, d.Deps, d.Settings.Get(accountcmd.SettingMaxRedeem))
		},
		Projections: accountview.All,
		Queries:     accountquery.Queries,
		OpenAPI:     openAPI,
	}
}

// openAPI documents the module's routes: strata merges it with the
// engine's document, which holds every error response, header and
// parameter the routes share.
//
//go:embed openapi.yaml
var openAPI []byte
