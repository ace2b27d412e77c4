package accountview_test

import (
	"testing"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/projections/projectiontest"

	"example.com/loyalty/accountview"
)

// TestTenancy holds the module's tables to the engine's tenancy rules, as
// the engine's own tables are held: declared, FORCE'd row-level security
// on the tenant, and at run time a row of one tenant that another
// tenant's transaction (as strata_app or strata_projector) can neither
// read nor write.
func TestTenancy(t *testing.T) {
	t.Parallel()
	projectiontest.CheckTenantTables(t, projectiontest.TenantTables{Lines: []db.Line{accountview.Migrations}})
}
