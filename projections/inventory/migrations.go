package inventory

import (
	"embed"
	"io/fs"

	"github.com/strata-es/strata/internal/db"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations is the inventory module's migration line.
var Migrations = func() db.Line {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		panic(err) // embedded at build time
	}
	return db.Line{Name: "inventory", FS: sub}
}()
