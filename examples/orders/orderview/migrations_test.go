package orderview_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/examples/orders/orderview"
	"github.com/strata-es/strata/internal/pgtest"
)

// TestMigrationLineAdoptsLegacyTables: a database migrated before modules
// existed has the orders tables from the engine's 002_read_side (its old
// checksum) and a schema_migrations table without lines. Migrating it with
// the orders line records 001 as adopted without running it (running it
// would fail: the tables exist), applies the rest, and leaves the schema
// current; a fresh database runs 001.
func TestMigrationLineAdoptsLegacyTables(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := pgtest.NewDatabase(t)
	if err := db.Up(ctx, url, nil); err != nil { // the engine's line alone
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	// Make it the legacy database: the orders tables exist (created by the
	// old 002, which held exactly what the orders line's 001 holds now),
	// the engine's 002 is recorded with the old checksum, and the
	// migrations table has no line column.
	up001 := orderview.Migrations.Migrations()[0].Up
	for _, sql := range []string{
		`SET ROLE strata_owner`, `SET search_path = strata`, up001, `RESET ROLE`,
		`UPDATE strata.schema_migrations SET checksum = '` + db.LegacyReadSideChecksum + `' WHERE version = 2`,
		`ALTER TABLE strata.schema_migrations DROP CONSTRAINT schema_migrations_pkey`,
		`ALTER TABLE strata.schema_migrations DROP COLUMN line, DROP COLUMN adopted`,
		`ALTER TABLE strata.schema_migrations ADD PRIMARY KEY (version)`,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%.60s: %v", sql, err)
		}
	}
	if err := db.Up(ctx, url, t.Logf, orderview.Migrations); err != nil {
		t.Fatalf("migrate the legacy database: %v", err)
	}
	st, err := db.Status(ctx, url, orderview.Migrations)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range st {
		switch {
		case m.AppliedAt.IsZero():
			t.Errorf("%s/%03d pending after up", m.Line, m.Version)
		case m.Modified:
			t.Errorf("%s/%03d flagged modified", m.Line, m.Version)
		case m.Line == "orders" && m.Version == 1 && !m.Adopted:
			t.Errorf("orders/001 ran instead of being adopted")
		case m.Line == "orders" && m.Version > 1 && m.Adopted:
			t.Errorf("orders/%03d adopted, want applied", m.Version)
		}
	}
	if err := db.Check(ctx, conn, orderview.Migrations); err != nil {
		t.Fatalf("schema not current after the upgrade: %v", err)
	}
	var amountType string
	if err := conn.QueryRow(ctx, `SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'strata.daily_revenue'::regclass AND attname = 'amount'`).Scan(&amountType); err != nil || amountType != "numeric" {
		t.Fatalf("daily_revenue.amount is %q (%v): the line's later migrations did not run", amountType, err)
	}

	// A fresh database runs the line's 001 (nothing to adopt).
	fresh := pgtest.NewDatabase(t)
	if err := db.Up(ctx, fresh, nil, orderview.Migrations); err != nil {
		t.Fatal(err)
	}
	st, err = db.Status(ctx, fresh, orderview.Migrations)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range st {
		if m.AppliedAt.IsZero() || m.Adopted {
			t.Errorf("fresh database: %s/%03d applied %v adopted %v", m.Line, m.Version, !m.AppliedAt.IsZero(), m.Adopted)
		}
	}
}
