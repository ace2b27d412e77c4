package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/eventstore/storetest"
	"github.com/strata-es/strata/internal/linearize"
	"github.com/strata-es/strata/internal/testdb"
)

// The grouped path is tested with the group forced: the gather hook holds
// the first group until every request of the test has joined, so the mix
// of tenants, streams and conflicting requests in one transaction is
// certain, not hoped for. Every test also checks that the group formed
// (one transaction id for its events, the spy's group sizes).

func TestConformanceGrouped(t *testing.T) {
	for _, cfg := range []GroupConfig{{}, {MaxInFlight: 1, MaxBatch: 8}} {
		t.Run(fmt.Sprintf("in_flight=%d,max_batch=%d", cfg.withDefaults().MaxInFlight, cfg.withDefaults().MaxBatch), func(t *testing.T) {
			harness := func(t *testing.T) storetest.Harness {
				d := testdb.New(t)
				s := New(d.App, d.Projector, WithGroupCommit(cfg))
				return storetest.Harness{Store: s, Log: s, Idempotency: s}
			}
			storetest.Run(t, harness)
			// Multi-stream appends run beside the groups, in their lock order.
			storetest.RunMulti(t, harness)
			storetest.RunConditions(t, harness)
		})
	}
}

// groupSpy records the group transactions of a store.
type groupSpy struct {
	mu       sync.Mutex
	sizes    []int
	outcomes []groupOutcome
}

func (sp *groupSpy) record(n int, o groupOutcome) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.sizes = append(sp.sizes, n)
	sp.outcomes = append(sp.outcomes, o)
}

func (sp *groupSpy) get() ([]int, []groupOutcome) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return slices.Clone(sp.sizes), slices.Clone(sp.outcomes)
}

// forced returns test hooks: the first group waits for gather requests;
// beforeCommit (optional) runs before the group's COMMIT.
func forced(gather int, spy *groupSpy, beforeCommit func(context.Context, *pgx.Conn) error) Option {
	return func(s *Store) {
		s.group.gather = gather
		s.group.beforeCommit = beforeCommit
		if spy != nil {
			s.group.onGroup = spy.record
		}
	}
}

func oneEvent(typ string) []eventstore.NewEvent {
	return []eventstore.NewEvent{{ID: storetest.NewID(), Type: typ, SchemaVersion: 1, Data: []byte(`{"k":1}`)}}
}

// queued waits until n appends wait in s's queue.
func queued(t *testing.T, s *Store, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s.group.mu.Lock()
		q := len(s.group.queue)
		s.group.mu.Unlock()
		if q >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d appends queued after 30s, want %d", q, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// txIDs returns the distinct transaction ids of recs.
func txIDs(recs []event.Record) map[uint64]bool {
	out := map[uint64]bool{}
	for _, r := range recs {
		out[r.Position.Major] = true
	}
	return out
}

// R9 in one transaction: 50 appends with one expected version to one
// stream: exactly one wins, 49 conflict; then 50 with Any: 50 contiguous
// versions, all from one transaction.
func TestGroupR9OneStream(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	spy := &groupSpy{}
	s := New(d.App, d.Projector, WithGroupCommit(GroupConfig{MaxBatch: 64}), forced(50, spy, nil))
	// Seed alone: the hook holds only the first group; this bypasses it.
	seed := oneEvent("x.y")
	if _, err := s.appendAlone(ctxT(t), eventstore.AppendRequest{Tenant: "t-a", Stream: "hot", Expected: eventstore.NoStream, Events: seed},
		mustEncode(t, seed)); err != nil {
		t.Fatal(err)
	}
	const n = 50
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.Append(ctxT(t), eventstore.AppendRequest{Tenant: "t-a", Stream: "hot", Expected: eventstore.Exact(1), Events: oneEvent("x.y")})
		}()
	}
	wg.Wait()
	ok, conflicts := 0, 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, eventstore.ErrVersionConflict):
			conflicts++
		default:
			t.Fatalf("unexpected error: %v", err)
		}
	}
	if ok != 1 || conflicts != n-1 {
		t.Fatalf("%d succeeded, %d conflicts; want 1 and %d", ok, conflicts, n-1)
	}
	if sizes, outcomes := spy.get(); len(sizes) != 1 || sizes[0] != n || outcomes[0] != groupCommitted {
		t.Fatalf("groups %v (outcomes %v), want one committed group of %d", sizes, outcomes, n)
	}
	got, _ := s.ReadStream(ctxT(t), "t-a", "hot", 0)
	if len(got) != 2 {
		t.Fatalf("stream has %d events, want 2", len(got))
	}

	spy2 := &groupSpy{}
	s2 := New(d.App, d.Projector, WithGroupCommit(GroupConfig{MaxBatch: 64}), forced(n, spy2, nil))
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s2.Append(ctxT(t), eventstore.AppendRequest{Tenant: "t-a", Stream: "any", Expected: eventstore.Any, Events: oneEvent("x.y")}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	got, _ = s2.ReadStream(ctxT(t), "t-a", "any", 0)
	if len(got) != n {
		t.Fatalf("stream has %d events, want %d", len(got), n)
	}
	for i, r := range got {
		if r.Version != int64(i+1) || (i > 0 && !got[i-1].Position.Less(r.Position)) {
			t.Fatalf("version %d at %v, index %d (previous at %v)", r.Version, r.Position, i, got[max(i-1, 0)].Position)
		}
	}
	if tx := txIDs(got); len(tx) != 1 {
		t.Fatalf("the 50 events come from %d transactions, want 1", len(tx))
	}
}

