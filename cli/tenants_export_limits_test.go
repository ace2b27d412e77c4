package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/internal/pgtest"
	"github.com/strata-es/strata/tenancy/portability"
)

// exportJobRow is a finished export job as the running process leaves it,
// written straight into the table (with one archive chunk).
func exportJobRow(ctx context.Context, t *testing.T, conn *pgx.Conn, id, tenant string) {
	t.Helper()
	if _, err := conn.Exec(ctx, `INSERT INTO strata.tenant_exports (id, tenant, requested_by, status, manifest, bytes, finished_at)
VALUES ($1, $2, 'test', 'done', jsonb_build_object('format', 'strata-tenant-archive', 'format_version', 1, 'tenant', $2::text, 'files', '{}'::jsonb,
  'export', jsonb_build_object('created_at', now(), 'source', jsonb_build_object('database', 'strata', 'placement', 'pool'), 'head', '', 'quiescent', true,
  'tenant_status', 'active')), 3, now())`, id, tenant); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO strata.tenant_export_chunks (job, seq, data) VALUES ($1, 0, 'abc')`, id); err != nil {
		t.Fatal(err)
	}
}

// TestExportJobIDsAreCanonicalUUIDs (issue 29, finding 16): a job ID in
// any spelling but the canonical one (lower-case, hyphenated) answers 404
// not_found on every export route, never 500 (urn:uuid: reached
// PostgreSQL, whose uuid input refuses it) and never the job itself (upper
// case, braces and bare hex are other spellings PostgreSQL accepts).
func TestExportJobIDsAreCanonicalUUIDs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := pgtest.NewDatabase(t)
	base, _, stop := startServe(t, directoryVars(t, url))
	defer stop()
	waitReady(t, base)
	provisionOver(t, base, "acme")
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	const id = "3f2504e0-4f89-41d3-9a0c-0305e82c3301"
	exportJobRow(ctx, t, conn, id, "acme")

	if status, raw := platformCall(t, base, http.MethodGet, "/v1/platform/tenants/acme/exports/"+id, ""); status != http.StatusOK {
		t.Fatalf("the canonical ID: %d %s", status, raw)
	}
	for _, other := range []string{"urn:uuid:" + id, "URN:UUID:" + id, "{" + id + "}", strings.ToUpper(id), strings.ReplaceAll(id, "-", ""),
		id + "0", "%20" + id, "not-a-uuid"} {
		for _, suffix := range []string{"", "/archive"} {
			path := "/v1/platform/tenants/acme/exports/" + other + suffix
			if status, raw := platformCall(t, base, http.MethodGet, path, ""); status != http.StatusNotFound || errorCode(raw) != "not_found" {
				t.Errorf("GET %s: %d %s, want 404 not_found", path, status, raw)
			}
		}
		path := "/v1/platform/tenants/acme/exports/" + other
		if status, raw := platformCall(t, base, http.MethodDelete, path, ""); status != http.StatusNotFound || errorCode(raw) != "not_found" {
			t.Errorf("DELETE %s: %d %s, want 404 not_found", path, status, raw)
		}
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM strata.tenant_exports WHERE id = $1`, id).Scan(&n); err != nil || n != 1 {
		t.Errorf("the job after DELETEs of other spellings: %d rows %v", n, err)
	}
}

