package cli

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/examples"
	"github.com/strata-es/strata/internal/pgtest"
	"github.com/strata-es/strata/internal/seaweed"
	"github.com/strata-es/strata/personal"
	"github.com/strata-es/strata/tenancy/archive"
	"github.com/strata-es/strata/tenancy/archive/s3store"
)

// errStop stops a workflow after a step, as a crash there would.
var errStop = errors.New("stopped after the step (test)")

// TestTenantArchiveRoundTrip (issue 32 §3): acme and beta write orders
// through `strata serve`; `strata tenants archive acme`, stopped after
// every step and run again, writes acme to a real S3 server (SeaweedFS),
// reads it back and purges acme's rows, and beta's rows do not change.
// acme is refused while archived. A corrupted object is refused at
// re-hydration with nothing changed; with the object restored,
// `tenants rehydrate` (stopped after every step too) brings acme back:
// served again, the same events and read models (compared table by
// table with the archive's), `replay verify --tenant acme` complete, the
// object deleted. An erasure of a tenant with an archive object leaves
// none behind.
func TestTenantArchiveRoundTrip(t *testing.T) {
	const bucket = "strata-archive-test"
	s3 := seaweed.Start(t, bucket)
	url := pgtest.NewDatabase(t)
	vars := directoryVars(t, url)
	maps.Copy(vars, map[string]string{"STRATA_ARCHIVE_S3_ENDPOINT": s3.Endpoint, "STRATA_ARCHIVE_S3_BUCKET": bucket,
		"STRATA_ARCHIVE_S3_ACCESS_KEY": seaweed.AccessKey, "STRATA_ARCHIVE_S3_SECRET_KEY": seaweed.SecretKey})
	base, _, stop := startServe(t, vars)
	defer stop()
	waitReady(t, base)
	for _, tenant := range []string{"acme", "beta"} {
		provisionOver(t, base, tenant)
		tok := tenantToken(t, tenant)
		call := func(method, path, body string) {
			t.Helper()
			if st, raw, _ := apiCall(t, nil, base, tok, method, path, body); st >= 300 {
				t.Fatalf("%s %s %s: %d %s", tenant, method, path, st, raw)
			}
		}
		call("POST", "/v1/inventory/p-1/receive", `{"quantity":50}`)
		for i := 1; i <= 5; i++ {
			id := fmt.Sprintf("o-%d", i)
			call("POST", "/v1/orders", `{"order_id":"`+id+`","customer_id":"c-`+tenant+`","currency":"EUR"}`)
			call("POST", "/v1/orders/"+id+"/lines", `{"product_id":"p-1","quantity":2,"unit_price":{"amount":700,"currency":"EUR"}}`)
		}
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	waitUntil(t, 30*time.Second, func() bool { return atHead(t, conn) }, "projections at the head")
	acmeTok := tenantToken(t, "acme")
	st, orderBefore, _ := apiCall(t, nil, base, acmeTok, http.MethodGet, "/v1/orders/o-3", "")
	if st != http.StatusOK {
		t.Fatalf("acme's order before: %d %s", st, orderBefore)
	}
	acmeBefore := tableChecksums(t, conn, "acme")
	acmeEventsBefore := eventsContent(t, conn, "acme")
	betaBefore := tableChecksums(t, conn, "beta")
	var acmeEvents int64
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM strata.events WHERE tenant_id = 'acme'`).Scan(&acmeEvents); err != nil || acmeEvents < 11 {
		t.Fatalf("acme's events: %d %v", acmeEvents, err)
	}

	cli := func(args ...string) (int, string, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		code := run(ctx, append([]string{"tenants"}, args...), testEnv(vars), &out, &errOut)
		t.Logf("$ strata tenants %q => exit %d\n%s%s", args, code, out.String(), errOut.String())
		return code, out.String(), errOut.String()
	}
	// Each step once stops the workflow after it; the next run resumes.
	stopped := map[string]bool{}
	archiveAfter = func(_ context.Context, _ domain.TenantID, point string) error {
		if stopped[point] {
			return nil
		}
		stopped[point] = true
		return errStop
	}
	defer func() { archiveAfter = nil }()
	runToEnd := func(args ...string) archive.Record {
		t.Helper()
		for range 8 {
			code, out, errOut := cli(append(args, "--json")...)
			if code == exitOK {
				var r archive.Record
				if err := json.Unmarshal([]byte(out), &r); err != nil {
					t.Fatalf("%s: %v", out, err)
				}
				return r
			}
			if !strings.Contains(errOut, errStop.Error()) {
				t.Fatalf("%v: exit %d: %s", args, code, errOut)
			}
		}
		t.Fatalf("%v did not finish", args)
		return archive.Record{}
	}

	if code, _, errOut := cli("archive", "acme"); code != exitUsage || !strings.Contains(errOut, "--reason") {
		t.Fatalf("archive without a reason: %d %s", code, errOut)
	}
	r := runToEnd("archive", "acme", "--reason", "cold for a year")
	for _, s := range archive.ArchiveSteps {
		if !stopped["after-"+s] {
			t.Errorf("the archive was never stopped after %s", s)
		}
	}
	if r.Phase != archive.PhaseArchived || r.Receipt == nil || r.Receipt.ContentHash != r.Receipt.Hash() || r.Receipt.Files["events.jsonl"] != acmeEvents {
		t.Fatalf("archive record: %+v", r)
	}
	// Nothing of acme is left but its admin audit; beta's rows are as
	// they were.
	for table, n := range catalogRows(t, conn, "acme") {
		if n != 0 && table != "admin_audit" {
			t.Errorf("acme still has %d rows in %s after the archive", n, table)
		}
	}
	if got := tableChecksums(t, conn, "beta"); !maps.Equal(got, betaBefore) {
		t.Errorf("beta's rows changed with acme's archive:\n%v\n%v", betaBefore, got)
	}
	if st, raw, _ := apiCall(t, nil, base, acmeTok, http.MethodGet, "/v1/orders/o-3", ""); st != http.StatusForbidden || !strings.Contains(string(raw), "archived") {
		t.Errorf("acme while archived: %d %s, want 403 saying it is archived", st, raw)
	}
	if code, _, _ := cli("archive", "acme", "--reason", "again"); code != exitOK {
		t.Errorf("archiving an archived tenant again: exit %d, want its record", code)
	}

	objects, err := s3store.New(ctx, s3store.Config{Endpoint: s3.Endpoint, Bucket: bucket, AccessKey: seaweed.AccessKey, SecretKey: seaweed.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := objects.List(ctx, archive.Prefix("acme"))
	if err != nil || len(keys) != 1 || keys[0] != r.ObjectKey {
		t.Fatalf("acme's objects: %v %v, want %s", keys, err, r.ObjectKey)
	}
	obj, err := objects.Get(ctx, r.ObjectKey)
	if err != nil {
		t.Fatal(err)
	}
	var good bytes.Buffer
	if _, err := good.ReadFrom(obj); err != nil {
		t.Fatal(err)
	}
	obj.Close()

	// One byte changed: refused, nothing changed.
	bad := bytes.Clone(good.Bytes())
	bad[len(bad)/2] ^= 0x20
	if err := objects.Put(ctx, r.ObjectKey, bytes.NewReader(bad), int64(len(bad))); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := cli("rehydrate", "acme")
	if code == exitOK || !strings.Contains(errOut, "corrupt") {
		t.Fatalf("rehydrating a corrupted object: exit %d %s, want a refusal saying it is corrupt", code, errOut)
	}
	var status string
	if err := conn.QueryRow(ctx, `SELECT status FROM strata.tenants WHERE id = 'acme'`).Scan(&status); err != nil || status != "archived" {
		t.Fatalf("acme after the refused re-hydration: %s %v, want archived", status, err)
	}
	if rows := catalogRows(t, conn, "acme"); rows["events"] != 0 {
		t.Fatalf("the refused re-hydration wrote %d events", rows["events"])
	}

	if err := objects.Put(ctx, r.ObjectKey, bytes.NewReader(good.Bytes()), int64(good.Len())); err != nil {
		t.Fatal(err)
	}
	r = runToEnd("rehydrate", "acme", "--wait", "1m")
	for _, s := range archive.RehydrationSteps {
		if !stopped["after-rehydrate-"+s] {
			t.Errorf("the re-hydration was never stopped after %s", s)
		}
	}
	if r.Phase != archive.PhaseRehydrated || r.Rehydration == nil || r.Rehydration.Import == nil || r.Rehydration.Status != "active" {
		t.Fatalf("re-hydration record: %+v", r)
	}
	for table, v := range r.Rehydration.Import.ReadModels {
		if v != "equal" {
			t.Errorf("read model %s after the re-hydration: %s, want equal", table, v)
		}
	}
	waitUntil(t, 30*time.Second, func() bool { return atHead(t, conn) }, "projections at the head after the re-hydration")
	st, orderAfter, _ := apiCall(t, nil, base, acmeTok, http.MethodGet, "/v1/orders/o-3", "")
	if st != http.StatusOK || !jsonEqual(t, orderBefore, orderAfter) {
		t.Errorf("acme's order after the re-hydration: %d %s, want %s", st, orderAfter, orderBefore)
	}
	if got := eventsContent(t, conn, "acme"); got != acmeEventsBefore {
		t.Errorf("acme's events after the re-hydration differ from before (their IDs, streams, versions, types, data and metadata, in log order)")
	}
	if got := tableChecksums(t, conn, "acme"); got["idempotency_keys"] != acmeBefore["idempotency_keys"] {
		t.Errorf("acme's idempotency records after the re-hydration differ from before")
	}
	var out bytes.Buffer
	if code := run(ctx, []string{"replay", "verify", "--tenant", "acme"}, testEnv(vars), &out, &out); code != exitOK {
		t.Errorf("replay verify --tenant acme after the re-hydration: exit %d\n%s", code, out.String())
	}
	if keys, err := objects.List(ctx, archive.Prefix("acme")); err != nil || len(keys) != 0 {
		t.Errorf("acme's objects after the re-hydration: %v %v, want none", keys, err)
	}
	if got := tableChecksums(t, conn, "beta"); !maps.Equal(got, betaBefore) {
		t.Errorf("beta's rows changed with acme's re-hydration")
	}
	if st, _, _ := apiCall(t, nil, base, acmeTok, "POST", "/v1/orders", `{"order_id":"o-new","customer_id":"c-acme","currency":"EUR"}`); st != http.StatusCreated && st != http.StatusOK && st != http.StatusAccepted {
		t.Errorf("acme's command after the re-hydration: %d", st)
	}

	// An archive object left behind (an abandoned archive's, say) is
	// erased with the tenant.
	archiveAfter = nil
	stray := archive.Prefix("beta") + "stray.tar.gz"
	if err := objects.Put(ctx, stray, strings.NewReader("x"), 1); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := cli("erase", "beta", "--reason", "contract ended"); code != exitOK {
		t.Fatalf("erase beta: %d %s", code, errOut)
	}
	if keys, err := objects.List(ctx, archive.Prefix("beta")); err != nil || len(keys) != 0 {
		t.Errorf("beta's objects after its erasure: %v %v, want none", keys, err)
	}
}

// jsonEqual compares two JSON documents by value.
func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

// eventsContent is the MD5 of a tenant's events in log order, without
// their positions (a re-hydration appends them at the log's end).
func eventsContent(t *testing.T, conn *pgx.Conn, tenant string) string {
	t.Helper()
	ctx := context.Background()
	// Personal fields are sealed with the keys of the tenant's subjects;
	// an archive carries them opened and a re-hydration seals them again
	// under new keys (docs/personal-data.md): the content compared is the
	// opened one, and the sealed fields must be sealed on both sides.
	if _, err := conn.Exec(ctx, "SET search_path = "+db.Schema); err != nil {
		t.Fatal(err)
	}
	reg := examples.All().MustRegistry().Protect(personal.NewKeyring(conn, personal.DatabaseKEKs(ctx, conn, nil), personal.Config{}))
	rows, err := conn.Query(ctx, `SELECT event_id::text, stream_id, version, event_type, schema_version, data::text, metadata::text
FROM strata.events WHERE tenant_id = $1 ORDER BY tx_id, position`, tenant)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		id, stream, typ, data, meta string
		version                     int64
		schema                      int
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		return x, r.Scan(&x.id, &x.stream, &x.version, &x.typ, &x.schema, &x.data, &x.meta)
	})
	if err != nil {
		t.Fatal(err)
	}
	h := md5.New()
	sealed := 0
	for _, x := range all {
		if reg.Personal(x.typ) != nil {
			if !event.Sealed([]byte(x.data)) {
				t.Fatalf("%s v%d of %s: personal data in plaintext: %s", x.typ, x.version, x.stream, x.data)
			}
			sealed++
		}
		opened, err := reg.Open(event.Record{Tenant: tenant, Stream: x.stream, Type: x.typ, SchemaVersion: x.schema, Data: json.RawMessage(x.data)})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(h, "%s|%s|%d|%s|%d|%s|%s\n", x.id, x.stream, x.version, x.typ, x.schema, canonicalJSON(t, opened), x.meta)
	}
	return fmt.Sprintf("%x (%d events, %d sealed)", h.Sum(nil), len(all), sealed)
}

// canonicalJSON is raw with its object keys sorted (jsonb's own order
// depends on key lengths, a splice's on the writer's).
func canonicalJSON(t *testing.T, raw []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}
