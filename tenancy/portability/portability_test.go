package portability

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/examples"
	"github.com/strata-es/strata/internal/pgtest"
	"github.com/strata-es/strata/internal/testdb"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// every module's read-model tables, as cmd/strata passes them.
func moduleTables() []Table {
	var out []Table
	for _, p := range examples.All().Projections() {
		var pos []string
		if pc, ok := p.(PositionColumnser); ok {
			pos = pc.PositionColumns()
		}
		for _, t := range p.Tables() {
			out = append(out, Table{Name: t, PositionColumns: pos})
		}
	}
	return out
}

// canaryDB returns a database of the example modules with the two
// tenants' canaries (seedCanary), and a superuser connection to it.
func canaryDB(ctx context.Context, t *testing.T) (*testdb.DB, *pgx.Conn) {
	t.Helper()
	d := testdb.New(t, examples.All().Lines()...)
	conn, err := pgx.Connect(ctx, d.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	seedCanary(ctx, t, conn)
	return d, conn
}

// seedCanary writes, as the superuser (no row-level security), acme's
// small history and beta's canary rows into the log, the idempotency
// records, read models and dead letters.
func seedCanary(ctx context.Context, t *testing.T, conn *pgx.Conn) {
	t.Helper()
	for _, q := range []string{
		`INSERT INTO strata.tenants (id, name, status) VALUES ('acme', 'Acme', 'active'), ('beta', 'Beta', 'active')`,
		`INSERT INTO strata.events (tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata) VALUES
		 ('beta', 'order-canary', 1, gen_random_uuid(), 'order.created', 1, '{"order_id":"canary","customer_id":"canary-customer","currency":"EUR","at":"2026-01-01T00:00:00Z"}', '{"actor":"canary"}'),
		 ('acme', 'order-a1', 1, gen_random_uuid(), 'order.created', 1, '{"order_id":"a1","customer_id":"c-1","currency":"EUR","at":"2026-01-01T00:00:00Z"}', '{}')`,
		`INSERT INTO strata.idempotency_keys (tenant_id, key, request_hash, response) VALUES ('beta', 'canary-key', 'canary', 'canary'), ('acme', 'k-1', 'h', 'r')`,
		`INSERT INTO strata.order_list (tenant_id, order_id, customer_id, status, currency, created_at, updated_at) VALUES
		 ('beta', 'canary', 'canary-customer', 'draft', 'EUR', now(), now()), ('acme', 'a1', 'c-1', 'draft', 'EUR', '2026-01-01', '2026-01-01')`,
		`INSERT INTO strata.inventory_items (tenant_id, sku, on_hand, reserved, version, updated_at) VALUES ('beta', 'canary-sku', 1, 0, 1, now())`,
		`INSERT INTO strata.dead_letters (tenant_id, projection, generation, stream_id, version, event_id, pos_major, pos_minor, event_type, schema_version, data, metadata, recorded_at, error)
		 VALUES ('beta', 'order_list', gen_random_uuid(), 'order-canary', 1, gen_random_uuid(), 1, 1, 'order.created', 1, '{"canary":true}', '{}', now(), 'canary')`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// archiveFiles reads an archive into memory.
func archiveFiles(t *testing.T, raw []byte) map[string][]byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(raw))
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
		b, _ := io.ReadAll(tr)
		out[hdr.Name] = b
	}
}

