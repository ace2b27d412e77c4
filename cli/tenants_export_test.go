package cli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/internal/pgtest"
	"github.com/strata-es/strata/tenancy/portability"
)

// readArchive returns every file of an archive by name.
func readArchive(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	out := map[string][]byte{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[hdr.Name] = raw
	}
}

// waitServed waits for the provision's push to reach the server.
func waitServed(t *testing.T, base, tenant string) {
	t.Helper()
	waitUntil(t, 5*time.Second, func() bool {
		status, _, _ := apiCall(t, nil, base, tenantToken(t, tenant), http.MethodGet, "/v1/orders", "")
		return status == http.StatusOK
	}, "the server serves the provisioned tenant "+tenant)
}

// TestTenantExportImportRoundTrip: a tenant with orders, stock, a
// fulfilment row (whose last_position is a source log position) and
// idempotency records is exported from one database while another
// tenant's canary data sits beside it; the archive holds none of the
// canary; it is imported into a second database, whose projectors catch
// up; exporting it there gives the same manifest (content) and the same
// read models, table by table. A second import into the now non-empty
// tenant is refused.
func TestTenantExportImportRoundTrip(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	url1 := pgtest.NewDatabase(t)
	vars1 := directoryVars(t, url1)
	base1, _, stop1 := startServe(t, vars1)
	defer stop1()
	waitReady(t, base1)
	provisionOver(t, base1, "acme")
	provisionOver(t, base1, "beta")
	waitServed(t, base1, "acme")
	waitServed(t, base1, "beta")

	call := func(tenant, method, path, body string, header ...string) {
		t.Helper()
		status, raw, _ := apiCall(t, nil, base1, tenantToken(t, tenant), method, path, body, header...)
		if status >= 300 {
			t.Fatalf("%s %s %s: %d %s", tenant, method, path, status, raw)
		}
	}
	// The canary: another tenant's rows in every table the export reads,
	// written first, so that acme's log positions here are not those it
	// gets in the second database (order_fulfilment.last_position holds one).
	call("beta", "POST", "/v1/inventory/canary-sku/receive", `{"quantity":7}`, "Idempotency-Key", "canary-key")
	call("beta", "POST", "/v1/orders", `{"order_id":"canary-order","customer_id":"canary-customer","currency":"EUR"}`)
	call("beta", "POST", "/v1/orders/canary-order/lines", `{"product_id":"canary-product","quantity":1,"unit_price":{"amount":1,"currency":"EUR"}}`)
	call("beta", "POST", "/v1/orders/canary-order/place", "")

	call("acme", "POST", "/v1/inventory/p-1/receive", `{"quantity":10}`, "Idempotency-Key", "receive-1")
	for _, id := range []string{"o-1", "o-2", "o-3"} {
		call("acme", "POST", "/v1/orders", `{"order_id":"`+id+`","customer_id":"c-1","currency":"EUR"}`, "Idempotency-Key", "create-"+id)
		call("acme", "POST", "/v1/orders/"+id+"/lines", `{"product_id":"p-1","quantity":2,"unit_price":{"amount":250,"currency":"EUR"}}`)
	}
	call("acme", "POST", "/v1/orders/o-1/place", "")
	call("acme", "POST", "/v1/orders/o-1/pay", `{"payment_reference":"psp-1"}`)
	call("acme", "POST", "/v1/orders/o-2/place", "")
	call("acme", "POST", "/v1/orders/o-3/cancel", `{"reason":"changed mind"}`)
	dir := t.TempDir()
	cli := func(vars map[string]string, args ...string) (int, string, string) {
		t.Helper()
		var out, errb bytes.Buffer
		code := run(ctx, append([]string{"tenants"}, args...), testEnv(vars), &out, &errb)
		if testing.Verbose() {
			t.Logf("$ strata tenants %s  => exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errb.String())
		}
		return code, out.String(), errb.String()
	}
	first := filepath.Join(dir, "first.tar.gz")
	code, out, stderr := cli(vars1, "export", "acme", "--out", first, "--catch-up", "60s", "--json")
	if code != exitOK {
		t.Fatalf("export: %d %s", code, stderr)
	}
	var m1 portability.Manifest
	if err := json.Unmarshal([]byte(out), &m1); err != nil {
		t.Fatalf("export --json: %v\n%s", err, out)
	}
	files1 := readArchive(t, first)
	if testing.Verbose() {
		for _, name := range []string{"manifest.json", "events.jsonl", "idempotency.jsonl", "readmodels/order_fulfilment.jsonl", "readmodels/order_details.jsonl"} {
			t.Logf("%s:\n%s", name, files1[name])
		}
	}
	for name, raw := range files1 {
		for _, canary := range []string{"canary", "beta"} {
			if bytes.Contains(raw, []byte(canary)) {
				t.Errorf("%s of acme's archive contains %q", name, canary)
			}
		}
	}
	wantRows := map[string]int64{"events.jsonl": 11, "idempotency.jsonl": 4, "readmodels/order_details.jsonl": 3, "readmodels/order_list.jsonl": 3,
		"readmodels/inventory_items.jsonl": 1, "readmodels/order_fulfilment.jsonl": 3, "dead_letters.jsonl": 0}
	for name, n := range wantRows {
		if got := m1.Files[name].Count; got != n {
			t.Errorf("%s: %d rows, want %d", name, got, n)
		}
	}
	if !strings.Contains(string(files1["readmodels/order_fulfilment.jsonl"]), `"last_position":`) {
		t.Errorf("order_fulfilment rows carry no normalized last_position:\n%s", files1["readmodels/order_fulfilment.jsonl"])
	}
	if m1.Export.Head == "" || !m1.Export.Quiescent || m1.Export.Source.Database == "" {
		t.Errorf("export section: %+v", m1.Export)
	}

	// A second export of the same data: the same content, the same bytes
	// of every file.
	again := filepath.Join(dir, "again.tar.gz")
	if code, _, stderr := cli(vars1, "export", "acme", "--out", again); code != exitOK {
		t.Fatalf("export again: %d %s", code, stderr)
	}
	for name, raw := range readArchive(t, again) {
		if name != portability.ManifestFile && !bytes.Equal(raw, files1[name]) {
			t.Errorf("%s differs between two exports of the same data", name)
		}
	}

	// Another database; its serve process runs the projectors.
	url2 := pgtest.NewDatabase(t)
	vars2 := directoryVars(t, url2)
	base2, _, stop2 := startServe(t, vars2)
	defer stop2()
	waitReady(t, base2)
	code, out, stderr = cli(vars2, "import", first, "--wait", "60s", "--json")
	if code != exitOK {
		t.Fatalf("import: %d %s %s", code, out, stderr)
	}
	var res portability.ImportResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("import --json: %v\n%s", err, out)
	}
	if res.Events != 11 || res.Idempotency != 4 || !res.Provisioned || !res.CaughtUp {
		t.Errorf("import result: %+v", res)
	}
	for table, verdict := range res.ReadModels {
		if verdict != "equal" {
			t.Errorf("after the import, %s is %s", table, verdict)
		}
	}
	// The imported tenant is served, from its imported read models.
	status, raw, _ := apiCall(t, nil, base2, tenantToken(t, "acme"), http.MethodGet, "/v1/orders/o-1", "")
	if status != http.StatusOK || !strings.Contains(string(raw), `"paid"`) {
		t.Errorf("GET o-1 on the second database: %d %s", status, raw)
	}
	// A stored idempotent outcome answers a replay of the command there.
	status, raw, _ = apiCall(t, nil, base2, tenantToken(t, "acme"), http.MethodPost, "/v1/orders", `{"order_id":"o-1","customer_id":"c-1","currency":"EUR"}`,
		"Idempotency-Key", "create-o-1")
	if status >= 300 {
		t.Errorf("replayed idempotent create on the second database: %d %s", status, raw)
	}

	second := filepath.Join(dir, "second.tar.gz")
	code, out, stderr = cli(vars2, "export", "acme", "--out", second, "--json")
	if code != exitOK {
		t.Fatalf("export from the second database: %d %s", code, stderr)
	}
	var m2 portability.Manifest
	if err := json.Unmarshal([]byte(out), &m2); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m1.Content(), m2.Content()) {
		t.Errorf("manifests differ:\nfirst:  %s\nsecond: %s", m1.Content(), m2.Content())
	}
	if m1.Export.Source.Database == m2.Export.Source.Database {
		t.Errorf("both exports name source %q: the test did not use two databases", m1.Export.Source.Database)
	}
	files2 := readArchive(t, second)
	var tables []string
	for name := range files1 {
		if strings.HasPrefix(name, portability.ReadModelsDir) {
			tables = append(tables, name)
		}
	}
	sort.Strings(tables)
	if len(tables) < 8 {
		t.Errorf("only %d read-model tables in the archive: %v", len(tables), tables)
	}
	for _, name := range tables {
		if !bytes.Equal(files1[name], files2[name]) {
			t.Errorf("%s differs after export -> import -> export:\nfirst:\n%s\nsecond:\n%s", name, files1[name], files2[name])
		}
	}
	t.Logf("round trip: %d events, %d read-model tables equal, manifest content %d bytes", m1.Files["events.jsonl"].Count, len(tables), len(m1.Content()))

	// The tenant has data now: a second import is refused.
	if code, _, stderr := cli(vars2, "import", first); code != exitFailure || !strings.Contains(stderr, "not empty") {
		t.Errorf("import into a non-empty tenant: %d %s", code, stderr)
	}
	// An erased or unknown tenant cannot be exported.
	if code, _, stderr := cli(vars1, "export", "nobody", "--out", filepath.Join(dir, "x.tar.gz")); code != exitFailure || !strings.Contains(stderr, "no tenant") {
		t.Errorf("export of an unknown tenant: %d %s", code, stderr)
	}
}

