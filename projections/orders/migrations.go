package orders

import (
	"embed"
	"io/fs"

	"github.com/strata-es/strata/internal/db"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations is the orders module's migration line: the tables of its
// projections. Its first migration adopts the tables the engine's
// 002_read_side created before modules existed.
var Migrations = func() db.Line {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		panic(err) // embedded at build time
	}
	return db.Line{Name: "orders", FS: sub, Adopts: []db.Adoption{
		{Version: 1, FromLine: db.EngineLineName, FromVersion: 2, FromChecksum: db.LegacyReadSideChecksum},
	}}
}()