func mustEncode(t *testing.T, evs []eventstore.NewEvent) encoded {
	t.Helper()
	enc, err := encode(eventstore.AppendRequest{Events: evs})
	if err != nil {
		t.Fatal(err)
	}
	return enc
}

// auditWrites makes the database record, for every row inserted into
// events and idempotency_keys, its tenant_id and the tenant setting in
// force when PostgreSQL wrote it (a BEFORE trigger, as the application
// role), and the writing transaction.
func auditWrites(t *testing.T, d *testdb.DB) *pgxpool.Pool {
	t.Helper()
	admin, err := pgxpool.New(context.Background(), d.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	for _, q := range []string{
		`CREATE TABLE strata.test_write_audit (tbl text, tenant_id text, setting text, tx xid8 DEFAULT pg_current_xact_id())`,
		`GRANT INSERT ON strata.test_write_audit TO strata_app`,
		`CREATE FUNCTION strata.test_audit_write() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO strata.test_write_audit (tbl, tenant_id, setting) VALUES (TG_TABLE_NAME, NEW.tenant_id, current_setting('app.tenant_id', true));
			RETURN NEW;
		END $$`,
		`CREATE TRIGGER test_audit BEFORE INSERT ON strata.events FOR EACH ROW EXECUTE FUNCTION strata.test_audit_write()`,
		`CREATE TRIGGER test_audit BEFORE INSERT ON strata.idempotency_keys FOR EACH ROW EXECUTE FUNCTION strata.test_audit_write()`,
	} {
		if _, err := admin.Exec(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	}
	return admin
}

// mixedReq is one request of the mixed group and what it may answer.
type mixedReq struct {
	req eventstore.AppendRequest
	res eventstore.AppendResult
	err error
}

// TestGroupMixesTenantsStreamsAndConflicts forces one group of 3 tenants,
// streams shared by several requests (with exact, any, no-stream and
// stream-exists expectations, some bound to conflict), batches of several
// events, and idempotency keys (one of them twice, one of them already
// recorded by an earlier command). It checks every request's answer
// against the stored log, per-stream contiguity and order in the global
// log, that the group was one transaction, and that every row was
// written under its own tenant's setting.
func TestGroupMixesTenantsStreamsAndConflicts(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	admin := auditWrites(t, d)
	plain := New(d.App, d.Projector)
	resp := func(r eventstore.AppendResult) ([]byte, error) {
		return fmt.Appendf(nil, `{"v":%d,"p":%q}`, r.LastVersion, r.Position.Token()), nil
	}
	// Before the group: t-b/s1 holds 2 events.
	for _, r := range []eventstore.AppendRequest{
		{Tenant: "t-b", Stream: "s1", Expected: eventstore.NoStream, Events: append(oneEvent("x.y"), oneEvent("x.y")...)},
	} {
		if _, err := plain.Append(ctxT(t), r); err != nil {
			t.Fatal(err)
		}
	}
	idem := func(key string) *eventstore.Idempotency {
		return &eventstore.Idempotency{Key: key, RequestHash: "h-" + key, Response: resp}
	}
	reqs := []*mixedReq{}
	add := func(tenant, stream string, exp eventstore.ExpectedVersion, n int, id *eventstore.Idempotency) {
		evs := make([]eventstore.NewEvent, 0, n)
		for range n {
			evs = append(evs, oneEvent("mixed.happened")...)
		}
		reqs = append(reqs, &mixedReq{req: eventstore.AppendRequest{Tenant: tenant, Stream: stream, Expected: exp, Events: evs, Idempotency: id}})
	}
	for _, tenant := range []string{"t-a", "t-b", "t-c"} {
		add(tenant, "new", eventstore.NoStream, 3, nil)      // one of these two wins
		add(tenant, "new", eventstore.NoStream, 1, nil)      //
		add(tenant, "any", eventstore.Any, 2, nil)           // all three go in
		add(tenant, "any", eventstore.Any, 1, nil)           //
		add(tenant, "any", eventstore.Any, 1, idem("k-any")) //
		add(tenant, "exists", eventstore.StreamExists, 1, nil)
	}
	add("t-b", "s1", eventstore.Exact(2), 2, idem("k-s1")) // one of these three wins
	add("t-b", "s1", eventstore.Exact(2), 1, nil)
	add("t-b", "s1", eventstore.Exact(2), 1, nil)
	add("t-b", "s1", eventstore.Exact(5), 1, nil)               // conflicts
	add("t-a", "dup-key-1", eventstore.Any, 1, idem("k-twice")) // one key twice: the
	add("t-a", "dup-key-2", eventstore.Any, 1, idem("k-twice")) // second waits its turn
	add("t-c", "k-fresh", eventstore.NoStream, 1, idem("fresh"))

	spy := &groupSpy{}
	// One transaction at a time: the repeated key's second append waits
	// for the group instead of racing it from a second slot (which is
	// correct too, but would roll the group back when it wins).
	s := New(d.App, d.Projector, WithGroupCommit(GroupConfig{MaxBatch: 64, MaxInFlight: 1}), forced(len(reqs), spy, nil))
	var wg sync.WaitGroup
	for _, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.res, r.err = s.Append(ctxT(t), r.req)
		}()
	}
	wg.Wait()

	sizes, outcomes := spy.get()
	if len(sizes) == 0 || sizes[0] != len(reqs)-1 {
		t.Fatalf("groups %v, want a first group of %d (all but the repeated key)", sizes, len(reqs)-1)
	}
	if outcomes[0] != groupCommitted {
		t.Fatalf("first group %v, want committed", outcomes[0])
	}

	// Answers per stream.
	type key struct{ tenant, stream string }
	wins := map[key][]*mixedReq{}
	for _, r := range reqs {
		k := key{r.req.Tenant, r.req.Stream}
		switch {
		case r.err == nil:
			wins[k] = append(wins[k], r)
		case errors.Is(r.err, eventstore.ErrVersionConflict), errors.Is(r.err, eventstore.ErrIdempotencyKeyExists):
		default:
			t.Fatalf("%s/%s: unexpected error %v", r.req.Tenant, r.req.Stream, r.err)
		}
	}
	want := map[key]int{{"t-b", "s1"}: 1, {"t-c", "k-fresh"}: 1}
	for _, tenant := range []string{"t-a", "t-b", "t-c"} {
		want[key{tenant, "new"}], want[key{tenant, "any"}], want[key{tenant, "exists"}] = 1, 3, 0
	}
	// k-twice: one of its two appends (whichever ran first) goes in.
	if len(wins[key{"t-a", "dup-key-1"}])+len(wins[key{"t-a", "dup-key-2"}]) != 1 {
		t.Fatalf("key k-twice executed %d times", len(wins[key{"t-a", "dup-key-1"}])+len(wins[key{"t-a", "dup-key-2"}]))
	}
	delete(want, key{"t-a", "dup-key-1"})
	delete(want, key{"t-a", "dup-key-2"})
	for k, n := range want {
		if len(wins[k]) != n {
			t.Errorf("%s/%s: %d appends succeeded, want %d", k.tenant, k.stream, len(wins[k]), n)
		}
	}
	// Every success came from the one group transaction (the repeated
	// key's second append, which ran later, did not execute).
	groupTx := map[uint64]bool{}
	for _, r := range reqs {
		if r.err == nil {
			groupTx[r.res.Position.Major] = true
		}
	}
	if len(groupTx) != 1 {
		t.Fatalf("the successes come from %d transactions, want 1", len(groupTx))
	}

	// Every success is stored where it said, every failure not at all.
	stored := map[string]event.Record{}
	for _, tenant := range []string{"t-a", "t-b", "t-c"} {
		for _, stream := range []string{"new", "any", "exists", "s1", "dup-key-1", "dup-key-2", "k-fresh"} {
			recs, err := plain.ReadStream(ctxT(t), tenant, stream, 0)
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range recs {
				if r.Version != int64(i+1) || r.Tenant != tenant {
					t.Fatalf("%s/%s: event %d is version %d of tenant %s", tenant, stream, i, r.Version, r.Tenant)
				}
				stored[r.ID] = r
			}
		}
	}
	for _, r := range reqs {
		for i, e := range r.req.Events {
			rec, ok := stored[e.ID]
			switch {
			case r.err != nil && ok:
				t.Errorf("%s/%s failed (%v) but its event is stored", r.req.Tenant, r.req.Stream, r.err)
			case r.err == nil && !ok:
				t.Errorf("%s/%s succeeded but its event is not stored", r.req.Tenant, r.req.Stream)
			case r.err == nil && rec.Version != r.res.FirstVersion+int64(i):
				t.Errorf("%s/%s: event %d stored as version %d, answer said %d..%d", r.req.Tenant, r.req.Stream, i, rec.Version, r.res.FirstVersion, r.res.LastVersion)
			case r.err == nil && i == len(r.req.Events)-1 && rec.Position != r.res.Position:
				t.Errorf("%s/%s: answered position %v, stored at %v", r.req.Tenant, r.req.Stream, r.res.Position, rec.Position)
			}
		}
		if r.req.Idempotency != nil && r.err == nil {
			got, ok, err := plain.LookupIdempotency(ctxT(t), r.req.Tenant, r.req.Idempotency.Key)
			if w, _ := resp(r.res); err != nil || !ok || string(got.Response) != string(w) {
				t.Errorf("%s key %s: stored %q (found %v, err %v), want %s", r.req.Tenant, r.req.Idempotency.Key, got.Response, ok, err, w)
			}
		}
	}
	all := readAllLog(t, plain, len(stored))
	checkLogContiguous(t, all)

	// RLS: every row was written under its own tenant's setting.
	var mismatched, audited int
	if err := admin.QueryRow(ctxT(t), `SELECT count(*) FILTER (WHERE setting IS DISTINCT FROM tenant_id), count(*) FROM strata.test_write_audit`).Scan(&mismatched, &audited); err != nil {
		t.Fatal(err)
	}
	if mismatched != 0 || audited == 0 {
		t.Fatalf("%d of %d rows written under another tenant's setting", mismatched, audited)
	}
	var tenants, keys int
	var tx uint64
	for k := range groupTx {
		tx = k
	}
	if err := admin.QueryRow(ctxT(t), `SELECT count(DISTINCT tenant_id), count(*) FILTER (WHERE tbl = 'idempotency_keys')
		FROM strata.test_write_audit WHERE tx::text = $1`, fmt.Sprint(tx)).Scan(&tenants, &keys); err != nil {
		t.Fatal(err)
	}
	wantKeys := 0
	for _, r := range reqs {
		if r.err == nil && r.req.Idempotency != nil {
			wantKeys++
		}
	}
	if tenants != 3 || keys != wantKeys {
		t.Fatalf("the group transaction wrote rows of %d tenants and %d keys, want 3 and %d", tenants, keys, wantKeys)
	}
}