// TestExportJobsAreCappedPollsUnauditedAndExpire (issue 29, finding 13):
// with the defaults (one running export per tenant, two in all), the
// second export of a tenant and the third in all are refused with 429
// rate_limited and Retry-After while the first ones run (held running by
// a lock on the archive's table, not by timing); status polls add no audit
// row; a finished export older than STRATA_EXPORT_RETENTION answers 404
// at once and its rows, archive included, are gone after the next
// retention pass (recorded as export_expire); DELETE removes one at once
// (export_delete), and refuses one that still runs.
func TestExportJobsAreCappedPollsUnauditedAndExpire(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := pgtest.NewDatabase(t)
	vars := directoryVars(t, url)
	vars["STRATA_PLATFORM_RETENTION_INTERVAL"] = "100ms"
	base, _, stop := startServe(t, vars)
	defer stop()
	waitReady(t, base)
	tenants := []string{"acme", "beta", "gamma"}
	for _, tn := range tenants {
		provisionOver(t, base, tn)
		waitServed(t, base, tn)
		if status, raw, _ := apiCall(t, nil, base, tenantToken(t, tn), "POST", "/v1/orders", `{"order_id":"o-1","customer_id":"c-1","currency":"EUR"}`); status != 201 {
			t.Fatalf("%s: create: %d %s", tn, status, raw)
		}
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	audited := func(action string) int {
		t.Helper()
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM strata.tenant_audit WHERE action = $1`, action).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	start := func(tenant string, want int) portability.Job {
		t.Helper()
		status, raw, hdr := apiCall(t, nil, base, tenantToken(t, "ops", "platform"), "POST", "/v1/platform/tenants/"+tenant+"/exports", "")
		if status != want {
			t.Fatalf("start %s: %d %s, want %d", tenant, status, raw, want)
		}
		var job portability.Job
		if status == http.StatusTooManyRequests {
			if errorCode(raw) != "rate_limited" || hdr.Get("Retry-After") == "" {
				t.Fatalf("start %s refused without rate_limited and Retry-After: %s %v", tenant, raw, hdr)
			}
		} else if err := json.Unmarshal(raw, &job); err != nil {
			t.Fatal(err)
		}
		return job
	}
	show := func(tenant, id string) (int, portability.Job) {
		t.Helper()
		status, raw := platformCall(t, base, "GET", "/v1/platform/tenants/"+tenant+"/exports/"+id, "")
		var job portability.Job
		if status == http.StatusOK {
			if err := json.Unmarshal(raw, &job); err != nil {
				t.Fatal(err)
			}
		}
		return status, job
	}

	// Hold every export running: its archive cannot be stored while the
	// table is locked.
	lock, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(context.Background()) //nolint:errcheck
	if _, err := lock.Exec(ctx, `LOCK TABLE strata.tenant_export_chunks IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	first := start("acme", http.StatusAccepted)
	start("acme", http.StatusTooManyRequests) // the tenant's one
	second := start("beta", http.StatusAccepted)
	start("gamma", http.StatusTooManyRequests) // two in all
	// Every row but the running jobs' own "export" (written when each
	// begins, maybe during the polls).
	rowsBut := func() int {
		t.Helper()
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM strata.tenant_audit WHERE action <> 'export'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := rowsBut()
	for range 20 {
		if status, job := show("acme", first.ID); status != http.StatusOK || job.Status != portability.JobRunning {
			t.Fatalf("poll: %d %+v", status, job)
		}
	}
	if after := rowsBut(); after != before {
		t.Errorf("20 status polls added %d audit rows", after-before)
	}
	if status, raw := platformCall(t, base, "DELETE", "/v1/platform/tenants/acme/exports/"+first.ID, ""); status != http.StatusUnprocessableEntity {
		t.Errorf("DELETE of a running export: %d %s", status, raw)
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for _, j := range []portability.Job{first, second} {
		waitUntil(t, 30*time.Second, func() bool { _, job := show(string(j.Tenant), j.ID); return job.Status == portability.JobDone },
			"export "+j.ID+" is done")
	}
	third := start("gamma", http.StatusAccepted) // a slot is free again
	waitUntil(t, 30*time.Second, func() bool { _, job := show("gamma", third.ID); return job.Status == portability.JobDone }, "gamma's export is done")

	// Retention: acme's export finished a day and a minute ago.
	if _, err := conn.Exec(ctx, `UPDATE strata.tenant_exports SET created_at = created_at - interval '24 hours 1 minute',
finished_at = finished_at - interval '24 hours 1 minute', heartbeat_at = heartbeat_at - interval '24 hours 1 minute' WHERE id = $1`, first.ID); err != nil {
		t.Fatal(err)
	}
	for _, suffix := range []string{"", "/archive"} {
		if status, raw := platformCall(t, base, "GET", "/v1/platform/tenants/acme/exports/"+first.ID+suffix, ""); status != http.StatusNotFound {
			t.Errorf("GET an expired export%s: %d %s", suffix, status, raw)
		}
	}
	rows := func(id string) int {
		var n int
		if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM strata.tenant_exports WHERE id = $1) + (SELECT count(*) FROM strata.tenant_export_chunks WHERE job = $1)`,
			id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	waitUntil(t, 10*time.Second, func() bool { return rows(first.ID) == 0 }, "the retention pass deletes the expired export and its archive")
	var expired int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM strata.tenant_audit WHERE action = 'export_expire' AND tenant = 'acme' AND detail->>'job' = $1`,
		first.ID).Scan(&expired); err != nil || expired != 1 {
		t.Errorf("export_expire rows for the expired job: %d %v", expired, err)
	}
	if rows(second.ID) == 0 || rows(third.ID) == 0 {
		t.Errorf("the retention pass deleted an export within the retention")
	}

	// DELETE: gone at once, recorded (as the refused one above was).
	deletes := audited("export_delete")
	if status, raw := platformCall(t, base, "DELETE", "/v1/platform/tenants/beta/exports/"+second.ID, ""); status != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", status, raw)
	}
	if n := rows(second.ID); n != 0 {
		t.Errorf("after DELETE, %d rows of the export remain", n)
	}
	if status, _ := show("beta", second.ID); status != http.StatusNotFound {
		t.Errorf("GET a deleted export: %d", status)
	}
	if audited("export_delete") != deletes+1 {
		t.Errorf("the DELETE is not recorded once")
	}
	// Another tenant's path does not delete it.
	if status, _ := platformCall(t, base, "DELETE", "/v1/platform/tenants/acme/exports/"+third.ID, ""); status != http.StatusNotFound || rows(third.ID) == 0 {
		t.Errorf("gamma's export deleted under acme's path: %d", status)
	}
}
