package stockview

import (
	"embed"

	"github.com/strata-es/strata/db"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations is the inventory module's migration line and its one
// tenant-scoped table.
var Migrations = db.EmbeddedLine("inventory", migrationFiles, "migrations", db.TenantTables("inventory_items"))
