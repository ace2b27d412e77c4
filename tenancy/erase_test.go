package tenancy_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/httpapi"
	"github.com/strata-es/strata/tenancy"
)

func adminConn(t *testing.T, b *testBundle) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), b.db.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func exec(t *testing.T, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// lateModule is the migration line of a module migrated after the engine,
// whose table seed creates: it declares its table, as every line does
// (db.Classify), and the erasure takes it from the declaration.
var lateModule = db.Line{Name: "late_module", Tables: []db.Table{db.TenantTable("late_module_rows")}}

// lateShadow is a rebuild's shadow table of late_module_rows for one
// tenant's rebuild, made at run time (package replay): classified as its
// live table, erased as one.
const lateShadow = "late_module_rows__rebuild_0123456789ab"

// seed provisions acme and beta and gives each rows in the log, the
// idempotency records, the relay's watermill copy, a module's table
// created after the migrations (lateModule) and a rebuild's shadow of it.
func seed(t *testing.T, b *testBundle) {
	t.Helper()
	ctx := context.Background()
	for _, id := range []domain.TenantID{"acme", "beta"} {
		if _, err := b.store.Provision(ctx, b.actor, tenancy.ProvisionRequest{ID: id, Name: "Tenant " + string(id)}); err != nil {
			t.Fatal(err)
		}
	}
	conn := adminConn(t, b)
	exec(t, conn, `SET search_path = strata`)
	exec(t, conn, `SET ROLE strata_owner`)
	exec(t, conn, `CREATE TABLE late_module_rows (tenant_id text NOT NULL CHECK (tenant_id <> ''), k int NOT NULL, v text, PRIMARY KEY (tenant_id, k))`)
	exec(t, conn, `ALTER TABLE late_module_rows ENABLE ROW LEVEL SECURITY`)
	exec(t, conn, `ALTER TABLE late_module_rows FORCE ROW LEVEL SECURITY`)
	exec(t, conn, `CREATE POLICY late_module_rows_p ON late_module_rows TO strata_projector
		USING (tenant_id = current_setting('app.tenant_id', true)) WITH CHECK (tenant_id = current_setting('app.tenant_id', true))`)
	exec(t, conn, `CREATE TABLE `+lateShadow+` (LIKE late_module_rows INCLUDING ALL)`)
	exec(t, conn, `ALTER TABLE `+lateShadow+` ENABLE ROW LEVEL SECURITY`)
	exec(t, conn, `ALTER TABLE `+lateShadow+` FORCE ROW LEVEL SECURITY`)
	exec(t, conn, `CREATE POLICY late_module_rows_p ON `+lateShadow+` TO strata_projector
		USING (tenant_id = current_setting('app.tenant_id', true)) WITH CHECK (tenant_id = current_setting('app.tenant_id', true))`)
	exec(t, conn, `RESET ROLE`)
	for i, tn := range []string{"acme", "beta"} {
		n := 25 + 10*i // acme 25, beta 35
		exec(t, conn, `INSERT INTO events (tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata)
			SELECT $1, 's-' || (g % 5), g, gen_random_uuid(), 'thing.happened', 1, jsonb_build_object('n', g), '{}' FROM generate_series(1, $2) g`, tn, n)
		exec(t, conn, `INSERT INTO idempotency_keys (tenant_id, key, request_hash, response) SELECT $1, 'k-' || g, 'h', '\x00' FROM generate_series(1, 7) g`, tn)
		exec(t, conn, `INSERT INTO watermill_strata_events (uuid, payload, metadata, transaction_id)
			SELECT gen_random_uuid()::text, '{}'::json, json_build_object('tenant', $1::text), pg_current_xact_id() FROM generate_series(1, $2) g`, tn, n)
		exec(t, conn, `INSERT INTO late_module_rows (tenant_id, k, v) SELECT $1, g, 'secret of ' || $1 FROM generate_series(1, 4500) g`, tn)
		exec(t, conn, `INSERT INTO `+lateShadow+` (tenant_id, k, v) SELECT $1, g, 'secret of ' || $1 FROM generate_series(1, 30) g`, tn)
	}
}

// tenantRows counts the tenant's rows in every table of the schema that
// has a tenant_id column, read from the catalog now.
func tenantRows(t *testing.T, conn *pgx.Conn, tenant string) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	rows, err := conn.Query(ctx, `SELECT c.relname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'strata' AND c.relkind IN ('r', 'p') AND a.attname = 'tenant_id' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, tb := range tables {
		var n int64
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM strata.`+pgx.Identifier{tb}.Sanitize()+` WHERE tenant_id = $1`, tenant).Scan(&n); err != nil {
			t.Fatal(err)
		}
		out[tb] = n
	}
	var n int64
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM strata.watermill_strata_events WHERE metadata::jsonb->>'tenant' = $1`, tenant).Scan(&n); err != nil {
		t.Fatal(err)
	}
	out["watermill_strata_events"] = n
	return out
}

// checksums is md5 over each tenant table's rows of the tenant, in order.
func checksums(t *testing.T, conn *pgx.Conn, tenant string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for tb := range tenantRows(t, conn, tenant) {
		where := `tenant_id = $1`
		if tb == "watermill_strata_events" {
			where = `metadata::jsonb->>'tenant' = $1`
		}
		var sum string
		err := conn.QueryRow(context.Background(), `SELECT coalesce(md5(string_agg(x::text, '|' ORDER BY x::text)), '') FROM strata.`+
			pgx.Identifier{tb}.Sanitize()+` x WHERE `+where, tenant).Scan(&sum)
		if err != nil {
			t.Fatal(err)
		}
		out[tb] = sum
	}
	return out
}

func newEraser(t *testing.T, b *testBundle, cfg tenancy.EraserConfig) *tenancy.Eraser {
	t.Helper()
	cfg.Pool, cfg.Store = b.owner, b.store
	if cfg.Lines == nil {
		cfg.Lines = []db.Line{lateModule}
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = 1000
	}
	e, err := tenancy.NewEraser(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestEraseLeavesNothingOfTheTenant(t *testing.T) {
	t.Parallel()
	b := setup(t, tenancy.StoreConfig{})
	seed(t, b)
	ctx := context.Background()
	conn := adminConn(t, b)
	// A member that stopped heartbeating long ago is gone, not waited for.
	exec(t, conn, `INSERT INTO strata.tenant_directory_members (member_id, host, pid, heartbeat_at) VALUES ('dead', 'h', 1, now() - interval '1 hour')`)
	before := tenantRows(t, conn, "acme")
	if before["events"] != 25 || before["late_module_rows"] != 4500 || before[lateShadow] != 30 || before["idempotency_keys"] != 7 || before["watermill_strata_events"] != 25 {
		t.Fatalf("seeded %v", before)
	}
	betaBefore := checksums(t, conn, "beta")

	var mu sync.Mutex
	batches := map[string]int{}
	e := newEraser(t, b, tenancy.EraserConfig{ProgressFunc: func(p tenancy.Progress) {
		mu.Lock()
		defer mu.Unlock()
		if p.Store != "" {
			batches[p.Store]++
		}
	}})
	w, err := e.Erase(ctx, b.actor, "acme", "customer asked (GDPR art. 17)")
	if err != nil {
		t.Fatalf("erase: %v\n%+v", err, w)
	}
	for tb, n := range tenantRows(t, conn, "acme") {
		if n != 0 {
			t.Errorf("%s still has %d rows of the erased tenant", tb, n)
		}
	}
	if got := checksums(t, conn, "beta"); !maps.Equal(got, betaBefore) {
		t.Errorf("the other tenant's rows changed:\n before %v\n after  %v", betaBefore, got)
	}
	if batches["table:late_module_rows"] < 5 {
		t.Errorf("4500 rows in batches of 1000 took %d batches, want 5", batches["table:late_module_rows"])
	}
	r := w.Receipt
	if r == nil || !r.Verify() {
		t.Fatalf("receipt %+v does not verify", r)
	}
	counts := r.Counts()
	for tb, n := range before {
		if counts["table:"+tb] != n {
			t.Errorf("receipt: %s before %d, want %d", tb, counts["table:"+tb], n)
		}
	}
	for _, s := range r.Stores {
		if s.State != tenancy.StateDone || s.After != 0 || s.Result != 0 || s.Verification == "" {
			t.Errorf("receipt store %+v", s)
		}
		if want := tenancy.ModeFor(s.Kind); s.Mode != want {
			t.Errorf("store %s in mode %s, want %s", s.Name, s.Mode, want)
		}
	}
	// Before: the platform calls about acme before the erasure (its
	// provision); the erasure's own calls are anonymized but not counted.
	if counts["table:tenant_audit"] != 1 {
		t.Errorf("audit rows before: %d, want 1", counts["table:tenant_audit"])
	}
	if r.Barrier.MembersGone != 1 || r.Barrier.MembersLive != 0 {
		t.Errorf("barrier %+v: the dead member is gone", r.Barrier)
	}
	// Audit rows are kept, anonymized.
	var named, pseudo int
	if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE tenant = 'acme' OR detail::text LIKE '%acme%'), count(*) FILTER (WHERE tenant = $1)
		FROM strata.tenant_audit`, tenancy.Pseudonym(r.ReceiptID, "acme")).Scan(&named, &pseudo); err != nil {
		t.Fatal(err)
	}
	if named != 0 || pseudo != 3 { // provision, erase, set_erasing
		t.Errorf("tenant_audit: %d rows still name acme, %d carry its pseudonym (want 3)", named, pseudo)
	}
	// The tombstone: erased, not provisionable, and the log refuses its events.
	tn, err := b.store.Get(ctx, b.actor, "acme")
	if err != nil || tn.Status != tenancy.StatusErased || tn.Name != "" {
		t.Fatalf("tombstone %+v %v", tn, err)
	}
	if _, err := b.store.Provision(ctx, b.actor, tenancy.ProvisionRequest{ID: "acme"}); !errors.Is(err, domain.ErrRejected) {
		t.Fatalf("provision of an erased tenant: %v", err)
	}
	_, err = conn.Exec(ctx, `INSERT INTO strata.events (tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata)
		VALUES ('acme', 's-9', 1, gen_random_uuid(), 't', 1, '{}', '{}')`)
	if err == nil || !strings.Contains(err.Error(), "being erased") {
		t.Fatalf("append of an erased tenant: %v", err)
	}
	// Rerunning a finished erasure returns the same receipt.
	again, err := e.Erase(ctx, b.actor, "acme", "again")
	if err != nil || again.Receipt == nil || again.Receipt.ContentHash != r.ContentHash {
		t.Fatalf("rerun: %v %+v", err, again.Receipt)
	}
	if named := tenantAuditNaming(t, conn, "acme"); named != 0 {
		t.Fatalf("the rerun's audit row names the tenant: %d", named)
	}
}