// A member's key already recorded by another command fails the shared
// transaction (its unique index): every member is retried alone, the
// duplicate answers ErrIdempotencyKeyExists and the others go in.
func TestGroupRecordedKeyRetriesAlone(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	resp := func(eventstore.AppendResult) ([]byte, error) { return []byte("ok"), nil }
	plain := New(d.App, d.Projector)
	if _, err := plain.Append(ctxT(t), eventstore.AppendRequest{Tenant: "t-c", Stream: "first", Expected: eventstore.NoStream, Events: oneEvent("x.y"),
		Idempotency: &eventstore.Idempotency{Key: "old", RequestHash: "h", Response: resp}}); err != nil {
		t.Fatal(err)
	}
	spy := &groupSpy{}
	s := New(d.App, d.Projector, WithGroupCommit(GroupConfig{MaxBatch: 64}), forced(4, spy, nil))
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.Append(ctxT(t), eventstore.AppendRequest{Tenant: []string{"t-c", "t-a"}[i%2], Stream: fmt.Sprintf("r-%d", i), Expected: eventstore.NoStream,
				Events: oneEvent("x.y"), Idempotency: &eventstore.Idempotency{Key: []string{"old", "n-1", "n-2", "n-3"}[i], RequestHash: "h", Response: resp}})
		}()
	}
	wg.Wait()
	if sizes, outs := spy.get(); len(sizes) != 1 || sizes[0] != 4 || outs[0] != groupRolledBack {
		t.Fatalf("groups %v %v, want one rolled-back group of 4", sizes, outs)
	}
	for i, err := range errs {
		if (i == 0) != errors.Is(err, eventstore.ErrIdempotencyKeyExists) || (i > 0 && err != nil) {
			t.Fatalf("append %d: %v", i, err)
		}
		recs, _ := s.ReadStream(ctxT(t), []string{"t-c", "t-a"}[i%2], fmt.Sprintf("r-%d", i), 0)
		if len(recs) != map[bool]int{true: 0, false: 1}[i == 0] {
			t.Fatalf("append %d: %d events stored", i, len(recs))
		}
	}
}

