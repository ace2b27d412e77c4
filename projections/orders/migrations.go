package orders

import (
	"embed"

	"github.com/strata-es/strata/internal/db"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations is the orders module's migration line: the tables of its
// projections. Its first migration adopts the tables the engine's
// 002_read_side created before modules existed.
var Migrations = db.EmbeddedLine("orders", migrationFiles, "migrations",
	db.Adoption{Version: 1, FromLine: db.EngineLineName, FromVersion: 2, FromChecksum: db.LegacyReadSideChecksum})