// TestExportCannotReadAnotherTenant: the export's queries are confined by
// row-level security, not by their WHERE clause. Asked (through the
// test-only filter) for beta's rows inside acme's transactions, every file
// is empty; asked for acme's, nothing of beta's canary appears; and pools
// of the wrong role are refused (the projector, which reads every tenant's
// events, never reads them for an export).
func TestExportCannotReadAnotherTenant(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, conn := canaryDB(ctx, t)
	var canaries int
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM strata.events WHERE tenant_id = 'beta') + (SELECT count(*) FROM strata.order_list WHERE tenant_id = 'beta')
  + (SELECT count(*) FROM strata.dead_letters WHERE tenant_id = 'beta') + (SELECT count(*) FROM strata.idempotency_keys WHERE tenant_id = 'beta')`).Scan(&canaries); err != nil || canaries != 4 {
		t.Fatalf("canary rows: %d %v", canaries, err)
	}
	cfg := Config{App: d.App, Projector: d.Projector, Owner: d.Projector, Tables: moduleTables(), Actor: "test"}
	export := func(cfg Config, tenant domain.TenantID) (Manifest, map[string][]byte, error) {
		svc, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		m, err := svc.Export(ctx, tenant, &buf)
		if err != nil {
			return m, nil, err
		}
		return m, archiveFiles(t, buf.Bytes()), nil
	}

	m, files, err := export(cfg, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if m.Files[EventsFile].Count != 1 || m.Files[IdempotencyFile].Count != 1 || m.Files[ReadModelsDir+"order_list.jsonl"].Count != 1 || m.Files[DeadLettersFile].Count != 0 {
		t.Errorf("acme's export: %+v", m.Files)
	}
	for name, raw := range files {
		if bytes.Contains(raw, []byte("canary")) {
			t.Errorf("acme's %s holds beta's canary:\n%s", name, raw)
		}
	}

	// The crafted path: acme's transactions, beta's rows asked for.
	crafted := cfg
	crafted.filterTenant = "beta"
	m, files, err = export(crafted, "acme")
	if err != nil {
		t.Fatal(err)
	}
	for name, e := range m.Files {
		if e.Count != 0 {
			t.Errorf("asking for beta's rows in acme's transaction read %d rows of %s", e.Count, name)
		}
	}
	for name, raw := range files {
		if bytes.Contains(raw, []byte("canary")) {
			t.Errorf("the crafted export's %s holds beta's canary", name)
		}
	}
	if len(m.Files) < 3+len(cfg.Tables) {
		t.Errorf("only %d files in the archive", len(m.Files))
	}

	// Wrong roles are refused, not used.
	wrong := cfg
	wrong.App = d.Projector
	if _, _, err := export(wrong, "acme"); err == nil || !strings.Contains(err.Error(), "runs as strata_projector") {
		t.Errorf("events read through the projector pool: %v", err)
	}
	wrong = cfg
	wrong.Projector = d.App
	if _, _, err := export(wrong, "acme"); err == nil || !strings.Contains(err.Error(), "runs as strata_app") {
		t.Errorf("read models read through the app pool: %v", err)
	}
	// Unknown and erased tenants.
	if _, _, err := export(cfg, "nobody"); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("unknown tenant: %v", err)
	}
	if _, err := conn.Exec(ctx, `SET search_path TO strata`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `UPDATE strata.tenants SET status = 'erased' WHERE id = 'beta'`); err != nil {
		t.Fatal(err)
	}
	if _, _, err := export(cfg, "beta"); !errors.Is(err, domain.ErrRejected) {
		t.Errorf("erased tenant: %v", err)
	}
	var audited int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM strata.tenant_audit WHERE action = 'export' AND tenant = 'acme' AND subject = 'test'`).Scan(&audited); err != nil || audited < 2 {
		t.Errorf("audited exports of acme: %d %v", audited, err)
	}
}

