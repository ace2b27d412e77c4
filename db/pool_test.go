package db

import (
	"context"
	"testing"
	"time"
)

// TestTemporaryTablesNeverShadowStrataTables: a session of a serving pool
// that creates a temporary table named like a strata table (as SQL run
// through a subverted session could) does not capture the later reads and
// writes on that pooled connection: unqualified names still resolve to the
// strata schema.
func TestTemporaryTablesNeverShadowStrataTables(t *testing.T) {
	t.Parallel()
	url := migrated(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := OpenPool(ctx, url, PoolConfig{Role: RoleApp, MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE TEMPORARY TABLE projection_checkpoints (projection text, captured boolean DEFAULT true)`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO pg_temp.projection_checkpoints (projection) VALUES ('planted')`); err != nil {
		t.Fatal(err)
	}
	conn.Release()
	var resolved string
	err = pool.QueryRow(ctx, `SELECT 'projection_checkpoints'::regclass::oid::regclass::text`).Scan(&resolved)
	if err != nil {
		t.Fatal(err)
	}
	var planted int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM projection_checkpoints WHERE projection = 'planted'`).Scan(&planted); err != nil {
		t.Fatal(err)
	}
	if resolved != "projection_checkpoints" && resolved != Schema+".projection_checkpoints" || planted != 0 {
		t.Fatalf("an unqualified name resolves to %s and sees %d planted rows: the temporary table shadows strata's", resolved, planted)
	}
}