// readAllLog reads the whole global log (want events) from the start.
func readAllLog(t *testing.T, l eventstore.Log, want int) []event.Record {
	t.Helper()
	var out []event.Record
	var pos event.Position
	deadline := time.Now().Add(time.Minute)
	for len(out) < want {
		recs, err := l.ReadAll(ctxT(t), pos, 500)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("log shows %d events, want %d", len(out), want)
			}
			time.Sleep(5 * time.Millisecond)
			continue
		}
		out = append(out, recs...)
		pos = recs[len(recs)-1].Position
	}
	if len(out) != want {
		t.Fatalf("log holds %d events, want %d", len(out), want)
	}
	return out
}

// checkLogContiguous: every stream's versions appear in the log as 1, 2, 3 ...
func checkLogContiguous(t *testing.T, recs []event.Record) {
	t.Helper()
	last := map[string]int64{}
	for _, r := range recs {
		k := r.Tenant + "/" + r.Stream
		if r.Version != last[k]+1 {
			t.Fatalf("stream %s: version %d follows %d in the global log", k, r.Version, last[k])
		}
		last[k] = r.Version
	}
}

// R10 in groups: 20 appends with one key at once, with 10 others, the
// group forced: one execution, 19 ErrIdempotencyKeyExists.
func TestGroupR10SameKey(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	spy := &groupSpy{}
	s := New(d.App, d.Projector, WithGroupCommit(GroupConfig{MaxBatch: 64}), forced(30, spy, nil))
	resp := func(r eventstore.AppendResult) ([]byte, error) { return fmt.Appendf(nil, "%d", r.LastVersion), nil }
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, exists := 0, 0
	for i := range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := eventstore.AppendRequest{Tenant: "t-a", Stream: "conc", Expected: eventstore.Any, Events: oneEvent("x.y"),
				Idempotency: &eventstore.Idempotency{Key: "k", RequestHash: "h", Response: resp}}
			if i >= 20 {
				req = eventstore.AppendRequest{Tenant: []string{"t-a", "t-b"}[i%2], Stream: fmt.Sprintf("o-%d", i), Expected: eventstore.NoStream, Events: oneEvent("x.y"),
					Idempotency: &eventstore.Idempotency{Key: fmt.Sprintf("k-%d", i), RequestHash: "h", Response: resp}}
			}
			_, err := s.Append(ctxT(t), req)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && i < 20:
				ok++
			case errors.Is(err, eventstore.ErrIdempotencyKeyExists) && i < 20:
				exists++
			case err != nil:
				t.Errorf("append %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if ok != 1 || exists != 19 {
		t.Fatalf("%d executions, %d ErrIdempotencyKeyExists; want 1 and 19", ok, exists)
	}
	if sizes, _ := spy.get(); len(sizes) == 0 || sizes[0] != 11 {
		t.Fatalf("groups %v, want a first group of 11 (one per key)", sizes)
	}
	if got, _ := s.ReadStream(ctxT(t), "t-a", "conc", 0); len(got) != 1 {
		t.Fatalf("stream has %d events, want 1", len(got))
	}
}

