// Package examples lists the example modules that ship with strata — the
// orders, inventory and fulfilment bounded contexts — in the order the
// strata binary (cmd/strata) runs them. The fault harness, the benchmarks
// and the engine's end-to-end tests take them from here. An application
// of its own lists its own modules in its main instead.
package examples

import (
	"github.com/strata-es/strata/examples/customers"
	"github.com/strata-es/strata/examples/fulfilment"
	"github.com/strata-es/strata/examples/inventory"
	"github.com/strata-es/strata/examples/orders"
	"github.com/strata-es/strata/module"
)

// All returns the example modules, in a stable order.
func All() module.Set {
	return module.Set{orders.Module(), inventory.Module(), fulfilment.Module(), customers.Module()}
}
