package portability

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/tenancy/portability/archivetest"
)

// importBundle is one test's database, admin connection and service, with
// a Provision hook that records the tenants it provisions.
type importBundle struct {
	ctx         context.Context
	d           *testdb.DB
	conn        *pgx.Conn
	svc         *Service
	provisioned []domain.TenantID
}

func newImportBundle(t *testing.T) *importBundle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	d := testdb.New(t, examples.All().Lines()...)
	conn, err := pgx.Connect(ctx, d.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, `SET search_path TO strata`); err != nil {
		t.Fatal(err)
	}
	b := &importBundle{ctx: ctx, d: d, conn: conn}
	cfg := Config{App: d.App, Projector: d.Projector, Owner: d.Projector, Tables: moduleTables(), Actor: "test",
		Registry: examples.All().MustRegistry()}
	cfg.Provision = func(ctx context.Context, id domain.TenantID) error {
		b.provisioned = append(b.provisioned, id)
		_, err := conn.Exec(ctx, `INSERT INTO strata.tenants (id, status) VALUES ($1, 'active')`, id)
		return err
	}
	if b.svc, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	return b
}

// count runs a count query as the superuser.
func (b *importBundle) count(t *testing.T, q string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := b.conn.QueryRow(b.ctx, q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// nothingWritten fails unless tenant has no row anywhere an import writes.
func (b *importBundle) nothingWritten(t *testing.T, tenant string) {
	t.Helper()
	n := b.count(t, `SELECT (SELECT count(*) FROM strata.events WHERE tenant_id = $1) + (SELECT count(*) FROM strata.idempotency_keys WHERE tenant_id = $1)
  + (SELECT count(*) FROM strata.tenants WHERE id = $1) + (SELECT count(*) FROM strata.tenant_arrivals WHERE tenant = $1)`, tenant)
	if n != 0 || slices.Contains(b.provisioned, domain.TenantID(tenant)) {
		t.Errorf("after a refused import, %s has %d rows (events, idempotency, directory, arrivals); provisioned %v", tenant, n, b.provisioned)
	}
}

// eventID is the archive's ID of the event with ordinal n.
func eventID(n int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", n) }

// line is one line of events.jsonl.
func line(ord int, stream string, version int, typ, data, meta string) string {
	return fmt.Sprintf(`{"ordinal":%d,"stream":%q,"version":%d,"event_id":%q,"type":%q,"schema_version":1,"data":%s,"metadata":%s,"recorded_at":"2026-01-01T00:00:00Z"}`,
		ord, stream, version, eventID(ord), typ, data, meta)
}

// created is an order.created line of order id in its own stream.
func created(ord int, id string) string {
	return line(ord, "order-"+id, 1, "order.created", `{"order_id":"`+id+`","customer_id":"c-1","currency":"EUR","at":"2026-01-01T00:00:00Z"}`, `{}`)
}

// TestImportRefusesHostileArchives (issue 29, finding 14): an entry that
// is not a regular file, a name that is not a plain relative path, a field
// the format does not have, trailing data, an event type with no codec, a
// payload the module's codec or rules refuse, an oversized event or a gap
// in a stream: each is refused before anything is written, with an error
// naming what. A clean archive of the same shape imports.
func TestImportRefusesHostileArchives(t *testing.T) {
	ok := created(1, "a")
	emptySum := "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	tests := []struct {
		name  string
		a     archivetest.Archive
		want  string
		clean bool
	}{
		{name: "clean", clean: true, a: archivetest.Archive{Files: archivetest.Minimal(ok, created(2, "b"))}},
		{name: "symlink", want: "not a regular file", a: archivetest.Archive{Files: []archivetest.File{
			{Name: EventsFile, Type: tar.TypeSymlink, Linkname: "/etc/passwd", Count: archivetest.Count(0), SHA256: emptySum},
			archivetest.Entry(IdempotencyFile), archivetest.Entry(DeadLettersFile)}}},
		{name: "hardlink", want: "not a regular file", a: archivetest.Archive{Files: []archivetest.File{
			archivetest.Entry(IdempotencyFile),
			{Name: EventsFile, Type: tar.TypeLink, Linkname: IdempotencyFile, Count: archivetest.Count(0), SHA256: emptySum},
			archivetest.Entry(DeadLettersFile)}}},
		{name: "dot-dot", want: `"readmodels/../x.jsonl"`, a: archivetest.Archive{Files: append(archivetest.Minimal(ok), archivetest.Entry("readmodels/../x.jsonl", `{}`))}},
		{name: "absolute", want: `"/readmodels/x.jsonl"`, a: archivetest.Archive{Files: append(archivetest.Minimal(ok), archivetest.Entry("/readmodels/x.jsonl", `{}`))}},
		{name: "backslash", want: `"readmodels\\x.jsonl"`, a: archivetest.Archive{Files: append(archivetest.Minimal(ok), archivetest.Entry(`readmodels\x.jsonl`, `{}`))}},
		{name: "control character", want: `"readmodels/\x1b[31mx.jsonl"`, a: archivetest.Archive{Files: append(archivetest.Minimal(ok), archivetest.Entry("readmodels/\x1b[31mx.jsonl", `{}`))}},
		{name: "manifest unknown field", want: `unknown field "signed_by"`, a: archivetest.Archive{Files: archivetest.Minimal(ok), Extra: map[string]any{"signed_by": "mallory"}}},
		{name: "event unknown field", want: `unknown field "position"`, a: archivetest.Archive{Files: archivetest.Minimal(strings.Replace(ok, `{"ordinal":1,`, `{"ordinal":1,"position":7,`, 1))}},
		{name: "event trailing data", want: "after the JSON value", a: archivetest.Archive{Files: archivetest.Minimal(ok + ` {"ordinal":2}`)}},
		{name: "read-model row not an object", want: "readmodels/order_list.jsonl line 1", a: archivetest.Archive{Files: append(archivetest.Minimal(ok), archivetest.Entry("readmodels/order_list.jsonl", `[1,2]`))}},
		{name: "no codec", want: `"evil.happened"`, a: archivetest.Archive{Files: archivetest.Minimal(line(1, "order-a", 1, "evil.happened", `{}`, `{}`))}},
		{name: "payload unknown field", want: `unknown field "admin"`, a: archivetest.Archive{Files: archivetest.Minimal(
			line(1, "order-a", 1, "order.created", `{"order_id":"a","customer_id":"c-1","currency":"EUR","at":"2026-01-01T00:00:00Z","admin":true}`, `{}`))}},
		{name: "payload wrong type", want: "order.created", a: archivetest.Archive{Files: archivetest.Minimal(
			line(1, "order-a", 1, "order.created", `{"order_id":"a","customer_id":"c-1","currency":"EUR","at":"yesterday"}`, `{}`))}},
		{name: "markup in an ID", want: "order id must match", a: archivetest.Archive{Files: archivetest.Minimal(
			line(1, "order-<b>x</b>", 1, "order.created", `{"order_id":"<b>x</b>","customer_id":"c-1","currency":"EUR","at":"2026-01-01T00:00:00Z"}`, `{}`))}},
		{name: "payload not of its stream", want: `stream "order-a"`, a: archivetest.Archive{Files: archivetest.Minimal(
			line(1, "order-a", 1, "order.created", `{"order_id":"b","customer_id":"c-1","currency":"EUR","at":"2026-01-01T00:00:00Z"}`, `{}`))}},
		{name: "negative stock", want: "quantity must be between", a: archivetest.Archive{Files: archivetest.Minimal(
			line(1, "inventory-p-1", 1, "inventory.received", `{"sku":"p-1","quantity":-5,"at":"2026-01-01T00:00:00Z"}`, `{}`))}},
		{name: "schema version", want: "schema version 7", a: archivetest.Archive{Files: archivetest.Minimal(strings.Replace(ok, `"schema_version":1`, `"schema_version":7`, 1))}},
		{name: "metadata unknown field", want: `unknown field "admin"`, a: archivetest.Archive{Files: archivetest.Minimal(strings.Replace(ok, `"metadata":{}`, `"metadata":{"admin":"yes"}`, 1))}},
		{name: "oversized event", want: "larger than the limit of 262144 bytes", a: archivetest.Archive{Files: archivetest.Minimal(
			strings.Replace(ok, `"metadata":{}`, `"metadata":{"actor":"`+strings.Repeat("x", 300<<10)+`"}`, 1))}},
		{name: "stream gap", want: "version 3", a: archivetest.Archive{Files: archivetest.Minimal(ok,
			line(2, "order-a", 3, "order.cancelled", `{"order_id":"a","at":"2026-01-01T00:00:00Z"}`, `{}`))}},
		{name: "duplicate event ID", want: "event_id " + eventID(1), a: archivetest.Archive{Files: archivetest.Minimal(ok,
			strings.Replace(created(2, "b"), eventID(2), eventID(1), 1))}},
		{name: "idempotency unknown field", want: `unknown field "tenant_id"`, a: archivetest.Archive{Files: []archivetest.File{archivetest.Entry(EventsFile, ok),
			archivetest.Entry(IdempotencyFile, `{"key":"k","request_hash":"h","response":"","created_at":"2026-01-01T00:00:00Z","tenant_id":"beta"}`), archivetest.Entry(DeadLettersFile)}}},
	}
	b := newImportBundle(t)
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tenant := fmt.Sprintf("h-%d", i)
			tc.a.Tenant = "acme"
			res, err := b.svc.Import(b.ctx, bytes.NewReader(tc.a.Bytes()), ImportOptions{Tenant: domain.TenantID(tenant)})
			if tc.clean {
				if err != nil || res.Events != 2 {
					t.Fatalf("a clean archive: %+v %v", res, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("imported (%d events): want a refusal naming %s", res.Events, tc.want)
			}
			t.Logf("refused: %v", err)
			if !errors.Is(err, domain.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q: want an ErrInvalid naming %s", err, tc.want)
			}
			if strings.ContainsRune(err.Error(), 0x1b) {
				t.Errorf("the error holds a raw escape character: %q", err)
			}
			b.nothingWritten(t, tenant)
		})
	}
}

// TestImportDoesNotHoldTheLogHorizon (issue 29, finding 5): between two of
// an import's batches, no transaction of the import is open. Another
// tenant's append is read at once by a tailing reader of the global log
// (which reads below pg_snapshot_xmin, ARCHITECTURE decision 1), no backend
// holds a transaction ID, and the import holds its advisory lock
// (db.ImportLockClass, keyed by the tenant) for the erasure to find.
func TestImportDoesNotHoldTheLogHorizon(t *testing.T) {
	b := newImportBundle(t)
	if _, err := b.conn.Exec(b.ctx, `INSERT INTO strata.tenants (id, status) VALUES ('beta', 'active')`); err != nil {
		t.Fatal(err)
	}
	const n = 2500
	lines := make([]string, n)
	for i := range lines {
		lines[i] = created(i+1, fmt.Sprintf("o-%d", i+1))
	}
	raw := archivetest.Archive{Tenant: "acme", Files: archivetest.Minimal(lines...)}.Bytes()
	store := postgres.New(b.d.App, b.d.Projector)
	checked := false
	b.svc.cfg.Progress = func(p Progress) {
		if checked || p.Phase != "events" || p.Rows == 0 || p.Rows >= n {
			return
		}
		checked = true
		res, err := store.Append(b.ctx, eventstore.AppendRequest{Tenant: "beta", Stream: "order-live", Expected: eventstore.NoStream,
			Events: []eventstore.NewEvent{{ID: uuid.NewString(), Type: "order.created", SchemaVersion: 1,
				Data: []byte(`{"order_id":"live","customer_id":"c-1","currency":"EUR","at":"2026-01-01T00:00:00Z"}`)}}})
		if err != nil {
			t.Errorf("beta's append during the import: %v", err)
			return
		}
		recs, err := store.ReadAll(b.ctx, event.Position{}, 10000)
		if err != nil {
			t.Errorf("tail the log: %v", err)
			return
		}
		seen := false
		for _, r := range recs {
			seen = seen || r.Position == res.Position
		}
		if !seen {
			t.Errorf("after %d of %d imported events, a tailing reader does not see beta's committed append (%d events below the horizon): the import holds the log's horizon", p.Rows, n, len(recs))
		}
		var open []string
		rows, err := b.conn.Query(b.ctx, `SELECT coalesce(application_name, '') || ' ' || coalesce(left(query, 60), '') FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_xid IS NOT NULL`)
		if err == nil {
			open, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		if err != nil || len(open) > 0 {
			t.Errorf("between the import's batches, transactions holding an xid: %q (%v)", open, err)
		}
		locked := b.count(t, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2
  AND classid::bigint = $1::bigint AND objid::bigint = (hashtext($2)::bigint & 4294967295)`, int64(db.ImportLockClass), "gamma")
		if locked != 1 {
			t.Errorf("the import holds %d advisory locks of class ImportLockClass for gamma, want 1", locked)
		}
	}
	res, err := b.svc.Import(b.ctx, bytes.NewReader(raw), ImportOptions{Tenant: "gamma"})
	if err != nil || res.Events != n {
		t.Fatalf("import: %+v %v", res, err)
	}
	if !checked {
		t.Fatal("no progress report between two batches")
	}
	if got := b.count(t, `SELECT count(*) FROM strata.events WHERE tenant_id = 'gamma'`); got != n {
		t.Errorf("gamma has %d events, want %d", got, n)
	}
}

// TestImportUnderANewTenantDerivesEventIDs (issue 29, finding 6): an
// archive imported under another tenant ID gets new event IDs, the same in
// every database (derived from the tenant and the archive's ID), and a
// causation_id naming an event of the archive follows its event; under the
// archive's own tenant the IDs are kept.
func TestImportUnderANewTenantDerivesEventIDs(t *testing.T) {
	raw := archivetest.Archive{Tenant: "acme", Files: archivetest.Minimal(created(1, "a"),
		line(2, "order-a", 2, "order.cancelled", `{"order_id":"a","at":"2026-01-01T00:00:00Z"}`, `{"causation_id":"`+eventID(1)+`","correlation_id":"req-1"}`))}.Bytes()
	ids := func(b *importBundle, tenant string) []string {
		t.Helper()
		rows, err := b.conn.Query(b.ctx, `SELECT event_id::text || ' ' || coalesce(metadata->>'causation_id', '-') || ' ' || coalesce(metadata->>'correlation_id', '-')
FROM strata.events WHERE tenant_id = $1 ORDER BY tx_id, position`, tenant)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	var gammas [][]string
	for range 2 {
		b := newImportBundle(t)
		if _, err := b.svc.Import(b.ctx, bytes.NewReader(raw), ImportOptions{Tenant: "gamma"}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.svc.Import(b.ctx, bytes.NewReader(raw), ImportOptions{}); err != nil {
			t.Fatal(err)
		}
		if got, want := ids(b, "acme"), []string{eventID(1) + " - -", eventID(2) + " " + eventID(1) + " req-1"}; strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("under the archive's own tenant: %q, want the archive's IDs %q", got, want)
		}
		gammas = append(gammas, ids(b, "gamma"))
	}
	g := gammas[0]
	if len(g) != 2 || strings.Join(g, ",") != strings.Join(gammas[1], ",") {
		t.Fatalf("gamma's IDs differ between two databases: %q vs %q", g, gammas[1])
	}
	first, second := strings.Fields(g[0]), strings.Fields(g[1])
	if first[0] == eventID(1) || second[0] == eventID(2) {
		t.Errorf("under a new tenant the events keep the archive's IDs: %q", g)
	}
	if second[1] != first[0] || second[2] != "req-1" {
		t.Errorf("the second event's causation_id %s should name the first's new ID %s; correlation_id %s should be kept", second[1], first[0], second[2])
	}
}

// TestImportLineLengthBoundsMemory (issue 29, finding 8): an archive of a
// few kilobytes whose events.jsonl is one 48 MiB line is refused at the
// line-length limit, naming the file and line, having allocated a small
// fraction of the line.
func TestImportLineLengthBoundsMemory(t *testing.T) {
	b := newImportBundle(t)
	huge := strings.Replace(created(1, "a"), `"metadata":{}`, `"metadata":{"actor":"`+strings.Repeat("A", 48<<20)+`"}`, 1)
	raw := archivetest.Archive{Tenant: "acme", Files: archivetest.Minimal(huge)}.Bytes()
	huge = ""
	t.Logf("archive: %d bytes", len(raw))
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := b.svc.Import(b.ctx, bytes.NewReader(raw), ImportOptions{Tenant: "gamma"})
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("allocated %d MiB", alloc>>20)
	if err == nil || !strings.Contains(err.Error(), "events.jsonl line 1") || !strings.Contains(err.Error(), "line-length limit") {
		t.Errorf("a 48 MiB line: %v; want a refusal naming events.jsonl line 1 and the line-length limit", err)
	}
	if alloc > 16<<20 {
		t.Errorf("the import allocated %d MiB for a 48 MiB line: memory grows with line length", alloc>>20)
	}
	b.nothingWritten(t, "gamma")
}

// TestImportLimits (issue 29, finding 5): each limit refuses an archive
// over it, naming the limit and its flag, before anything is written.
func TestImportLimits(t *testing.T) {
	b := newImportBundle(t)
	two := archivetest.Archive{Tenant: "acme", Files: archivetest.Minimal(created(1, "a"), created(2, "b"))}
	var rows []string
	for i := range 20000 {
		rows = append(rows, fmt.Sprintf(`{"order_id":"o-%d","status":"draft"}`, i))
	}
	bomb := archivetest.Archive{Tenant: "acme", Files: append(archivetest.Minimal(created(1, "a")), archivetest.Entry("readmodels/order_list.jsonl", rows...))}
	tests := []struct {
		name string
		a    archivetest.Archive
		lim  ImportLimits
		want string
	}{
		{"archive", two, ImportLimits{ArchiveBytes: 100}, "larger than the limit of 100 bytes (--max-archive)"},
		{"unpacked", bomb, ImportLimits{UnpackedBytes: 64 << 10}, "unpacks to more than the limit of 65536 bytes (--max-unpacked)"},
		{"events", two, ImportLimits{Events: 1}, "2 events, more than the limit of 1 (--max-events)"},
		{"line", two, ImportLimits{LineBytes: 100}, "events.jsonl line 1 is longer than the line-length limit of 100 bytes (--max-line)"},
		{"event", two, ImportLimits{EventBytes: 50}, "larger than the limit of 50 bytes (--max-event)"},
		{"duration", two, ImportLimits{Duration: time.Nanosecond}, "time limit of 1ns (--timeout)"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tenant := domain.TenantID(fmt.Sprintf("l-%d", i))
			_, err := b.svc.Import(b.ctx, bytes.NewReader(tc.a.Bytes()), ImportOptions{Tenant: tenant, Limits: tc.lim})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v: want one naming %q", err, tc.want)
			}
			t.Logf("refused: %v", err)
			b.nothingWritten(t, string(tenant))
		})
	}
	if _, err := b.svc.Import(b.ctx, bytes.NewReader(bomb.Bytes()), ImportOptions{Tenant: "l-ok"}); err != nil {
		t.Fatalf("the same archives under the default limits: %v", err)
	}
}

// TestImportResumes (issue 29, finding 5): an import stopped between two
// batches leaves the tenant unserved (not provisioned) with the batches it
// committed, its history already marked as imported; another archive
// cannot continue it; running the same import again continues after what
// is there, with the same derived IDs, completes it (provisioned, the
// arrival's end at its last event), and a third run says it was already
// imported.
func TestImportResumes(t *testing.T) {
	b := newImportBundle(t)
	const n = 2500
	lines := make([]string, n)
	for i := range lines {
		lines[i] = created(i+1, fmt.Sprintf("o-%d", i+1))
	}
	files := archivetest.Minimal(lines...)
	files[1] = archivetest.Entry(IdempotencyFile, `{"key":"k-1","request_hash":"h","response":"cg==","created_at":"2026-01-01T00:00:00Z"}`,
		`{"key":"k-2","request_hash":"h","response":"cg==","created_at":"2026-01-01T00:00:00Z"}`)
	raw := archivetest.Archive{Tenant: "acme", Files: files}.Bytes()

	ctx, crash := context.WithCancel(b.ctx)
	b.svc.cfg.Progress = func(p Progress) {
		if p.Phase == "events" && p.Rows >= 1000 {
			crash()
		}
	}
	_, err := b.svc.Import(ctx, bytes.NewReader(raw), ImportOptions{Tenant: "gamma"})
	if err == nil || !strings.Contains(err.Error(), "1000 of the archive's 2500 events are committed") || !strings.Contains(err.Error(), "run the same import again") {
		t.Fatalf("a crash after the first batch: %v", err)
	}
	b.svc.cfg.Progress = nil
	var arrivals int64
	if got := b.count(t, `SELECT count(*) FROM strata.events WHERE tenant_id = 'gamma'`); got != 1000 || len(b.provisioned) != 0 {
		t.Fatalf("after the crash gamma has %d events, provisioned %v; want 1000, not provisioned", got, b.provisioned)
	}
	if arrivals = b.count(t, `SELECT count(*) FROM strata.tenant_arrivals WHERE tenant = 'gamma' AND source LIKE 'import:acme:%' AND through_tx IS NULL`); arrivals != 1 {
		t.Fatalf("gamma's arrival row during the import: %d", arrivals)
	}

	other := archivetest.Archive{Tenant: "acme", Files: archivetest.Minimal(created(1, "x"))}.Bytes()
	if _, err := b.svc.Import(b.ctx, bytes.NewReader(other), ImportOptions{Tenant: "gamma"}); !errors.Is(err, ErrNotEmpty) || !strings.Contains(err.Error(), "an import of another archive into gamma is incomplete") {
		t.Fatalf("another archive into the half-imported gamma: %v", err)
	}

	res, err := b.svc.Import(b.ctx, bytes.NewReader(raw), ImportOptions{Tenant: "gamma"})
	if err != nil || res.Resumed != 1000 || res.Events != n || res.Idempotency != 2 || !res.Complete || !res.Provisioned || res.EventIDs != "derived" {
		t.Fatalf("the rerun: %+v %v", res, err)
	}
	rows, err := b.conn.Query(b.ctx, `SELECT event_id FROM strata.events WHERE tenant_id = 'gamma' ORDER BY tx_id, position`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[[16]byte])
	if err != nil || len(got) != n {
		t.Fatalf("gamma's events: %d %v", len(got), err)
	}
	for i, id := range got {
		if want := ImportedEventID("gamma", uuid.MustParse(eventID(i+1))); uuid.UUID(id) != want {
			t.Fatalf("gamma's event %d is %s, want %s", i+1, uuid.UUID(id), want)
		}
	}
	// The process runners and the relay see the whole history as
	// imported, and what comes after it as the tenant's own.
	arrived, err := projections.ReadArrivals(b.ctx, b.d.Projector, true)
	if err != nil {
		t.Fatal(err)
	}
	var last event.Position
	var tx string
	var pos int64
	if err := b.conn.QueryRow(b.ctx, `SELECT tx_id::text AS tx_text, position FROM strata.events WHERE tenant_id = 'gamma' ORDER BY tx_id DESC, position DESC LIMIT 1`).Scan(&tx, &pos); err != nil {
		t.Fatal(err)
	}
	fmt.Sscan(tx, &last.Major)
	last.Minor = uint64(pos)
	next := event.Position{Major: last.Major + 1, Minor: last.Minor + 1}
	if !arrived.Copied(event.Record{Tenant: "gamma", Position: last}) || arrived.Copied(event.Record{Tenant: "gamma", Position: next}) {
		t.Errorf("arrivals %v: the last imported event (%v) should be imported history, a later one (%v) not", arrived, last, next)
	}

	if _, err := b.svc.Import(b.ctx, bytes.NewReader(raw), ImportOptions{Tenant: "gamma"}); !errors.Is(err, ErrAlreadyImported) || !errors.Is(err, ErrNotEmpty) ||
		!strings.Contains(err.Error(), "holds exactly this archive's 2500 events") {
		t.Fatalf("a third run: %v", err)
	}
}

// TestImportIntoAKnownTenant: an active tenant is refused (nothing may
// write to it while its history loads); a suspended one is imported into
// and stays suspended; an import stops between batches once the tenant is
// marked for erasure.
func TestImportIntoAKnownTenant(t *testing.T) {
	b := newImportBundle(t)
	if _, err := b.conn.Exec(b.ctx, `INSERT INTO strata.tenants (id, status) VALUES ('delta', 'active'), ('omega', 'suspended')`); err != nil {
		t.Fatal(err)
	}
	raw := archivetest.Archive{Tenant: "acme", Files: archivetest.Minimal(created(1, "a"))}.Bytes()
	if _, err := b.svc.Import(b.ctx, bytes.NewReader(raw), ImportOptions{Tenant: "delta"}); !errors.Is(err, domain.ErrRejected) || !strings.Contains(err.Error(), "suspend it first") {
		t.Fatalf("into an active tenant: %v", err)
	}
	if n := b.count(t, `SELECT (SELECT count(*) FROM strata.events WHERE tenant_id = 'delta') + (SELECT count(*) FROM strata.tenant_arrivals WHERE tenant = 'delta')`); n != 0 {
		t.Errorf("the refused import wrote %d rows", n)
	}
	if _, err := b.conn.Exec(b.ctx, `UPDATE strata.tenants SET status = 'suspended' WHERE id = 'delta'`); err != nil {
		t.Fatal(err)
	}
	res, err := b.svc.Import(b.ctx, bytes.NewReader(raw), ImportOptions{Tenant: "delta"})
	if err != nil || !res.Complete || res.Provisioned || res.Status != "suspended" || res.Events != 1 {
		t.Fatalf("into a suspended tenant: %+v %v", res, err)
	}

	// A load whose first batch fails (here: the tenant's writes are
	// frozen) leaves no arrival row behind, which would make the runners
	// pass over the events of a tenant provisioned later by other means.
	if _, err := b.conn.Exec(b.ctx, `INSERT INTO strata.tenant_write_freezes (tenant, reason) VALUES ('phi', 'test')`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.svc.Import(b.ctx, bytes.NewReader(raw), ImportOptions{Tenant: "phi"}); err == nil || !strings.Contains(err.Error(), "nothing was written") {
		t.Fatalf("an import whose first batch fails: %v", err)
	}
	b.nothingWritten(t, "phi")

	lines := make([]string, 2500)
	for i := range lines {
		lines[i] = created(i+1, fmt.Sprintf("o-%d", i+1))
	}
	b.svc.cfg.Progress = func(p Progress) {
		if p.Phase == "events" && p.Rows == 1000 {
			if _, err := b.conn.Exec(b.ctx, `UPDATE strata.tenants SET status = 'erasing' WHERE id = 'omega'`); err != nil {
				t.Error(err)
			}
		}
	}
	_, err = b.svc.Import(b.ctx, bytes.NewReader(archivetest.Archive{Tenant: "acme", Files: archivetest.Minimal(lines...)}.Bytes()), ImportOptions{Tenant: "omega"})
	if !errors.Is(err, domain.ErrRejected) || !strings.Contains(err.Error(), "omega is erasing: the import stopped") {
		t.Fatalf("an import into a tenant marked for erasure meanwhile: %v", err)
	}
	if got := b.count(t, `SELECT count(*) FROM strata.events WHERE tenant_id = 'omega'`); got != 1000 {
		t.Errorf("omega has %d events: the import should have stopped after its first batch", got)
	}
}

// TestExportOrdersTheLogByNumber (found by the HOSTILE chaos scenario):
// the export writes a tenant's events in log order, (tx_id, position) as
// numbers, and its head is the last of them. The queries selected
// tx_id::text under the column's own name, so ORDER BY tx_id sorted the
// text: once a tenant's history straddled a transaction number with one
// more digit (9 and 10 here; 99999 and 100000 in a real log), its archive
// had a stream's later versions first and its own import refused it
// ("stream has version 2 after 0"), and the head named the wrong event.
func TestExportOrdersTheLogByNumber(t *testing.T) {
	b := newImportBundle(t)
	if _, err := b.conn.Exec(b.ctx, `INSERT INTO strata.tenants (id, status) VALUES ('acme', 'active')`); err != nil {
		t.Fatal(err)
	}
	for _, e := range []struct {
		tx      string
		version int
		typ     string
		data    string
	}{
		{"9", 1, "order.created", `{"order_id":"a","customer_id":"c-1","currency":"EUR","at":"2026-01-01T00:00:00Z"}`},
		{"10", 2, "order.cancelled", `{"order_id":"a","at":"2026-01-01T00:01:00Z"}`},
	} {
		if _, err := b.conn.Exec(b.ctx, `INSERT INTO strata.events (tx_id, tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata)
VALUES ($1::text::xid8, 'acme', 'order-a', $2, gen_random_uuid(), $3, 1, $4::jsonb, '{}')`, e.tx, e.version, e.typ, e.data); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	m, err := b.svc.Export(b.ctx, "acme", &buf)
	if err != nil {
		t.Fatal(err)
	}
	files := archiveFiles(t, buf.Bytes())
	lines := strings.Split(strings.TrimSpace(string(files[EventsFile])), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"version":1`) || !strings.Contains(lines[1], `"version":2`) {
		t.Errorf("events.jsonl is not in log order:\n%s", strings.Join(lines, "\n"))
	}
	if !strings.HasPrefix(m.Export.Head, "10/") {
		t.Errorf("the manifest's head %q: want the event of transaction 10", m.Export.Head)
	}
	if p, n, err := b.svc.head(b.ctx, "acme"); err != nil || n != 2 || p.tx != "10" {
		t.Errorf("head: %v (%d events) %v; want the event of transaction 10", p, n, err)
	}
	if _, err := b.svc.Import(b.ctx, bytes.NewReader(buf.Bytes()), ImportOptions{Tenant: "gamma"}); err != nil {
		t.Errorf("the archive's own import: %v", err)
	}
}
