package tenancy_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/tenancy"
)

// TestExpireAuditDeletesOnlyRowsPastTheWindow (issue 29, finding 13: audit
// rows have a retention): tenant_audit rows older than the window go, in
// batches; newer ones stay, and so do the old rows of a tenant being
// erased (the erasure anonymizes and counts them for its receipt).
func TestExpireAuditDeletesOnlyRowsPastTheWindow(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := setup(t, tenancy.StoreConfig{})
	conn, err := pgx.Connect(ctx, b.db.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, q := range []string{
		`INSERT INTO strata.tenants (id, name, status) VALUES ('acme', 'Acme', 'active'), ('gone', 'Gone', 'erasing')`,
		// In insert order, as the table numbers them: five old rows of
		// acme and none, two old rows of the tenant being erased, then
		// three within the window.
		`INSERT INTO strata.tenant_audit (subject, action, tenant, at) SELECT 'cli:x', 'show', CASE WHEN i % 2 = 0 THEN 'acme' END, now() - interval '400 days' + i * interval '1 minute'
		 FROM generate_series(1, 5) i`,
		`INSERT INTO strata.tenant_audit (subject, action, tenant, at) SELECT 'cli:x', 'show', 'gone', now() - interval '399 days' FROM generate_series(1, 2)`,
		`INSERT INTO strata.tenant_audit (subject, action, tenant, at) SELECT 'cli:x', 'recent', 'acme', now() - interval '1 day' FROM generate_series(1, 3)`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	n, err := b.store.ExpireAudit(ctx, 365*24*time.Hour, 2)
	if err != nil || n != 5 {
		t.Fatalf("ExpireAudit: %d rows, %v; want 5", n, err)
	}
	var old, gone, recent int
	if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE at < now() - interval '365 days' AND tenant IS DISTINCT FROM 'gone'),
count(*) FILTER (WHERE tenant = 'gone'), count(*) FILTER (WHERE action = 'recent') FROM strata.tenant_audit`).Scan(&old, &gone, &recent); err != nil {
		t.Fatal(err)
	}
	if old != 0 || gone != 2 || recent != 3 {
		t.Errorf("after the pass: %d old rows, %d of the erasing tenant (want 2), %d recent (want 3)", old, gone, recent)
	}
	if n, err := b.store.ExpireAudit(ctx, 365*24*time.Hour, 2); err != nil || n != 0 {
		t.Errorf("a second pass: %d %v", n, err)
	}
}