// R3/R4 on the grouped path: a group transaction (tenants a and b, a key,
// several streams) is held open before its COMMIT while 300 ungrouped
// appends commit and one more waits for a stream of the group. A reader
// tailing the log sees nothing past the open group; after it commits the
// reader gets every event exactly once, each stream in version order, the
// waiting append after the group's. If the group instead fails, its
// members are retried alone and the reader does not stall.
func TestGroupHeldOpenNeverSkipped(t *testing.T) {
	for _, outcome := range []string{"commit", "fail"} {
		t.Run(outcome, func(t *testing.T) {
			t.Parallel()
			d := testdb.NewPrivate(t, nil).DB
			plain := New(d.App, d.Projector)
			entered, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			hook := func(ctx context.Context, conn *pgx.Conn) error {
				first := false
				once.Do(func() { first = true })
				if !first {
					return nil
				}
				close(entered)
				<-release
				if outcome == "fail" {
					return errors.New("injected failure before commit")
				}
				return nil
			}
			spy := &groupSpy{}
			s := New(d.App, d.Projector, WithGroupCommit(GroupConfig{MaxBatch: 64}), forced(6, spy, hook))
			type member struct {
				req eventstore.AppendRequest
				err error
			}
			members := []*member{}
			for i := range 6 {
				req := eventstore.AppendRequest{Tenant: []string{"t-a", "t-b"}[i%2], Stream: fmt.Sprintf("g-%d", i%3), Expected: eventstore.Any, Events: oneEvent("held.event")}
				if i == 0 {
					req.Idempotency = &eventstore.Idempotency{Key: "held-key", RequestHash: "h", Response: func(eventstore.AppendResult) ([]byte, error) { return []byte("ok"), nil }}
				}
				members = append(members, &member{req: req})
			}
			var wg sync.WaitGroup
			for _, m := range members {
				wg.Add(1)
				go func() { defer wg.Done(); _, m.err = s.Append(ctxT(t), m.req) }()
			}
			<-entered

			tl := &tailer{log: plain}
			const others = 300
			var owg sync.WaitGroup
			work := make(chan int)
			for range 4 {
				owg.Add(1)
				go func() {
					defer owg.Done()
					for i := range work {
						if _, err := plain.Append(context.Background(), eventstore.AppendRequest{Tenant: []string{"t-a", "t-b"}[i%2], Stream: fmt.Sprintf("o-%d", i%17),
							Expected: eventstore.Any, Events: oneEvent("other.event")}); err != nil {
							t.Error(err)
						}
					}
				}()
			}
			// One append to a stream of the group waits for its lock.
			waiter := make(chan error, 1)
			go func() {
				_, err := plain.Append(context.Background(), eventstore.AppendRequest{Tenant: "t-a", Stream: "g-0", Expected: eventstore.Any, Events: oneEvent("after.group")})
				waiter <- err
			}()
			for i := range others {
				work <- i
				if i%50 == 0 {
					tl.poll(t)
				}
			}
			close(work)
			owg.Wait()
			tl.poll(t)
			if n := tl.count(); n != 0 {
				t.Fatalf("reader saw %d events while the group was open", n)
			}
			select {
			case err := <-waiter:
				t.Fatalf("an append to a stream of the open group did not wait (err %v)", err)
			default:
			}
			close(release)
			wg.Wait()
			if err := <-waiter; err != nil {
				t.Fatal(err)
			}
			for _, m := range members {
				if m.err != nil {
					t.Fatalf("member %s/%s: %v", m.req.Tenant, m.req.Stream, m.err)
				}
			}
			sizes, outs := spy.get()
			wantOutcome := map[string]groupOutcome{"commit": groupCommitted, "fail": groupRolledBack}[outcome]
			if len(sizes) != 1 || sizes[0] != 6 || outs[0] != wantOutcome {
				t.Fatalf("groups %v %v, want one group of 6, outcome %v", sizes, outs, wantOutcome)
			}
			want := others + 6 + 1
			deadline := time.Now().Add(10 * time.Second)
			for tl.poll(t); tl.count() < want && time.Now().Before(deadline); tl.poll(t) {
				time.Sleep(5 * time.Millisecond)
			}
			if got := tl.count(); got != want {
				t.Fatalf("reader has %d events, want %d", got, want)
			}
			ids := map[string]bool{}
			for _, r := range tl.seen {
				if ids[r.ID] {
					t.Fatalf("event %s delivered twice", r.ID)
				}
				ids[r.ID] = true
			}
			checkLogContiguous(t, tl.seen)
			if outcome == "fail" {
				return
			}
			var group []event.Record
			for _, r := range tl.seen {
				if r.Type == "held.event" {
					group = append(group, r)
				}
			}
			if tx := txIDs(group); len(tx) != 1 {
				t.Fatalf("the group's events come from %d transactions, want 1", len(tx))
			}
			// The append that waited for the group's lock on t-a/g-0 comes
			// after the group's event of that stream.
			recs, _ := plain.ReadStream(ctxT(t), "t-a", "g-0", 0)
			if len(recs) != 2 || recs[0].Type != "held.event" || recs[1].Type != "after.group" || !recs[0].Position.Less(recs[1].Position) {
				t.Fatalf("t-a/g-0 holds %v, want the group's event, then the waiting append", recs)
			}
		})
	}
}

