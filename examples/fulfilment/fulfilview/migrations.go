package fulfilview

import (
	"embed"

	"github.com/strata-es/strata/db"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations is the fulfilment module's migration line and its one
// tenant-scoped table.
var Migrations = db.EmbeddedLine("fulfilment", migrationFiles, "migrations", db.TenantTables("order_fulfilment"))
