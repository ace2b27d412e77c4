package orderview

import (
	"embed"

	"github.com/strata-es/strata/db"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations is the orders module's migration line: the tables of its
// projections, every one tenant-scoped (declared here, with the line, for
// the erasure's inventory and the catalog test). Its first migration
// adopts the tables the engine's 002_read_side created before modules
// existed.
var Migrations = db.EmbeddedLine("orders", migrationFiles, "migrations",
	db.Adoption{Version: 1, FromLine: db.EngineLineName, FromVersion: 2, FromChecksum: db.LegacyReadSideChecksum},
	db.TenantTables("order_details", "order_detail_lines", "order_list", "customer_summaries", "customer_paid_totals",
		"customer_orders", "daily_revenue"))