// A deferred constraint that fails at COMMIT (the server's answer to the
// shared transaction's commit): nothing of the group is stored, every
// member is retried alone, the one that violates the constraint fails
// alone and the others succeed. No member sees a success that did not
// commit.
func TestGroupFailedCommitRetriesMembersAlone(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	admin, err := pgxpool.New(context.Background(), d.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	for _, q := range []string{
		`CREATE FUNCTION strata.test_no_poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.event_type = 'test.poison' THEN RAISE EXCEPTION 'poison event' USING ERRCODE = '23514'; END IF;
			RETURN NULL;
		END $$`,
		`CREATE CONSTRAINT TRIGGER test_no_poison AFTER INSERT ON strata.events DEFERRABLE INITIALLY DEFERRED
			FOR EACH ROW EXECUTE FUNCTION strata.test_no_poison()`,
	} {
		if _, err := admin.Exec(ctxT(t), q); err != nil {
			t.Fatal(err)
		}
	}
	for _, idempotent := range []bool{false, true} { // implicit and explicit transaction
		t.Run(fmt.Sprintf("idempotent=%v", idempotent), func(t *testing.T) {
			spy := &groupSpy{}
			s := New(d.App, d.Projector, WithGroupCommit(GroupConfig{MaxBatch: 64}), forced(8, spy, nil))
			errs := make([]error, 8)
			reqs := make([]eventstore.AppendRequest, 8)
			for i := range reqs {
				typ := "test.fine"
				if i == 3 {
					typ = "test.poison"
				}
				reqs[i] = eventstore.AppendRequest{Tenant: []string{"t-a", "t-b"}[i%2], Stream: fmt.Sprintf("f-%v-%d", idempotent, i%4), Expected: eventstore.Any, Events: oneEvent(typ)}
				if idempotent {
					reqs[i].Idempotency = &eventstore.Idempotency{Key: fmt.Sprintf("f-%d", i), RequestHash: "h", Response: func(eventstore.AppendResult) ([]byte, error) { return []byte("ok"), nil }}
				}
			}
			var wg sync.WaitGroup
			for i := range reqs {
				wg.Add(1)
				go func() { defer wg.Done(); _, errs[i] = s.Append(ctxT(t), reqs[i]) }()
			}
			wg.Wait()
			if sizes, outs := spy.get(); len(sizes) != 1 || sizes[0] != 8 || outs[0] != groupRolledBack {
				t.Fatalf("groups %v %v, want one rolled-back group of 8", sizes, outs)
			}
			for i, err := range errs {
				stored := false
				recs, _ := s.ReadStream(ctxT(t), reqs[i].Tenant, reqs[i].Stream, 0)
				for _, r := range recs {
					stored = stored || r.ID == reqs[i].Events[0].ID
				}
				switch {
				case i == 3 && (err == nil || stored):
					t.Fatalf("the poison append: err %v, stored %v; want a failure, nothing stored", err, stored)
				case i != 3 && (err != nil || !stored):
					t.Fatalf("append %d: err %v, stored %v; want success, stored", i, err, stored)
				}
				if idempotent {
					_, found, _ := s.LookupIdempotency(ctxT(t), reqs[i].Tenant, reqs[i].Idempotency.Key)
					if found != (i != 3) {
						t.Fatalf("append %d: key recorded %v", i, found)
					}
				}
			}
		})
	}
}

// The connection dies after the group's writes, before its COMMIT: the
// outcome is not one a member may call success. Every member gets an
// error (the store's "unavailable"), and indeed nothing was stored.
func TestGroupLostConnectionIsNoSuccess(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	admin, err := pgxpool.New(context.Background(), d.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	kill := func(ctx context.Context, conn *pgx.Conn) error {
		_, err := admin.Exec(ctx, `SELECT pg_terminate_backend($1)`, conn.PgConn().PID())
		time.Sleep(50 * time.Millisecond)
		return err
	}
	spy := &groupSpy{}
	s := New(d.App, d.Projector, WithGroupCommit(GroupConfig{MaxBatch: 64}), forced(6, spy, kill))
	errs := make([]error, 6)
	reqs := make([]eventstore.AppendRequest, 6)
	var wg sync.WaitGroup
	for i := range reqs {
		reqs[i] = eventstore.AppendRequest{Tenant: []string{"t-a", "t-b", "t-c"}[i%3], Stream: fmt.Sprintf("l-%d", i), Expected: eventstore.NoStream, Events: oneEvent("x.y")}
		wg.Add(1)
		go func() { defer wg.Done(); _, errs[i] = s.Append(ctxT(t), reqs[i]) }()
	}
	wg.Wait()
	if sizes, outs := spy.get(); len(sizes) != 1 || sizes[0] != 6 || outs[0] != groupIndeterminate {
		t.Fatalf("groups %v %v, want one indeterminate group of 6", sizes, outs)
	}
	for i, err := range errs {
		if !errors.Is(err, eventstore.ErrUnavailable) {
			t.Fatalf("member %d: %v, want ErrUnavailable", i, err)
		}
		if recs, _ := s.ReadStream(ctxT(t), reqs[i].Tenant, reqs[i].Stream, 0); len(recs) != 0 {
			t.Fatalf("member %d: %d events stored", i, len(recs))
		}
	}
}

// A request whose context ends while it waits for a group leaves it: it
// answers at once, nothing of it is written, and the group forms without
// it.
func TestGroupCancelledWhileWaiting(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	spy := &groupSpy{}
	s := New(d.App, d.Projector, WithGroupCommit(GroupConfig{MaxBatch: 64}), forced(3, spy, nil))
	ctx, cancel := context.WithCancel(context.Background())
	gone := eventstore.AppendRequest{Tenant: "t-a", Stream: "c", Expected: eventstore.Any, Events: oneEvent("x.y")}
	left := make(chan error)
	go func() { _, err := s.Append(ctx, gone); left <- err }()
	queued(t, s, 1)
	cancel()
	select {
	case err := <-left:
		if !errors.Is(err, context.Canceled) && !errors.Is(err, eventstore.ErrUnavailable) {
			t.Fatalf("cancelled append: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a cancelled append still waits for its group")
	}
	queued(t, s, 0)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Append(ctxT(t), eventstore.AppendRequest{Tenant: "t-a", Stream: "c", Expected: eventstore.Any, Events: oneEvent(fmt.Sprintf("x.%d", i))}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if sizes, _ := spy.get(); len(sizes) != 1 || sizes[0] != 3 {
		t.Fatalf("groups %v, want one of 3", sizes)
	}
	recs, _ := s.ReadStream(ctxT(t), "t-a", "c", 0)
	for _, r := range recs {
		if r.ID == gone.Events[0].ID {
			t.Fatal("the cancelled append was written")
		}
	}
	if len(recs) != 3 {
		t.Fatalf("stream holds %d events, want 3", len(recs))
	}
}

// Groups over overlapping streams, formed in opposite orders, racing each
// other and ungrouped appends to the same streams: the sorted lock order
// means no deadlock (a deadlock would roll a group back, and the spy would
// see it), and every stream stays contiguous in the log.
func TestGroupLockOrderNoDeadlock(t *testing.T) {
	t.Parallel()
	// A cluster of its own: its stream of transactions would hold the
	// global-log horizon of a shared cluster back for other tests' single
	// reads (TestHeldAppendBlocksSameStreamInOrder).
	d := testdb.NewPrivate(t, nil).DB
	plain := New(d.App, d.Projector)
	const rounds, width = 30, 8
	total := 0
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(7, 11))
	for round := range rounds {
		spyA, spyB := &groupSpy{}, &groupSpy{}
		a := New(d.App, d.Projector, WithGroupCommit(GroupConfig{MaxBatch: 64}), forced(width, spyA, nil))
		b := New(d.App, d.Projector, WithGroupCommit(GroupConfig{MaxBatch: 64}), forced(width, spyB, nil))
		streams := rng.Perm(width)
		var wg sync.WaitGroup
		appendTo := func(s *Store, stream int) {
			defer wg.Done()
			if _, err := s.Append(ctxT(t), eventstore.AppendRequest{Tenant: []string{"t-a", "t-b"}[stream%2], Stream: fmt.Sprintf("d-%d", stream),
				Expected: eventstore.Any, Events: oneEvent("x.y")}); err != nil {
				t.Error(err)
			}
			mu.Lock()
			total++
			mu.Unlock()
		}
		for i := range width {
			wg.Add(3)
			go appendTo(a, streams[i])
			go appendTo(b, streams[width-1-i])
			go appendTo(plain, streams[i])
		}
		wg.Wait()
		for _, sp := range []*groupSpy{spyA, spyB} {
			if sizes, outs := sp.get(); len(sizes) != 1 || sizes[0] != width || outs[0] != groupCommitted {
				t.Fatalf("round %d: groups %v %v, want one committed group of %d", round, sizes, outs, width)
			}
		}
	}
	checkLogContiguous(t, readAllLog(t, plain, total))
}

// The linearizability check of the stream history, on the grouped path.
func TestStreamHistoryIsLinearizableGrouped(t *testing.T) {
	base := linStore(t)
	spy := &groupSpy{}
	store := New(base.app, base.projector, WithGroupCommit(GroupConfig{MaxInFlight: 1}), forced(0, spy, nil))
	rec, run := runStreamWorkload(t, store, streamWorkload{streams: 3, clients: 8, ops: 50, seed: 23})
	c := rec.Counts()
	sizes, _ := spy.get()
	grouped := 0
	for _, n := range sizes {
		grouped += n
	}
	t.Logf("%d operations, %d indeterminate; appends: %v; %d appends in %d group transactions", c.Operations, c.Indeterminate, run, grouped, len(sizes))
	if len(sizes) == 0 {
		t.Fatal("no append was grouped")
	}
	linearize.Require(t, linearize.StreamModel, rec.Operations(), time.Minute)
}

func TestParseGroupCommit(t *testing.T) {
	for _, tc := range []struct {
		in  string
		on  bool
		cfg GroupConfig
		err bool
	}{
		{"off", false, GroupConfig{}, false},
		{"on", true, GroupConfig{}.withDefaults(), false},
		{"on,max_batch=16,max_wait=200us,in_flight=3", true, GroupConfig{MaxBatch: 16, MaxWait: 200 * time.Microsecond, MaxInFlight: 3}, false},
		{"maybe", false, GroupConfig{}, true},
		{"on,max_batch=0", false, GroupConfig{}, true},
		{"on,color=red", false, GroupConfig{}, true},
		{"off,max_batch=3", false, GroupConfig{}, true},
	} {
		cfg, on, err := ParseGroupCommit(tc.in)
		if (err != nil) != tc.err || on != tc.on || cfg != tc.cfg {
			t.Errorf("%q: %+v %v %v; want %+v %v err=%v", tc.in, cfg, on, err, tc.cfg, tc.on, tc.err)
		}
	}
}

// A member whose response builder fails (here: panics) must not commit
// the group with its events and no record, nor take the process down
// from the group's goroutine: the group rolls back, the others go in
// alone, and the failing member fails (panics) in its own goroutine, as
// it would without grouping.
func TestGroupFailingResponseBuilder(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	spy := &groupSpy{}
	s := New(d.App, d.Projector, WithGroupCommit(GroupConfig{MaxBatch: 64}), forced(4, spy, nil))
	ok := func(eventstore.AppendResult) ([]byte, error) { return []byte("ok"), nil }
	bad := func(eventstore.AppendResult) ([]byte, error) { panic("boom") }
	results := make([]any, 4)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if r := recover(); r != nil {
					results[i] = r
				}
			}()
			resp := ok
			if i == 2 {
				resp = bad
			}
			_, err := s.Append(ctxT(t), eventstore.AppendRequest{Tenant: "t-a", Stream: fmt.Sprintf("rb-%d", i), Expected: eventstore.NoStream, Events: oneEvent("x.y"),
				Idempotency: &eventstore.Idempotency{Key: fmt.Sprintf("rb-%d", i), RequestHash: "h", Response: resp}})
			results[i] = err
		}()
	}
	wg.Wait()
	if sizes, outs := spy.get(); len(sizes) != 1 || sizes[0] != 4 || outs[0] != groupRolledBack {
		t.Fatalf("groups %v %v, want one rolled-back group of 4", sizes, outs)
	}
	for i, r := range results {
		recs, _ := s.ReadStream(ctxT(t), "t-a", fmt.Sprintf("rb-%d", i), 0)
		switch {
		case i == 2 && (r != "boom" || len(recs) != 0):
			t.Fatalf("the failing member: %v, %d events stored; want its own panic, nothing stored", r, len(recs))
		case i != 2 && (r != nil || len(recs) != 1):
			t.Fatalf("member %d: %v, %d events stored; want success", i, r, len(recs))
		}
	}
}