// TestTenantExportJobOverHTTP: an export job started on one serving
// process is answered, status and archive, by another on the same
// database (the job's state and archive are in the database); the archive
// is the CLI's (same manifest content); a tenant's own admin cannot start
// one; unknown jobs and tenants are 404.
func TestTenantExportJobOverHTTP(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := pgtest.NewDatabase(t)
	vars := directoryVars(t, url)
	baseA, _, stopA := startServe(t, vars)
	defer stopA()
	waitReady(t, baseA)
	baseB, _, stopB := startServe(t, directoryVars(t, url), "--roles", "command,query")
	defer stopB()
	waitReady(t, baseB)
	watchOpenAPI(t, baseA)
	watchOpenAPI(t, baseB)
	provisionOver(t, baseA, "acme")
	waitServed(t, baseA, "acme")
	for _, id := range []string{"o-1", "o-2"} {
		if status, raw, _ := apiCall(t, nil, baseA, tenantToken(t, "acme"), "POST", "/v1/orders", `{"order_id":"`+id+`","customer_id":"c-1","currency":"EUR"}`); status != 201 {
			t.Fatalf("create %s: %d %s", id, status, raw)
		}
	}

	if status, raw, _ := apiCall(t, nil, baseA, tenantToken(t, "acme", "admin"), "POST", "/v1/platform/tenants/acme/exports", ""); status != 403 {
		t.Errorf("a tenant admin started an export: %d %s", status, raw)
	}
	if status, raw := platformCall(t, baseA, "POST", "/v1/platform/tenants/nobody/exports", ""); status != 404 || errorCode(raw) != "not_found" {
		t.Errorf("export of an unknown tenant: %d %s", status, raw)
	}
	status, raw, hdr := apiCall(t, nil, baseA, tenantToken(t, "ops", "platform"), "POST", "/v1/platform/tenants/acme/exports", "")
	if status != 202 {
		t.Fatalf("start: %d %s", status, raw)
	}
	var job portability.Job
	if err := json.Unmarshal(raw, &job); err != nil || job.ID == "" || hdr.Get("Location") != "/v1/platform/tenants/acme/exports/"+job.ID {
		t.Fatalf("start: %v %s (Location %q)", err, raw, hdr.Get("Location"))
	}
	// B never ran the job: it answers from the database.
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, raw = platformCall(t, baseB, "GET", "/v1/platform/tenants/acme/exports/"+job.ID, "")
		if status != 200 {
			t.Fatalf("status on B: %d %s", status, raw)
		}
		if err := json.Unmarshal(raw, &job); err != nil {
			t.Fatal(err)
		}
		if job.Status != portability.JobRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job still runs after 30s: %s", raw)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if job.Status != portability.JobDone || job.Manifest == nil || job.Manifest.Files["events.jsonl"].Count != 2 || job.Bytes == 0 {
		t.Fatalf("job: %s", raw)
	}
	status, archive, hdr := apiCall(t, nil, baseB, tenantToken(t, "ops", "platform"), "GET", "/v1/platform/tenants/acme/exports/"+job.ID+"/archive", "")
	if status != 200 || hdr.Get("Content-Type") != "application/gzip" || int64(len(archive)) != job.Bytes {
		t.Fatalf("archive on B: %d %s, %d bytes, want %d", status, hdr.Get("Content-Type"), len(archive), job.Bytes)
	}
	path := filepath.Join(t.TempDir(), "job.tar.gz")
	if err := os.WriteFile(path, archive, 0o600); err != nil {
		t.Fatal(err)
	}
	var inArchive portability.Manifest
	if err := json.Unmarshal(readArchive(t, path)["manifest.json"], &inArchive); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(inArchive.Content(), job.Manifest.Content()) {
		t.Errorf("the archive's manifest is not the job's:\n%s\n%s", inArchive.Content(), job.Manifest.Content())
	}
	// The CLI's export of the same data has the same content.
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"tenants", "export", "acme", "--out", filepath.Join(t.TempDir(), "cli.tar.gz"), "--json"}, testEnv(vars), &out, &errb); code != exitOK {
		t.Fatalf("CLI export: %s", errb.String())
	}
	var cli portability.Manifest
	if err := json.Unmarshal(out.Bytes(), &cli); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(cli.Content(), job.Manifest.Content()) {
		t.Errorf("CLI and job manifests differ:\n%s\n%s", cli.Content(), job.Manifest.Content())
	}
	for _, path := range []string{"/v1/platform/tenants/acme/exports/00000000-0000-0000-0000-000000000000", "/v1/platform/tenants/acme/exports/not-a-uuid/archive"} {
		if status, raw := platformCall(t, baseB, "GET", path, ""); status != 404 || errorCode(raw) != "not_found" {
			t.Errorf("GET %s: %d %s", path, status, raw)
		}
	}
	// A job still running (a row as the running process leaves it) has no
	// archive yet; one whose process stopped beating shows as failed.
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	const running, stale = "11111111-1111-1111-1111-111111111111", "22222222-2222-2222-2222-222222222222"
	if _, err := conn.Exec(ctx, `INSERT INTO strata.tenant_exports (id, tenant, requested_by, heartbeat_at) VALUES ($1, 'acme', 'test', now()),
($2, 'acme', 'test', now() - interval '1 minute')`, running, stale); err != nil {
		t.Fatal(err)
	}
	if status, raw := platformCall(t, baseB, "GET", "/v1/platform/tenants/acme/exports/"+running+"/archive", ""); status != 422 || !strings.Contains(string(raw), "is running") {
		t.Errorf("archive of a running job: %d %s", status, raw)
	}
	status, raw = platformCall(t, baseB, "GET", "/v1/platform/tenants/acme/exports/"+stale, "")
	if err := json.Unmarshal(raw, &job); err != nil || status != 200 || job.Status != portability.JobFailed || !strings.Contains(job.Error, "stopped") {
		t.Errorf("a job without heartbeat: %d %s", status, raw)
	}
	var audited int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM strata.tenant_audit WHERE tenant = 'acme' AND action IN ('export_start', 'export', 'export_show', 'export_download')
AND subject LIKE 'api:%'`).Scan(&audited); err != nil || audited < 4 {
		t.Errorf("audited platform export calls: %d %v", audited, err)
	}
	// Another tenant's path does not reach acme's job.
	provisionOver(t, baseA, "beta")
	if status, raw := platformCall(t, baseB, "GET", "/v1/platform/tenants/beta/exports/"+job.ID, ""); status != 404 {
		t.Errorf("acme's job under beta: %d %s", status, raw)
	}
}
