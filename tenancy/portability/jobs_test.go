package portability

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain"
)

// TestJobsCapIsTheDatabasesAndExpiredJobsGo (issue 29, finding 13): two
// Jobs on one database (two serving processes) start eight exports of
// three tenants at once while every export is held running (its archive
// cannot be stored: the chunks' table is locked). Exactly two start, of
// two tenants; every other start is a *BusyError. Once they are done, a
// job that ended longer ago than the retention is invisible at once and
// deleted by Expire, archive included and recorded; the other stays.
func TestJobsCapIsTheDatabasesAndExpiredJobsGo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, conn := canaryDB(ctx, t)
	if _, err := conn.Exec(ctx, `INSERT INTO strata.tenants (id, name, status) VALUES ('gamma', 'Gamma', 'active')`); err != nil {
		t.Fatal(err)
	}
	svc, err := New(Config{App: d.App, Projector: d.Projector, Owner: d.Projector, Tables: moduleTables(), Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewJobs(ctx, svc, JobsConfig{MaxRunningPerTenant: 2, MaxRunning: 1}); err == nil {
		t.Error("a cap in all below the cap per tenant was accepted")
	}
	var procs [2]*Jobs
	for i := range procs {
		if procs[i], err = NewJobs(ctx, svc, JobsConfig{}); err != nil {
			t.Fatal(err)
		}
	}

	lock, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(context.Background()) //nolint:errcheck
	if _, err := lock.Exec(ctx, `LOCK TABLE strata.tenant_export_chunks IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var started []Job
	var wg sync.WaitGroup
	for i, tenant := range []domain.TenantID{"acme", "beta", "gamma", "acme", "beta", "gamma", "acme", "beta"} {
		wg.Go(func() {
			job, err := procs[i%2].Start(ctx, "test", tenant)
			var busy *BusyError
			switch {
			case err == nil:
				mu.Lock()
				started = append(started, job)
				mu.Unlock()
			case errors.As(err, &busy) && errors.Is(err, ErrBusy):
			default:
				t.Errorf("start %s: %v", tenant, err)
			}
		})
	}
	wg.Wait()
	if len(started) != 2 || started[0].Tenant == started[1].Tenant {
		t.Fatalf("started %+v, want two jobs of two tenants", started)
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	procs[0].Wait()
	procs[1].Wait()
	for _, j := range started {
		if got, err := procs[0].Get(ctx, j.Tenant, j.ID); err != nil || got.Status != JobDone {
			t.Fatalf("job %s: %+v %v", j.ID, got, err)
		}
	}

	old, kept := started[0], started[1]
	if _, err := conn.Exec(ctx, `UPDATE strata.tenant_exports SET finished_at = now() - interval '25 hours' WHERE id = $1`, old.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := procs[1].Get(ctx, old.Tenant, old.ID); !errors.Is(err, ErrJobNotFound) {
		t.Errorf("an expired job before the pass: %v, want ErrJobNotFound", err)
	}
	if n, err := procs[1].Expire(ctx); err != nil || n != 1 {
		t.Fatalf("Expire: %d %v, want 1", n, err)
	}
	var rows, expired int
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM strata.tenant_exports WHERE id = $1::uuid) + (SELECT count(*) FROM strata.tenant_export_chunks WHERE job = $1::uuid),
(SELECT count(*) FROM strata.tenant_audit WHERE action = 'export_expire' AND tenant = $2 AND detail->>'job' = $1::text)`, old.ID, old.Tenant).Scan(&rows, &expired); err != nil {
		t.Fatal(err)
	}
	if rows != 0 || expired != 1 {
		t.Errorf("after Expire: %d rows of the expired job, %d export_expire records", rows, expired)
	}
	if _, err := procs[0].Get(ctx, kept.Tenant, kept.ID); err != nil {
		t.Errorf("the job within the retention: %v", err)
	}

	// A tenant being erased: its old job is the erasure's. An erased
	// tenant's goes, without a row naming the tenant.
	const erasing, erased = "44444444-4444-4444-4444-444444444444", "55555555-5555-5555-5555-555555555555"
	for _, q := range []string{
		`INSERT INTO strata.tenants (id, name, status) VALUES ('going', 'Going', 'erasing'), ('gone', 'Gone', 'erased')`,
		`INSERT INTO strata.tenant_exports (id, tenant, requested_by, status, error, created_at, heartbeat_at, finished_at) VALUES
		 ('` + erasing + `', 'going', 'test', 'failed', 'x', now() - interval '2 days', now() - interval '2 days', now() - interval '2 days'),
		 ('` + erased + `', 'gone', 'test', 'failed', 'x', now() - interval '2 days', now() - interval '2 days', now() - interval '2 days')`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if n, err := procs[0].Expire(ctx); err != nil || n != 1 {
		t.Fatalf("Expire: %d %v, want 1 (the erased tenant's)", n, err)
	}
	var left, named int
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM strata.tenant_exports WHERE tenant IN ('going', 'gone')),
(SELECT count(*) FROM strata.tenant_audit WHERE tenant = 'gone')`).Scan(&left, &named); err != nil || left != 1 || named != 0 {
		t.Errorf("after Expire: %d jobs of going/gone left (want going's), %d rows naming gone; %v", left, named, err)
	}
}

// TestJobStartRacingAnErasureIsRefused (issue 29): an export that starts
// while an erasure sets its tenant erasing (the update held open before
// its commit) waits for it and is refused, instead of starting after the
// erasure's quiescence looked for running jobs and writing an archive
// behind its verification. Before the tenant's row was read in the start's
// own transaction, the start saw the tenant active and ran.
func TestJobStartRacingAnErasureIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, conn := canaryDB(ctx, t)
	svc, err := New(Config{App: d.App, Projector: d.Projector, Owner: d.Projector, Tables: moduleTables(), Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := NewJobs(ctx, svc, JobsConfig{})
	if err != nil {
		t.Fatal(err)
	}
	watch, err := pgx.Connect(ctx, d.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close(context.Background())
	erasing, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer erasing.Rollback(context.Background()) //nolint:errcheck
	if _, err := erasing.Exec(ctx, `SET LOCAL search_path = strata`); err != nil {
		t.Fatal(err)
	}
	if _, err := erasing.Exec(ctx, `UPDATE tenants SET status = 'erasing' WHERE id = 'acme'`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := jobs.Start(ctx, "test", "acme")
		done <- err
	}()
	// The start waits for the erasing update's row lock (before the fix
	// it did not wait: it ran at once).
	select {
	case err = <-done:
		jobs.Wait()
		t.Fatalf("the export's start did not wait for the erasing tenant's row: %v", err)
	case <-lockWaited(ctx, t, watch):
	}
	if err := erasing.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	err = <-done
	jobs.Wait()
	if !errors.Is(err, domain.ErrRejected) || !strings.Contains(err.Error(), "acme is erasing") {
		t.Fatalf("an export started while its tenant became erasing: %v, want a refusal", err)
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM strata.tenant_exports WHERE tenant = 'acme'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d export jobs of the erasing tenant (%v), want 0", n, err)
	}
}

// lockWaited is closed once some session of the database waits for a
// lock (conn is the test's own, used by nothing else meanwhile).
func lockWaited(ctx context.Context, t *testing.T, conn *pgx.Conn) <-chan struct{} {
	t.Helper()
	ch := make(chan struct{})
	go func() {
		for ctx.Err() == nil {
			var waiting bool
			err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database())`).Scan(&waiting)
			if err == nil && waiting {
				close(ch)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return ch
}
