package tenancy_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/internal/canary"
	"github.com/strata-es/strata/tenancy"
	"github.com/strata-es/strata/tenancy/portability"
)

// exportOver runs an export job of tenant as the platform API's POST
// .../exports does, waits for it and returns its ID.
func exportOver(t *testing.T, b *testBundle, tenant domain.TenantID) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	svc, err := portability.New(portability.Config{App: b.app, Projector: b.db.Projector, Owner: b.owner, Actor: "cli:test"})
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := portability.NewJobs(ctx, svc, portability.JobsConfig{})
	if err != nil {
		t.Fatal(err)
	}
	job, err := jobs.Start(ctx, "cli:test", tenant)
	if err != nil {
		t.Fatal(err)
	}
	jobs.Wait()
	got, err := jobs.Get(ctx, tenant, job.ID)
	if err != nil || got.Status != portability.JobDone || got.Bytes == 0 {
		t.Fatalf("export of %s: %+v %v", tenant, got, err)
	}
	return job.ID
}

// TestEraseRemovesExportArchivesAndEveryCanary (issue 29, finding 1): an
// export taken over the real export path before the erasure is gone
// after it (its job and its archive's chunks, counted in the receipt),
// another tenant's export stays, and a marker placed in the tenant's data
// (its events, idempotency records and name) is found by a scan of every
// table and column, gzip'd archives included, before the erasure and
// nowhere after it.
func TestEraseRemovesExportArchivesAndEveryCanary(t *testing.T) {
	t.Parallel()
	b := setup(t, tenancy.StoreConfig{})
	seed(t, b)
	ctx := context.Background()
	conn := adminConn(t, b)
	const marker = "canary-e1d2c3b4a596"
	exec(t, conn, `SET search_path = strata`)
	exec(t, conn, `UPDATE strata.tenants SET name = 'Acme ' || $1 WHERE id = 'acme'`, marker)
	exec(t, conn, `INSERT INTO strata.events (tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata)
		VALUES ('acme', 'marked', 1, gen_random_uuid(), 'thing.happened', 1, jsonb_build_object('note', $1::text), '{}')`, marker)
	exec(t, conn, `INSERT INTO strata.idempotency_keys (tenant_id, key, request_hash, response) VALUES ('acme', 'marked', 'h', convert_to($1, 'UTF8'))`, marker)
	acmeJob := exportOver(t, b, "acme")
	betaJob := exportOver(t, b, "beta")
	exportRows := func(job string) (jobs, chunks int64) {
		t.Helper()
		if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM strata.tenant_exports WHERE id = $1), (SELECT count(*) FROM strata.tenant_export_chunks WHERE job = $1)`,
			job).Scan(&jobs, &chunks); err != nil {
			t.Fatal(err)
		}
		return jobs, chunks
	}
	jobs, chunks := exportRows(acmeJob)
	if jobs != 1 || chunks == 0 {
		t.Fatalf("acme's export: %d jobs, %d chunks", jobs, chunks)
	}
	betaJobs, betaChunks := exportRows(betaJob)
	finds, err := canary.Scan(ctx, conn, "strata", marker)
	if err != nil {
		t.Fatal(err)
	}
	inArchive := false
	for _, f := range finds {
		inArchive = inArchive || f.Table == "tenant_export_chunks" && f.Gzip
	}
	if !inArchive {
		t.Fatalf("the scan does not see the marker in acme's archive before the erasure: %v", finds)
	}

	w, err := newEraser(t, b, tenancy.EraserConfig{}).Erase(ctx, b.actor, "acme", "export archives test")
	if err != nil {
		t.Fatalf("erase: %v", err)
	}
	if jobs, chunks := exportRows(acmeJob); jobs != 0 || chunks != 0 {
		t.Errorf("acme's export survived its erasure: %d jobs, %d chunks", jobs, chunks)
	}
	if j, c := exportRows(betaJob); j != betaJobs || c != betaChunks {
		t.Errorf("beta's export: %d jobs, %d chunks, were %d, %d", j, c, betaJobs, betaChunks)
	}
	finds, err = canary.Scan(ctx, conn, "strata", marker)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range finds {
		t.Errorf("the erased tenant's marker is still in %s", f)
	}
	counts := w.Receipt.Counts()
	if counts["table:tenant_exports"] != 1 || counts["table:tenant_export_chunks"] != chunks {
		t.Errorf("receipt: exports %d, chunks %d before; want 1, %d", counts["table:tenant_exports"], counts["table:tenant_export_chunks"], chunks)
	}
}

// TestEraseRefusesAnUnclassifiedTable (issue 29, finding 1): a table of
// the schema that no migration line declares (here one naming the tenant
// in a column of its own, as the export jobs' tables do) stops the
// erasure before it changes anything: the tenant stays active, its events
// stay, the error names the table. Created after the inventory, it stops
// the erase step before its first store. Declared, the erasure runs.
func TestEraseRefusesAnUnclassifiedTable(t *testing.T) {
	t.Parallel()
	b := setup(t, tenancy.StoreConfig{})
	seed(t, b)
	ctx := context.Background()
	conn := adminConn(t, b)
	exec(t, conn, `SET ROLE strata_owner`) // a migration's table is the owner's
	exec(t, conn, `CREATE TABLE strata.stray_rows (tenant text NOT NULL, note text)`)
	exec(t, conn, `INSERT INTO strata.stray_rows VALUES ('acme', 'secret of acme')`)
	exec(t, conn, `RESET ROLE`)
	e := newEraser(t, b, tenancy.EraserConfig{})
	w, err := e.Erase(ctx, b.actor, "acme", "unclassified test")
	if !errors.Is(err, tenancy.ErrUnclassified) || !strings.Contains(err.Error(), "stray_rows") {
		t.Fatalf("erase with an unclassified table: %v", err)
	}
	if w.NextStep() != tenancy.StepSuppress || !strings.Contains(w.LastError, "stray_rows") {
		t.Fatalf("workflow after the refusal: next %s, last error %q", w.NextStep(), w.LastError)
	}
	if tn, err := b.store.Get(ctx, b.actor, "acme"); err != nil || tn.Status != tenancy.StatusActive {
		t.Fatalf("tenant after the refusal: %+v %v, want it active", tn, err)
	}
	if n := tenantRows(t, conn, "acme")["events"]; n != 25 {
		t.Fatalf("events after the refusal: %d, want 25", n)
	}

	// Declared (a module's line deleting its rows), the erasure runs; a
	// table that appears after the inventory stops the erase step first.
	stray := db.Line{Name: "stray", Tables: []db.Table{db.ReferencingTable("stray_rows", db.TableErase{Mode: db.EraseDelete,
		Count:  `SELECT count(*) FROM stray_rows WHERE tenant = $1`,
		Delete: `DELETE FROM stray_rows WHERE ctid = ANY (ARRAY(SELECT ctid FROM stray_rows WHERE tenant = $1 LIMIT $2))`}, "names the tenant in tenant")}}
	e = newEraser(t, b, tenancy.EraserConfig{Lines: []db.Line{lateModule, stray}, AfterFunc: func(_ context.Context, _ domain.TenantID, point string) error {
		if point == "after-inventory" {
			exec(t, conn, `CREATE TABLE strata.late_stray (k int)`)
		}
		return nil
	}})
	w, err = e.Erase(ctx, b.actor, "acme", "unclassified test")
	if !errors.Is(err, tenancy.ErrUnclassified) || !strings.Contains(err.Error(), "late_stray") || w.NextStep() != tenancy.StepErase {
		t.Fatalf("erase with a table created after the inventory: %v, next %s", err, w.NextStep())
	}
	if n := tenantRows(t, conn, "acme")["events"]; n != 25 {
		t.Fatalf("events after the refused erase step: %d, want 25", n)
	}
	exec(t, conn, `DROP TABLE strata.late_stray`)
	w, err = e.Erase(ctx, b.actor, "acme", "unclassified test")
	if err != nil {
		t.Fatal(err)
	}
	if got := w.Receipt.Counts()["table:stray_rows"]; got != 1 {
		t.Fatalf("receipt: stray_rows before %d, want 1", got)
	}
	var left int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM strata.stray_rows`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("stray_rows left: %d %v", left, err)
	}
}