func tenantAuditNaming(t *testing.T, conn *pgx.Conn, tenant string) int {
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM strata.tenant_audit WHERE tenant = $1`, tenant).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Every failpoint of the workflow, then a rerun: the receipt's counts are
// those of an erasure that was never interrupted, and nothing is left.
func TestEraseResumesAfterAFailureAtEveryPoint(t *testing.T) {
	t.Parallel()
	points := []struct {
		name string
		hit  int
	}{
		{"after-suppress", 1}, {"after-quiesce", 1}, {"after-inventory", 1},
		{"after-store", 1}, {"after-store", 2}, {"after-store", 5}, {"after-erase", 1}, {"after-verify", 1}, {"after-receipt", 1},
	}
	var want map[string]int64
	{
		b := setup(t, tenancy.StoreConfig{})
		seed(t, b)
		w, err := newEraser(t, b, tenancy.EraserConfig{}).Erase(context.Background(), b.actor, "acme", "reference")
		if err != nil {
			t.Fatal(err)
		}
		want = w.Receipt.Counts()
	}
	injected := errors.New("injected")
	for _, p := range points {
		t.Run(fmt.Sprintf("%s=%d", p.name, p.hit), func(t *testing.T) {
			t.Parallel()
			b := setup(t, tenancy.StoreConfig{})
			seed(t, b)
			ctx := context.Background()
			hits := 0
			failing := newEraser(t, b, tenancy.EraserConfig{AfterFunc: func(_ context.Context, _ domain.TenantID, point string) error {
				if point == p.name {
					if hits++; hits == p.hit {
						return injected
					}
				}
				return nil
			}})
			w, err := failing.Erase(ctx, b.actor, "acme", "interrupted")
			if !errors.Is(err, injected) {
				t.Fatalf("erase: %v, want the injected failure", err)
			}
			st, err := failing.Status(ctx, b.actor, "acme")
			if err != nil || st.LastError == "" || st.NextStep() == "" && p.name != "after-receipt" {
				t.Fatalf("status after the failure: %v %+v", err, st)
			}
			_ = w
			done, err := newEraser(t, b, tenancy.EraserConfig{}).Erase(ctx, b.actor, "acme", "resumed")
			if err != nil {
				t.Fatalf("resume: %v", err)
			}
			if got := done.Receipt.Counts(); !maps.Equal(got, want) {
				t.Fatalf("receipt counts after resuming:\n %v\nwant\n %v", got, want)
			}
			if !done.Receipt.Verify() || done.LastError != "" {
				t.Fatalf("receipt %+v, last error %q", done.Receipt, done.LastError)
			}
			for tb, n := range tenantRows(t, adminConn(t, b), "acme") {
				if n != 0 {
					t.Errorf("%s has %d rows of the erased tenant", tb, n)
				}
			}
		})
	}
}

// runMember runs a Directory with a lease, as a serving process does, and
// returns it once it has heartbeated.
func runMember(t *testing.T, b *testBundle, cfg tenancy.DirectoryConfig) *tenancy.Directory {
	t.Helper()
	cfg.Pool = b.app
	if cfg.Lease == 0 {
		cfg.Lease = 3 * time.Second
	}
	dir := tenancy.NewDirectory(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = dir.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, 10*time.Second, func() bool { return dir.Loaded() && !dir.Fenced() })
	return dir
}

// A serving process with a request of the tenant in flight does not
// acknowledge: the barrier waits, nothing is destroyed, new requests of
// the tenant are refused meanwhile; once the request ends, the barrier
// passes and the erasure finishes.
func TestEraseBarrierWaitsForEveryMember(t *testing.T) {
	t.Parallel()
	b := setup(t, tenancy.StoreConfig{})
	seed(t, b)
	ctx := context.Background()
	dir := runMember(t, b, tenancy.DirectoryConfig{Reload: time.Hour})
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	h := tenancy.Gate(dir, tenancy.GateConfig{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
		w.WriteHeader(http.StatusNoContent)
	}))
	held := make(chan int, 1)
	go func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil).WithContext(domain.NewContext(ctx, "acme")))
		held <- rec.Code
	}()
	<-entered

	waiting := make(chan struct{})
	var once sync.Once
	e := newEraser(t, b, tenancy.EraserConfig{BarrierTimeout: time.Minute, ProgressFunc: func(p tenancy.Progress) {
		if p.Step == tenancy.StepSuppress && strings.HasPrefix(p.Message, "waiting for 1 of 1") {
			once.Do(func() { close(waiting) })
		}
	}})
	result := make(chan error, 1)
	go func() {
		_, err := e.Erase(ctx, b.actor, "acme", "barrier test")
		result <- err
	}()
	<-waiting
	// One runner per tenant: a second one is refused while the first waits.
	if _, err := newEraser(t, b, tenancy.EraserConfig{}).Erase(ctx, b.actor, "acme", "a second runner"); !errors.Is(err, tenancy.ErrErasureRunning) {
		t.Fatalf("a second erasure of the tenant: %v, want ErrErasureRunning", err)
	}
	// The change is applied (a new request is refused) but not acknowledged.
	waitFor(t, 5*time.Second, func() bool { return admit(dir, "acme") == httpapi.CodeTenantSuspended })
	rec := httptest.NewRecorder()
	go h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil).WithContext(domain.NewContext(ctx, "acme")))
	select {
	case <-entered:
		t.Fatal("a request of the erasing tenant reached the handler")
	case err := <-result:
		t.Fatalf("the erasure went past the barrier with a request in flight: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if n := tenantRows(t, adminConn(t, b), "acme")["events"]; n != 25 {
		t.Fatalf("events destroyed before the barrier: %d left", n)
	}
	close(release)
	if code := <-held; code != http.StatusNoContent {
		t.Fatalf("held request: %d", code)
	}
	if err := <-result; err != nil {
		t.Fatalf("erase: %v", err)
	}
	st, err := e.Status(ctx, b.actor, "acme")
	if err != nil || st.Receipt == nil || st.Receipt.Barrier.MembersAcked != 1 || st.Receipt.Barrier.MembersLive != 1 {
		t.Fatalf("barrier in the receipt: %v %+v", err, st.Receipt)
	}
}

// The barrier's timeout stops the workflow before anything is destroyed;
// a rerun once the member acknowledges finishes it.
func TestEraseBarrierTimeoutDestroysNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, tenancy.StoreConfig{})
	seed(t, b)
	ctx := context.Background()
	dir := runMember(t, b, tenancy.DirectoryConfig{Reload: time.Hour})
	release := make(chan struct{})
	entered := make(chan struct{})
	h := tenancy.Gate(dir, tenancy.GateConfig{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
	}))
	go h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil).WithContext(domain.NewContext(ctx, "acme")))
	<-entered
	e := newEraser(t, b, tenancy.EraserConfig{BarrierTimeout: 300 * time.Millisecond})
	w, err := e.Erase(ctx, b.actor, "acme", "timeout test")
	if !errors.Is(err, tenancy.ErrBarrierTimeout) {
		t.Fatalf("erase: %v, want the barrier timeout", err)
	}
	if len(w.Barrier.Waiting) != 1 || !strings.Contains(w.LastError, "barrier") || w.NextStep() != tenancy.StepSuppress {
		t.Fatalf("state after the timeout: %+v", w)
	}
	if n := tenantRows(t, adminConn(t, b), "acme")["events"]; n != 25 {
		t.Fatalf("events destroyed by a stopped erasure: %d left", n)
	}
	close(release)
	if _, err := e.Erase(ctx, b.actor, "acme", "timeout test, again"); err != nil {
		t.Fatalf("rerun: %v", err)
	}
}

// The fence: a Directory that has not heartbeated within its lease
// refuses every tenant (503), and one whose heartbeat succeeds only after
// its lease ran out (the barrier may have counted it gone and destroyed
// data meanwhile) reloads the directory before it serves anyone, so a
// change it had not yet processed is never answered from the old state.
// Held deterministically: the heartbeat by a lock on the member's row,
// the reload (or, without it, the push's refresh) by a lock on the
// tenants table; the lease runs out on a clock the test moves.
func TestDirectoryFencesItselfWithoutHeartbeat(t *testing.T) {
	t.Parallel()
	b := setup(t, tenancy.StoreConfig{})
	ctx := context.Background()
	if _, err := b.store.Provision(ctx, b.actor, tenancy.ProvisionRequest{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	var offset atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	const lease = 6 * time.Second // heartbeats every 2s
	dir := runMember(t, b, tenancy.DirectoryConfig{Reload: time.Hour, Lease: lease, NowFunc: clock})
	if code := admit(dir, "acme"); code != "" {
		t.Fatalf("active tenant refused: %q", code)
	}
	conn := adminConn(t, b)
	waiting := func(query string) bool {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1`, query).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	rowLock, err := pgx.Connect(ctx, b.db.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer rowLock.Close(ctx)
	hold, err := rowLock.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hold.Exec(ctx, `SELECT 1 FROM strata.tenant_directory_members WHERE member_id = $1 FOR UPDATE`, dir.MemberID()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool { return waiting("UPDATE tenant_directory_members SET heartbeat_at%") })
	// The heartbeat has started and hangs. A change is committed; its push
	// waits behind the heartbeat on the listening connection.
	if _, err := b.store.Suspend(ctx, b.actor, "acme", "while fenced"); err != nil {
		t.Fatal(err)
	}
	tableLock, err := pgx.Connect(ctx, b.db.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer tableLock.Close(ctx)
	block, err := tableLock.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := block.Exec(ctx, `LOCK TABLE strata.tenants IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	// The lease runs out since the last heartbeat, not since the hanging
	// one began (which started less than a second ago).
	offset.Store(int64(lease - time.Second))
	if code := admit(dir, "acme"); code != httpapi.CodeUnavailable {
		t.Fatalf("past the lease without a heartbeat: %q, want unavailable", code)
	}
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// The heartbeat commits; the Directory now reads the tenants table
	// (its reload) and hangs there.
	waitFor(t, 10*time.Second, func() bool { return waiting("%FROM tenants%") })
	if code := admit(dir, "acme"); code != httpapi.CodeUnavailable {
		t.Fatalf("the fence lifted before the directory was reloaded: %q (the suspension is not applied yet)", code)
	}
	if err := block.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		code := admit(dir, "acme")
		if code == httpapi.CodeTenantSuspended {
			break
		}
		if code != httpapi.CodeUnavailable {
			t.Fatalf("first answer after the fence: %q, want tenant_suspended", code)
		}
		if time.Now().After(deadline) {
			t.Fatal("still fenced 10s after the heartbeat was released")
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := b.store.Resume(ctx, b.actor, "acme", "served again"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool { return admit(dir, "acme") == "" })
}

// An append of the tenant that was in progress when it became erasing is
// waited for, and its event erased with the others; a runner that has not
// passed the tenant's last event holds the erasure (its timeout destroys
// nothing).
func TestEraseQuiescesAppendsAndRunners(t *testing.T) {
	t.Parallel()
	b := setup(t, tenancy.StoreConfig{})
	seed(t, b)
	ctx := context.Background()
	conn := adminConn(t, b)
	// A runner, live, at the start of the log.
	exec(t, conn, `INSERT INTO strata.projection_checkpoints (projection, status) VALUES ('lagger', 'running')`)
	e := newEraser(t, b, tenancy.EraserConfig{QuiesceTimeout: 300 * time.Millisecond})
	w, err := e.Erase(ctx, b.actor, "acme", "quiesce test")
	if !errors.Is(err, tenancy.ErrQuiesceTimeout) || len(w.Quiesce.Lagging) != 1 || w.Quiesce.Lagging[0] != "lagger" || w.NextStep() != tenancy.StepQuiesce {
		t.Fatalf("erase with a lagging runner: %v %+v", err, w.Quiesce)
	}
	if n := tenantRows(t, conn, "acme")["events"]; n != 25 {
		t.Fatalf("events destroyed by a stopped erasure: %d left", n)
	}
	exec(t, conn, `UPDATE strata.projection_checkpoints SET pos_major = 1e15 WHERE projection = 'lagger'`)

	// An append begun before the erasure, still open.
	b2 := setup(t, tenancy.StoreConfig{}) // a tenant of its own database, erased from scratch
	seed(t, b2)
	other2, err := pgx.Connect(ctx, b2.db.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer other2.Close(ctx)
	tx, err := other2.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO strata.events (tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata)
		VALUES ('acme', 'late', 1, gen_random_uuid(), 'thing.happened', 1, '{}', '{}')`); err != nil {
		t.Fatal(err)
	}
	waitingTx := make(chan struct{})
	var once sync.Once
	e2 := newEraser(t, b2, tenancy.EraserConfig{QuiesceTimeout: time.Minute, ProgressFunc: func(p tenancy.Progress) {
		if p.Step == tenancy.StepQuiesce && strings.Contains(p.Message, "transactions that were open") {
			once.Do(func() { close(waitingTx) })
		}
	}})
	result := make(chan tenancy.Erasure, 1)
	go func() {
		w, err := e2.Erase(ctx, b2.actor, "acme", "quiesce test")
		if err != nil {
			t.Errorf("erase: %v", err)
		}
		result <- w
	}()
	<-waitingTx
	select {
	case <-result:
		t.Fatal("the erasure went past an open append of the tenant")
	case <-time.After(200 * time.Millisecond):
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	w = <-result
	if w.Receipt == nil || w.Receipt.Counts()["table:events"] != 26 {
		t.Fatalf("receipt %+v: want the open append's event counted (26)", w.Receipt)
	}
	if n := tenantRows(t, adminConn(t, b2), "acme")["events"]; n != 0 {
		t.Fatalf("%d events left", n)
	}
	// The first database finishes once its runner has passed.
	if _, err := e.Erase(ctx, b.actor, "acme", "quiesce test, again"); err != nil {
		t.Fatal(err)
	}
}

// TestEraseQuiesceFindsTheLastEventByNumber (found while writing the
// HOSTILE chaos scenario): the quiesce waits for every runner to pass the
// tenant's last event, found by (tx_id, position) as numbers. The query
// selected both as text under their own names, so ORDER BY sorted the
// text: among acme's 25 events of one transaction the "last" was position
// 9, and a runner that had applied 20 of them passed, to write the other 5
// after the erasure (with tx_id, once the log's transaction numbers gain a
// digit).
func TestEraseQuiesceFindsTheLastEventByNumber(t *testing.T) {
	t.Parallel()
	b := setup(t, tenancy.StoreConfig{})
	seed(t, b)
	ctx := context.Background()
	conn := adminConn(t, b)
	var tx string
	var last int64
	if err := conn.QueryRow(ctx, `SELECT tx_id::text AS tx_text, position FROM strata.events WHERE tenant_id = 'acme'
		ORDER BY tx_id DESC, position DESC LIMIT 1`).Scan(&tx, &last); err != nil {
		t.Fatal(err)
	}
	if last < 20 {
		t.Fatalf("acme's last event is at position %d: the test wants positions of two digits", last)
	}
	// A live runner five events short of acme's last one.
	exec(t, conn, `INSERT INTO strata.projection_checkpoints (projection, status, pos_major, pos_minor) VALUES ('halfway', 'running', $1::numeric, $2)`,
		tx, last-5)
	e := newEraser(t, b, tenancy.EraserConfig{QuiesceTimeout: 300 * time.Millisecond})
	w, err := e.Erase(ctx, b.actor, "acme", "quiesce test")
	if want := fmt.Sprintf("%s/%d", tx, last); w.Quiesce.LastEvent != want {
		t.Errorf("the quiesce's last event of acme is %s, want %s", w.Quiesce.LastEvent, want)
	}
	if !errors.Is(err, tenancy.ErrQuiesceTimeout) || len(w.Quiesce.Lagging) != 1 || w.Quiesce.Lagging[0] != "halfway" {
		t.Fatalf("erase with a runner 5 events short: %v %+v; want it waited for", err, w.Quiesce)
	}
}

// stubbornStore is an external store whose Erase removes nothing until it
// is fixed: what the workflow does with a store it cannot verify.
type stubbornStore struct {
	mu    sync.Mutex
	items int64
	fixed bool
}

func (s *stubbornStore) Name() string            { return "test:stubborn" }
func (s *stubbornStore) Kind() tenancy.StoreKind { return tenancy.KindBroker }
func (s *stubbornStore) Verification(domain.TenantID) string {
	return "count of the stub's items"
}

func (s *stubbornStore) Count(context.Context, domain.TenantID) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.items, nil
}

func (s *stubbornStore) Erase(context.Context, domain.TenantID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fixed {
		s.items = 0
	}
	return nil
}

// A store that still holds the tenant's data after its erasure is
// unknown: completion is blocked (no receipt, the tenant stays erasing)
// and status shows it; once it can be erased, a rerun finishes with the
// count before taken the first time.
func TestEraseUnknownStoreBlocksCompletion(t *testing.T) {
	t.Parallel()
	b := setup(t, tenancy.StoreConfig{})
	seed(t, b)
	ctx := context.Background()
	x := &stubbornStore{items: 9}
	e := newEraser(t, b, tenancy.EraserConfig{External: []tenancy.ExternalStore{x}})
	w, err := e.Erase(ctx, b.actor, "acme", "unknown test")
	if !errors.Is(err, tenancy.ErrUnknownStores) || w.Receipt != nil || w.NextStep() != tenancy.StepVerify {
		t.Fatalf("erase with a stubborn store: %v, next %s", err, w.NextStep())
	}
	st, err := e.Status(ctx, b.actor, "acme")
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, s := range st.Stores {
		if s.Name == "test:stubborn" {
			found = true
			if s.State != tenancy.StateUnknown || s.Before != 9 || s.After == nil || *s.After != 9 {
				t.Fatalf("the stubborn store in status: %+v", s)
			}
		} else if s.State != tenancy.StateDone {
			t.Fatalf("store %s is %s", s.Name, s.State)
		}
	}
	if !found || !strings.Contains(st.LastError, "test:stubborn") {
		t.Fatalf("status: %+v", st)
	}
	if tn, err := b.store.Get(ctx, b.actor, "acme"); err != nil || tn.Status != tenancy.StatusErasing {
		t.Fatalf("tenant %+v %v: want it erasing until every store is done", tn, err)
	}
	x.mu.Lock()
	x.fixed, x.items = true, 11 // more by now: the receipt keeps the count taken first
	x.mu.Unlock()
	w, err = e.Erase(ctx, b.actor, "acme", "unknown test, again")
	if err != nil {
		t.Fatal(err)
	}
	if got := w.Receipt.Counts()["test:stubborn"]; got != 9 {
		t.Fatalf("receipt count before of the stubborn store: %d, want 9", got)
	}
}

func TestModeForEachStoreKind(t *testing.T) {
	t.Parallel()
	for kind, want := range map[tenancy.StoreKind]tenancy.Mode{
		tenancy.KindTable:       tenancy.ModeHardDelete,
		tenancy.KindWatermill:   tenancy.ModeHardDelete,
		tenancy.KindReferencing: tenancy.ModeHardDelete,
		tenancy.KindBroker:      tenancy.ModeHardDelete,
		tenancy.KindAudit:       tenancy.ModeAnonymized,
		tenancy.KindESDB:        tenancy.ModeBeyondUse,
	} {
		if got := tenancy.ModeFor(kind); got != want {
			t.Errorf("ModeFor(%s) = %s, want %s", kind, got, want)
		}
	}
}

// The eraser role reaches every tenant table through its own tenant
// policy, and only the transaction's tenant.
func TestEraserRoleSeesOnlyItsTenant(t *testing.T) {
	t.Parallel()
	b := setup(t, tenancy.StoreConfig{})
	seed(t, b)
	ctx := context.Background()
	tables, err := db.EnsureEraserGrants(ctx, b.owner)
	if err != nil {
		t.Fatal(err)
	}
	if len(tables) < 10 {
		t.Fatalf("eraser grants on %d tables", len(tables))
	}
	err = pgx.BeginFunc(ctx, b.owner, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+db.RoleEraser); err != nil {
			return err
		}
		if err := db.SetTenant(ctx, tx, "beta"); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM strata.events WHERE tenant_id = 'acme'`)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 0 {
			return fmt.Errorf("the eraser under beta deleted %d events of acme", tag.RowsAffected())
		}
		return errors.New("rollback")
	})
	if err == nil || err.Error() != "rollback" {
		t.Fatal(err)
	}
}

// TestJoinAdmitsFromTheStart: a Directory that has joined, before its
// listener runs, is a registered member and admits requests (serve admits
// from its first request); a suspension committed before it joined is in
// its copy; a Directory that has only loaded is fenced until it joins.
func TestJoinAdmitsFromTheStart(t *testing.T) {
	t.Parallel()
	b := setup(t, tenancy.StoreConfig{})
	ctx := context.Background()
	for _, id := range []domain.TenantID{"acme", "beta"} {
		if _, err := b.store.Provision(ctx, b.actor, tenancy.ProvisionRequest{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.store.Suspend(ctx, b.actor, "beta", "before the join"); err != nil {
		t.Fatal(err)
	}
	loaded := tenancy.NewDirectory(tenancy.DirectoryConfig{Pool: b.app, Reload: time.Hour, Lease: 3 * time.Second})
	if err := loaded.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if code := admit(loaded, "acme"); code != "unavailable" {
		t.Errorf("a Directory that loaded but never joined admitted acme (%q): it is no member of the barrier", code)
	}
	dir := tenancy.NewDirectory(tenancy.DirectoryConfig{Pool: b.app, Reload: time.Hour, Lease: 3 * time.Second})
	if err := dir.Join(ctx); err != nil {
		t.Fatal(err)
	}
	if code := admit(dir, "acme"); code != "" {
		t.Errorf("acme refused after the join: %q", code)
	}
	if code := admit(dir, "beta"); code != "tenant_suspended" {
		t.Errorf("beta, suspended before the join: %q, want tenant_suspended", code)
	}
	var members int
	if err := adminConn(t, b).QueryRow(ctx, `SELECT count(*) FROM strata.tenant_directory_members WHERE member_id = $1`, dir.MemberID()).Scan(&members); err != nil {
		t.Fatal(err)
	}
	if members != 1 {
		t.Errorf("the joined Directory has %d rows in tenant_directory_members, want 1", members)
	}
}
