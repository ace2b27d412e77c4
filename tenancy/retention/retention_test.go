package retention_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/internal/pgtest"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/tenancy"
	"github.com/strata-es/strata/tenancy/retention"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func days(n int) time.Time { return now.Add(-time.Duration(n) * 24 * time.Hour) }

type fixture struct {
	admin *pgx.Conn // superuser: inserts the rows and reads what is left
	proj  *pgx.Conn // a session of the real projector login, as the job runs
	pool  *pgxpool.Pool
	store *tenancy.Store
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	d := testdb.New(t)
	admin, err := pgx.Connect(ctx, d.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })
	if _, err := admin.Exec(ctx, `SET search_path = strata`); err != nil {
		t.Fatal(err)
	}
	_, projPool := d.ServingPools(t)
	c, err := projPool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Release)
	owner, err := db.OpenPool(ctx, d.AdminURL, db.PoolConfig{Role: db.RoleProjector, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(owner.Close)
	store, err := tenancy.NewStore(tenancy.StoreConfig{Pool: owner})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{admin: admin, proj: c.Conn(), pool: projPool, store: store}
}

func (f *fixture) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := f.admin.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// rows lists what is left of one table: "tenant/name" per row.
func (f *fixture) rows(t *testing.T, sql string) []string {
	t.Helper()
	rows, err := f.admin.Query(context.Background(), sql)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// seed gives tenant rows of every kind, named by their age in days.
func (f *fixture) seed(t *testing.T, tenant string, ages ...int) {
	for _, age := range ages {
		at := days(age)
		name := fmt.Sprintf("%dd", age)
		f.exec(t, `INSERT INTO idempotency_keys (tenant_id, key, request_hash, response, created_at) VALUES ($1, $2, 'h', '\x00', $3)`, tenant, name, at)
		f.exec(t, `INSERT INTO admin_audit (tenant_id, subject, action, target, at) VALUES ($1, 's', 'a', $2, $3)`, tenant, name, at)
		for _, status := range []string{"parked", "retried", "discarded", "superseded"} {
			resolved := &at
			if status == "parked" {
				resolved = nil
			}
			f.exec(t, `INSERT INTO dead_letters (tenant_id, projection, generation, stream_id, version, event_id, pos_major, pos_minor,
				event_type, schema_version, data, metadata, recorded_at, error, parked_at, status, resolved_at, resolved_by, reason)
				VALUES ($1, 'p', gen_random_uuid(), $2, 1, gen_random_uuid(), 1, 0, 't', 1, '{}', '{}', $3, 'e', $3, $4, $5, 'op', 'r')`,
				tenant, name+"-"+status, at, status, resolved)
		}
	}
}

func (f *fixture) provision(t *testing.T, ids ...domain.TenantID) {
	for _, id := range ids {
		if _, err := f.store.Provision(context.Background(), tenancy.Actor{Subject: "cli:test"}, tenancy.ProvisionRequest{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
}

// The job deletes exactly the expired rows of each tenant, by that
// tenant's windows (else the defaults), and nothing of any other tenant:
// parked letters, rows within the window, tenants being erased, tenants
// not in the directory and tenants that keep everything stay whole.
func TestRetentionDeletesExactlyTheExpiredRowsOfEachTenant(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.provision(t, "short", "dflt", "keeper", "erasing")
	actor := tenancy.Actor{Subject: "cli:test"}
	if _, err := f.store.SetRetention(ctx, actor, "short", map[string]string{
		tenancy.RetainIdempotency: "2d", tenancy.RetainDeadLetters: "48h", tenancy.RetainAudit: "10d"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.SetRetention(ctx, actor, "keeper", map[string]string{
		tenancy.RetainIdempotency: "keep", tenancy.RetainDeadLetters: "keep", tenancy.RetainAudit: "keep"}); err != nil {
		t.Fatal(err)
	}
	f.exec(t, `UPDATE tenants SET status = 'erasing' WHERE id = 'erasing'`)
	for _, tenant := range []string{"short", "dflt", "keeper", "erasing", "unlisted"} {
		f.seed(t, tenant, 1, 3, 20, 40, 100, 400)
	}

	var batches int
	job, err := retention.New(retention.Config{Pool: nil, Batch: 2, NowFunc: func() time.Time { return now },
		DeletedFunc: func(string, domain.TenantID, int64) { batches++ }})
	if err == nil || job != nil {
		t.Fatal("a job without a pool was accepted")
	}
	job, err = retention.New(retention.Config{Pool: f.pool, Batch: 2, NowFunc: func() time.Time { return now },
		Defaults: tenancy.Windows{tenancy.RetainIdempotency: {D: 30 * 24 * time.Hour}, tenancy.RetainDeadLetters: {D: 90 * 24 * time.Hour},
			tenancy.RetainAudit: {D: 365 * 24 * time.Hour}},
		DeletedFunc: func(string, domain.TenantID, int64) { batches++ }})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := job.Pass(ctx, f.proj)
	if err != nil {
		t.Fatal(err)
	}

	all := []string{"1d", "3d", "20d", "40d", "100d", "400d"}
	want := map[string]struct{ idem, audit, resolved []string }{
		// short: idempotency 2d, letters 48h, audit 10d.
		"short": {idem: []string{"1d"}, audit: []string{"1d", "3d"}, resolved: []string{"1d"}},
		// dflt: 30d, 90d, 365d.
		"dflt":     {idem: []string{"1d", "3d", "20d"}, audit: []string{"1d", "3d", "20d", "40d", "100d"}, resolved: []string{"1d", "3d", "20d", "40d"}},
		"keeper":   {idem: all, audit: all, resolved: all},
		"erasing":  {idem: all, audit: all, resolved: all},
		"unlisted": {idem: all, audit: all, resolved: all},
	}
	for tenant, w := range want {
		q := func(sql string) []string {
			return f.rows(t, fmt.Sprintf(sql, "'"+tenant+"'"))
		}
		if got := q(`SELECT key FROM idempotency_keys WHERE tenant_id = %s ORDER BY created_at DESC`); !slices.Equal(got, w.idem) {
			t.Errorf("%s idempotency records left %v, want %v", tenant, got, w.idem)
		}
		if got := q(`SELECT target FROM admin_audit WHERE tenant_id = %s ORDER BY at DESC`); !slices.Equal(got, w.audit) {
			t.Errorf("%s audit rows left %v, want %v", tenant, got, w.audit)
		}
		for _, status := range []string{"retried", "discarded", "superseded"} {
			got := q(`SELECT split_part(stream_id, '-', 1) FROM dead_letters WHERE tenant_id = %s AND status = '` + status + `' ORDER BY resolved_at DESC`)
			if !slices.Equal(got, w.resolved) {
				t.Errorf("%s %s letters left %v, want %v", tenant, status, got, w.resolved)
			}
		}
		if got := q(`SELECT split_part(stream_id, '-', 1) FROM dead_letters WHERE tenant_id = %s AND status = 'parked' ORDER BY parked_at DESC`); !slices.Equal(got, all) {
			t.Errorf("%s parked letters left %v, want every one %v", tenant, got, all)
		}
	}
	wantDeleted := map[domain.TenantID]map[string]int64{
		"short": {tenancy.RetainIdempotency: 5, tenancy.RetainAudit: 4, tenancy.RetainDeadLetters: 15},
		"dflt":  {tenancy.RetainIdempotency: 3, tenancy.RetainAudit: 1, tenancy.RetainDeadLetters: 6},
	}
	if fmt.Sprint(rep.Deleted) != fmt.Sprint(wantDeleted) || rep.Tenants != 3 {
		t.Fatalf("report %v over %d tenants, want %v over 3", rep.Deleted, rep.Tenants, wantDeleted)
	}
	if batches < 10 { // batches of 2: 15 letters alone take 8
		t.Fatalf("%d batches reported, want the deletes in batches of 2", batches)
	}

	// A second pass finds nothing more.
	rep, err = job.Pass(ctx, f.proj)
	if err != nil || len(rep.Deleted) != 0 {
		t.Fatalf("second pass: %v %v", rep.Deleted, err)
	}
}

// Row-level security, not the statement, confines the job's deletes: the
// projector, with one tenant set, deletes nothing of another even when it
// asks for every row; with no tenant set it deletes nothing at all.
func TestRetentionGrantsAreConfinedToTheTenant(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.seed(t, "a", 400)
	f.seed(t, "b", 400)
	for _, sql := range []string{`DELETE FROM idempotency_keys`, `DELETE FROM admin_audit`, `DELETE FROM dead_letters`} {
		tx, err := f.proj.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tag, err := tx.Exec(ctx, sql)
		if err != nil || tag.RowsAffected() != 0 {
			t.Fatalf("%s without a tenant: %v rows, %v", sql, tag.RowsAffected(), err)
		}
		if err := db.SetTenant(ctx, tx, "a"); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, sql); err != nil {
			t.Fatalf("%s as a: %v", sql, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.rows(t, `SELECT tenant_id || ':' || count(*) FROM (SELECT tenant_id FROM idempotency_keys UNION ALL SELECT tenant_id FROM admin_audit
		UNION ALL SELECT tenant_id FROM dead_letters) x GROUP BY tenant_id ORDER BY 1`); !slices.Equal(got, []string{"b:6"}) {
		t.Fatalf("left %v, want b's 6 rows only", got)
	}
	// Nothing else of the directory, and no more than the WHERE needs.
	for _, sql := range []string{`SELECT name FROM tenants`, `SELECT response FROM idempotency_keys`, `SELECT subject FROM admin_audit`,
		`UPDATE tenants SET retention = '{}'`, `DELETE FROM events`, `DELETE FROM tenant_audit`} {
		if _, err := f.proj.Exec(ctx, sql); db.SQLState(err) != "42501" {
			t.Errorf("%s as strata_projector: %v, want permission denied", sql, err)
		}
	}
}

func TestParseWindow(t *testing.T) {
	for in, want := range map[string]string{"30d": "30d", "36h": "36h0m0s", "keep": "keep", "48h": "2d"} {
		w, err := tenancy.ParseWindow(in)
		if err != nil || w.String() != want {
			t.Errorf("ParseWindow(%q) = %v %v, want %s", in, w, err, want)
		}
	}
	for _, bad := range []string{"", "0d", "10m", "-1d", "forever", "3w"} {
		if _, err := tenancy.ParseWindow(bad); err == nil {
			t.Errorf("ParseWindow(%q) accepted", bad)
		}
	}
	if err := tenancy.ValidateRetention(map[string]string{"events": "1d"}); err == nil {
		t.Error("an unknown key was accepted")
	}
}

// One process deletes at a time: while another session holds the
// retention lease the job only tries for it; once it is free the job
// takes it and deletes.
func TestRetentionRunsOnlyWithTheLease(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.provision(t, "acme")
	f.seed(t, "acme", 400)
	class, key := retention.LeaseKey()
	other, err := pgx.Connect(ctx, f.admin.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(context.Background())
	var got bool
	if err := other.QueryRow(ctx, `SELECT pg_try_advisory_lock($1, $2)`, class, key).Scan(&got); err != nil || !got {
		t.Fatalf("take the lease: %v %v", got, err)
	}
	tries := make(chan bool, 100)
	deleted := make(chan int64, 100)
	job, err := retention.New(retention.Config{Pool: f.pool, Interval: 10 * time.Millisecond, NowFunc: func() time.Time { return now },
		LeaseFunc:   func(held bool) { tries <- held },
		DeletedFunc: func(_ string, _ domain.TenantID, n int64) { deleted <- n }})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = job.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for range 2 {
		if held := <-tries; held {
			t.Fatal("the job took the lease another session holds")
		}
	}
	if n := f.rows(t, `SELECT key FROM idempotency_keys`); len(n) != 1 || len(deleted) != 0 {
		t.Fatalf("deleted without the lease: %v left, %d batches", n, len(deleted))
	}
	if _, err := other.Exec(ctx, `SELECT pg_advisory_unlock($1, $2)`, class, key); err != nil {
		t.Fatal(err)
	}
	for held := range tries {
		if held {
			break
		}
	}
	var total int64
	for total < 1+1+3 { // one idempotency record, one audit row, three resolved letters
		total += <-deleted
	}
}