// TestImportChecksTheArchive: a file whose bytes do not match the
// manifest's SHA-256 is refused and nothing is imported.
func TestImportChecksTheArchive(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, conn := canaryDB(ctx, t)
	svc, err := New(Config{App: d.App, Projector: d.Projector, Owner: d.Projector, Tables: moduleTables(), Actor: "test", Registry: examples.All().MustRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := svc.Export(ctx, "acme", &buf); err != nil {
		t.Fatal(err)
	}
	files := archiveFiles(t, buf.Bytes())
	// Tamper with one event, keep the manifest.
	files[EventsFile] = bytes.Replace(files[EventsFile], []byte(`"c-1"`), []byte(`"c-2"`), 1)
	var m Manifest
	if err := json.Unmarshal(files[ManifestFile], &m); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, raw := range files {
		if name == ManifestFile {
			continue
		}
		w, err := newJSONL(dir, name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.w.Write(raw); err != nil {
			t.Fatal(err)
		}
		w.close()
	}
	var tampered bytes.Buffer
	if err := writeArchive(&tampered, dir, m); err != nil {
		t.Fatal(err)
	}
	provisioned := 0
	svc.cfg.Provision = func(ctx context.Context, id domain.TenantID) error {
		provisioned++
		_, err := conn.Exec(ctx, `INSERT INTO strata.tenants (id, status) VALUES ($1, 'active')`, id)
		return err
	}
	_, err = svc.Import(ctx, &tampered, ImportOptions{Tenant: "gamma"})
	if !errors.Is(err, ErrBadArchive) || !strings.Contains(err.Error(), "events.jsonl") {
		t.Fatalf("tampered archive: %v", err)
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM strata.events WHERE tenant_id = 'gamma'`).Scan(&n); err != nil || n != 0 || provisioned != 0 {
		t.Errorf("gamma has %d events after a refused import (%v), provisioned %d times", n, err, provisioned)
	}
	// The untampered archive into gamma (missing, so provisioned by the
	// hook), then again: refused, gamma is not empty.
	res, err := svc.Import(ctx, bytes.NewReader(buf.Bytes()), ImportOptions{Tenant: "gamma"})
	if err != nil || res.Events != 1 || res.Idempotency != 1 || !res.Provisioned || provisioned != 1 {
		t.Fatalf("import into gamma: %+v %v", res, err)
	}
	if _, err := svc.Import(ctx, bytes.NewReader(buf.Bytes()), ImportOptions{Tenant: "gamma"}); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("second import into gamma: %v", err)
	}
	var recorded, original time.Time
	if err := conn.QueryRow(ctx, `SELECT g.recorded_at, a.recorded_at FROM strata.events g JOIN strata.events a ON a.stream_id = g.stream_id AND a.version = g.version AND a.tenant_id = 'acme'
WHERE g.tenant_id = 'gamma'`).Scan(&recorded, &original); err != nil || !recorded.Equal(original) {
		t.Errorf("recorded_at not kept: %v vs %v (%v)", recorded, original, err)
	}
}

// TestExportStartsAgainWhenTheTenantMovedOn: the tenant is written between
// the export's log snapshot and its read models' (forced: at the end of
// the log's snapshot an event is appended and a read model row already
// names it), so the read models hold a position the exported log lacks.
// The export starts again and holds both; a position that is no event of
// the tenant at all stays an error.
func TestExportStartsAgainWhenTheTenantMovedOn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, conn := canaryDB(ctx, t)
	svc, err := New(Config{App: d.App, Projector: d.Projector, Owner: d.Projector, Tables: moduleTables(), Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	fulfilment := func(pos string) {
		t.Helper()
		if _, err := conn.Exec(ctx, `INSERT INTO strata.order_fulfilment (tenant_id, order_id, stage, order_status, currency, lines, reserved, released, committed, version, updated_at, last_position)
VALUES ('acme', 'a1', 'draft', 'draft', 'EUR', '{}', 0, 0, 0, 1, now(), `+pos+`)
ON CONFLICT (tenant_id, order_id) DO UPDATE SET last_position = excluded.last_position`); err != nil {
			t.Fatal(err)
		}
	}
	starts := 0
	svc.cfg.Progress = func(p Progress) {
		if p.Phase != "idempotency" {
			return
		}
		if starts++; starts > 1 {
			return
		}
		if _, err := conn.Exec(ctx, `INSERT INTO strata.events (tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata)
VALUES ('acme', 'order-a1', 2, gen_random_uuid(), 'order.cancelled', 1, '{"order_id":"a1","reason":"moved on","at":"2026-01-01T00:00:01Z"}', '{}')`); err != nil {
			t.Error(err)
		}
		fulfilment(`(SELECT max(position) FROM strata.events WHERE tenant_id = 'acme')`)
	}
	var buf bytes.Buffer
	m, err := svc.Export(ctx, "acme", &buf)
	if err != nil {
		t.Fatalf("export of a tenant written during it: %v", err)
	}
	files := archiveFiles(t, buf.Bytes())
	if starts != 2 || m.Files[EventsFile].Count != 2 || !bytes.Contains(files[ReadModelsDir+"order_fulfilment.jsonl"], []byte(`"last_position":2`)) {
		t.Fatalf("%d starts, %d events, order_fulfilment %s; want 2 starts, 2 events, the row at the second", starts, m.Files[EventsFile].Count, files[ReadModelsDir+"order_fulfilment.jsonl"])
	}
	svc.cfg.Progress = nil
	fulfilment("999999")
	if _, err := svc.Export(ctx, "acme", &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "order_fulfilment.last_position = 999999 is no event") {
		t.Fatalf("a position that is no event: %v", err)
	}
}