// TestEraseWaitsForExportsImportsAndMoves (issue 29, finding 3): the
// quiescence waits for the other work that can still write the tenant's
// data: an open move (its timeout destroys nothing and names it), a
// running export (an abandoned one, its heartbeat stale, is not waited
// for), an import holding the tenant's import lock. Each released in turn,
// the erasure finishes, and the jobs' rows are erased.
func TestEraseWaitsForExportsImportsAndMoves(t *testing.T) {
	t.Parallel()
	b := setup(t, tenancy.StoreConfig{})
	seed(t, b)
	ctx := context.Background()
	conn := adminConn(t, b)
	exec(t, conn, `INSERT INTO strata.placements (name, url) VALUES ('second', 'postgres://elsewhere/strata')`)
	exec(t, conn, `INSERT INTO strata.tenant_moves (tenant, source, target, requested_by) VALUES ('acme', 'pool', 'second', 'cli:test')`)
	w, err := newEraser(t, b, tenancy.EraserConfig{QuiesceTimeout: 300 * time.Millisecond}).Erase(ctx, b.actor, "acme", "busy test")
	if !errors.Is(err, tenancy.ErrQuiesceTimeout) || !strings.Contains(err.Error(), "(copying)") || w.NextStep() != tenancy.StepQuiesce {
		t.Fatalf("erase with a move copying the tenant: %v, next %s", err, w.NextStep())
	}
	if n := tenantRows(t, conn, "acme")["events"]; n != 25 {
		t.Fatalf("events after the quiescence's timeout: %d, want 25", n)
	}
	exec(t, conn, `UPDATE strata.tenant_moves SET phase = 'rolled_back', finished_at = now() WHERE tenant = 'acme'`)

	var running, stale string
	if err := conn.QueryRow(ctx, `INSERT INTO strata.tenant_exports (id, tenant, requested_by) VALUES (gen_random_uuid(), 'acme', 'cli:test') RETURNING id::text`).Scan(&running); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `INSERT INTO strata.tenant_exports (id, tenant, requested_by, heartbeat_at) VALUES (gen_random_uuid(), 'acme', 'cli:test', now() - interval '1 hour')
		RETURNING id::text`).Scan(&stale); err != nil {
		t.Fatal(err)
	}
	importer := adminConn(t, b)
	exec(t, importer, `SELECT pg_advisory_lock($1, hashtext('acme'))`, db.ImportLockClass)
	var mu sync.Mutex
	var last string
	e := newEraser(t, b, tenancy.EraserConfig{QuiesceTimeout: time.Minute, ProgressFunc: func(p tenancy.Progress) {
		if p.Step == tenancy.StepQuiesce {
			mu.Lock()
			last = p.Message
			mu.Unlock()
		}
	}})
	waitingFor := func(want, not string) {
		t.Helper()
		waitFor(t, 10*time.Second, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return strings.Contains(last, want) && (not == "" || !strings.Contains(last, not))
		})
	}
	result := make(chan error, 1)
	go func() {
		w, err = e.Erase(ctx, b.actor, "acme", "busy test")
		result <- err
	}()
	waitingFor("export "+running, "")
	mu.Lock()
	if !strings.Contains(last, "import (session") || strings.Contains(last, stale) {
		t.Errorf("quiescence waiting for %q: want the running export and the import, not the stale export %s", last, stale)
	}
	mu.Unlock()
	exec(t, conn, `UPDATE strata.tenant_exports SET status = 'done', manifest = '{}', finished_at = now() WHERE id = $1`, running)
	waitingFor("import (session", "export")
	select {
	case err := <-result:
		t.Fatalf("the erasure went on with an import of the tenant in progress: %v", err)
	default:
	}
	if n := tenantRows(t, conn, "acme")["events"]; n != 25 {
		t.Fatalf("events while the quiescence waits: %d, want 25", n)
	}
	exec(t, importer, `SELECT pg_advisory_unlock($1, hashtext('acme'))`, db.ImportLockClass)
	if err := <-result; err != nil {
		t.Fatalf("erase: %v", err)
	}
	if len(w.Receipt.Quiesce.Busy) != 0 || w.Receipt.Counts()["table:tenant_exports"] != 2 {
		t.Fatalf("receipt: quiescence %+v, exports before %d (want 2)", w.Receipt.Quiesce, w.Receipt.Counts()["table:tenant_exports"])
	}
	var left int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM strata.tenant_exports WHERE tenant = 'acme'`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("acme's export jobs left: %d %v", left, err)
	}
}

// TestEraseLowersTheReadersParkedCounts (issue 29): a reader (projection,
// process manager, relay) counts its parked streams and letters in its
// checkpoint row. Erasing a tenant that had parked streams lowers those
// counts by the tenant's rows of the reader's current generation, and
// leaves another tenant's and an old generation's alone. Before, the
// counts stayed: the reader looked up parked streams in every batch for
// good, and `replay status` counted streams nobody could list.
func TestEraseLowersTheReadersParkedCounts(t *testing.T) {
	t.Parallel()
	b := setup(t, tenancy.StoreConfig{})
	seed(t, b)
	ctx := context.Background()
	conn := adminConn(t, b)
	exec(t, conn, `SET search_path = strata`)
	const gen, old = "11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222"
	exec(t, conn, `INSERT INTO projection_checkpoints (projection, generation, parked_streams, parked_letters) VALUES ('reader_a', $1, 3, 5)`, gen)
	// acme: two parked streams (three parked letters, one retried letter);
	// beta: one stream, two letters; acme in an old generation: one of each.
	for _, r := range []struct {
		tenant, gen, stream string
		letters             []string
	}{
		{"acme", gen, "s-1", []string{"parked", "parked"}},
		{"acme", gen, "s-2", []string{"parked", "retried"}},
		{"beta", gen, "s-1", []string{"parked", "parked"}},
		{"acme", old, "s-3", []string{"parked"}},
	} {
		exec(t, conn, `INSERT INTO parked_streams (tenant_id, projection, generation, stream_id, head_version) VALUES ($1, 'reader_a', $2, $3, 1)`, r.tenant, r.gen, r.stream)
		for i, st := range r.letters {
			resolved := "NULL"
			if st != "parked" {
				resolved = "now()"
			}
			exec(t, conn, `INSERT INTO dead_letters (tenant_id, projection, generation, stream_id, version, event_id, pos_major, pos_minor, event_type, schema_version, data, metadata, recorded_at, error, status, resolved_at)
				VALUES ($1, 'reader_a', $2, $3, $4::bigint, gen_random_uuid(), 1, $4::bigint, 'thing.happened', 1, '{}', '{}', now(), 'boom', $5, `+resolved+`)`, r.tenant, r.gen, r.stream, i+1, st)
		}
	}
	e := newEraser(t, b, tenancy.EraserConfig{BatchSize: 1})
	if _, err := e.Erase(ctx, tenancy.Actor{Subject: "test"}, "acme", "parked counts"); err != nil {
		t.Fatal(err)
	}
	var streams, letters int64
	if err := conn.QueryRow(ctx, `SELECT parked_streams, parked_letters FROM projection_checkpoints WHERE projection = 'reader_a'`).Scan(&streams, &letters); err != nil {
		t.Fatal(err)
	}
	if streams != 1 || letters != 2 {
		t.Errorf("reader_a counts %d parked streams and %d parked letters after acme's erasure, want beta's 1 and 2", streams, letters)
	}
}
