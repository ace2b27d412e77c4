package replay_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/domain/money"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/orderview"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/replay"
)

// poisoned is OrderDetails with a handler bug: it cannot apply the events
// bad picks until fixed is set.
type poisoned struct {
	*orderview.OrderDetails
	bad   func(event.Record) bool
	fixed *atomic.Bool
}

var errPoison = errors.New("poison: the handler cannot apply this event")

func (p poisoned) broken(ev event.Record) bool { return !p.fixed.Load() && p.bad(ev) }

func (p poisoned) Apply(b *pgx.Batch, ev projections.Event) error {
	if p.broken(ev.Record) {
		return errPoison
	}
	return p.OrderDetails.Apply(b, ev)
}

func (p poisoned) ApplyBatch(b *pgx.Batch, evs []projections.Event) error {
	for _, ev := range evs {
		if p.broken(ev.Record) {
			return errPoison
		}
	}
	return p.OrderDetails.ApplyBatch(b, evs)
}

func (p poisoned) WithTables(m map[string]string) projections.Projection {
	return poisoned{OrderDetails: p.OrderDetails.WithTables(m).(*orderview.OrderDetails), bad: p.bad, fixed: p.fixed}
}

// TestPoisonIsolation is the acceptance test of decision 5: a handler that
// fails deterministically on one event of 1 of 64 streams, under steady
// load. The stream is parked after the configured attempts (exponential
// backoff), exactly that event and its stream's later events are dead
// letters, and the other 63 streams stay current (lag p99 under 2 s) all
// along. After the handler is fixed, `dlq retry --all` leaves the read
// model identical to a fresh rebuild, and running it again changes nothing.
func TestPoisonIsolation(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 3*time.Minute)
	// A cluster of its own: lag is measured, and any transaction held open
	// elsewhere in a cluster pauses every reader of its log.
	priv := testdb.NewPrivate(t, nil, orderview.Migrations)
	fixed := &atomic.Bool{}
	const (
		tenants    = 4
		streams    = 64
		poisonIdx  = 17
		poisonAt   = 3 // the stream's version that cannot be applied
		perStream  = 30
		appendRate = 200 // events per second, all streams together
	)
	streamOf := func(i int) (tenant, id string) { return fmt.Sprintf("t%d", i%tenants), fmt.Sprintf("s%02d", i) }
	poisonTenant, poisonID := streamOf(poisonIdx)
	p := poisoned{OrderDetails: orderview.NewOrderDetails(orderview.OrderDetailsTables{}), fixed: fixed,
		bad: func(ev event.Record) bool {
			return ev.Tenant == poisonTenant && ev.Stream == order.StreamID(poisonID) && ev.Version == poisonAt
		}}
	b := newBundle(t, priv.DB, p)
	wake := projections.NewSignal()
	store := postgres.New(b.d.App, b.d.Projector, postgres.WithAppendHook(wake.Fire))
	progress := projections.NewProgress()
	policy := projections.FailurePolicy{Attempts: 5, InitialDelay: 200 * time.Millisecond, MaxDelay: 10 * time.Second}
	runLive(t, b, p, projections.RunnerConfig{Registry: order.Registry, DeadLetters: true, Failures: policy, Wake: wake.C, Progress: progress, PollInterval: 200 * time.Millisecond})

	// Record when each checkpoint committed.
	type commit struct {
		at  time.Time
		pos event.Position
	}
	var (
		mu      sync.Mutex
		commits []commit
	)
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			ch := progress.C()
			if pos, ok := progress.Position(p.Name()); ok {
				mu.Lock()
				if len(commits) == 0 || commits[len(commits)-1].pos.Less(pos) {
					commits = append(commits, commit{time.Now(), pos})
				}
				mu.Unlock()
			}
			select {
			case <-ch:
			case <-watchCtx.Done():
				return
			}
		}
	}()

	// Load: every stream gets created, then lines, round robin at a steady
	// rate, from 8 writers.
	type appended struct {
		at     time.Time
		pos    event.Position
		stream int
	}
	var (
		amu  sync.Mutex
		apps []appended
	)
	at := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	const writers = 8
	interval := time.Second * writers / appendRate
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for v := 1; v <= perStream; v++ {
				for i := w; i < streams; i += writers {
					<-tick.C
					tenant, id := streamOf(i)
					var ev event.Payload = order.LineAdded{OrderID: id, ProductID: fmt.Sprintf("p-%d", v%5), Quantity: 1,
						UnitPrice: money.Money{Amount: 100 * int64(v%5+1), Currency: "EUR"}, At: at.Add(time.Duration(v) * time.Minute)}
					if v == 1 {
						ev = order.Created{OrderID: id, CustomerID: "c-" + id, Currency: "EUR", At: at}
					}
					pos := appendEvents(ctx, t, store, tenant, order.StreamID(id), int64(v-1), ev)
					amu.Lock()
					apps = append(apps, appended{time.Now(), pos, i})
					amu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	head := lastPosition(ctx, t, b)
	waitFor(t, 30*time.Second, "the projection to reach the head", func() bool { return !checkpoint(ctx, t, b, p.Name()).Position.Less(head) })
	waitFor(t, 10*time.Second, "the last commit to be recorded", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(commits) > 0 && !commits[len(commits)-1].pos.Less(head)
	})
	stopWatch()
	<-watched

	// Lag of every event of the 63 healthy streams: from its append to the
	// commit of the batch that applied it.
	var lags []time.Duration
	mu.Lock()
	for _, a := range apps {
		if a.stream == poisonIdx {
			continue
		}
		k := sort.Search(len(commits), func(i int) bool { return !commits[i].pos.Less(a.pos) })
		if k == len(commits) {
			t.Fatalf("event at %s was never applied", a.pos)
		}
		lags = append(lags, max(commits[k].at.Sub(a.at), 0))
	}
	mu.Unlock()
	slices.Sort(lags)
	p99 := lags[len(lags)*99/100]
	t.Logf("healthy streams: %d events, lag p50 %s, p99 %s, max %s", len(lags), lags[len(lags)/2], p99, lags[len(lags)-1])
	if p99 >= 2*time.Second {
		t.Errorf("lag p99 %s of the healthy streams, want under 2s", p99)
	}

	// The poisoned stream is parked for good once its attempts are spent.
	var letters []projections.DeadLetter
	waitFor(t, 30*time.Second, "the poisoned event to use up its attempts", func() bool {
		var err error
		letters, err = b.svc.DeadLetters(ctx, replay.ListOptions{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		return len(letters) > 0 && letters[0].Attempts == policy.Attempts && letters[0].NextAttemptAt.IsZero()
	})
	if want := perStream - poisonAt + 1; len(letters) != want {
		t.Fatalf("%d dead letters, want %d (versions %d..%d of the poisoned stream)", len(letters), want, poisonAt, perStream)
	}
	ids := eventIDs(ctx, t, b, poisonTenant, order.StreamID(poisonID))
	for i, l := range letters {
		v := int64(poisonAt + i)
		if l.Tenant != poisonTenant || l.Event.Stream != order.StreamID(poisonID) || l.Event.Version != v || l.Event.ID != ids[v] ||
			l.Status != projections.LetterParked || l.Projection != p.Name() {
			t.Errorf("letter %d: %s/%s v%d event %s %s, want %s/%s v%d event %s parked", i, l.Tenant, l.Event.Stream, l.Event.Version,
				l.Event.ID, l.Status, poisonTenant, order.StreamID(poisonID), v, ids[v])
		}
		if (i == 0) != l.Head || i > 0 && l.Attempts != 0 {
			t.Errorf("letter %d: head %v, attempts %d", i, l.Head, l.Attempts)
		}
	}
	head0 := letters[0]
	if head0.Error == "" || head0.FirstFailedAt.IsZero() || !head0.LastFailedAt.After(head0.FirstFailedAt) {
		t.Errorf("head letter: error %q, failures %s .. %s", head0.Error, head0.FirstFailedAt, head0.LastFailedAt)
	}
	// Backoff: 200ms, 400ms, 800ms, 1.6s (±20%) between the 5 attempts.
	if span := head0.LastFailedAt.Sub(head0.FirstFailedAt); span < 2*time.Second || span > 8*time.Second {
		t.Errorf("attempts spanned %s, want about 3s of exponential backoff", span)
	}
	if cp := checkpoint(ctx, t, b, p.Name()); cp.ParkedStreams != 1 || cp.ParkedLetters != int64(len(letters)) {
		t.Errorf("checkpoint counts %d parked streams and %d letters, want 1 and %d", cp.ParkedStreams, cp.ParkedLetters, len(letters))
	}

	// Fix the handler and retry everything, with the live runner running.
	fixed.Store(true)
	report, err := b.svc.Retry(ctx, replay.RetrySpec{All: true, Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if len(report.Streams) != 1 || !report.Streams[0].Unparked || report.Applied() != len(letters) {
		t.Fatalf("retry report %+v, want the one stream unparked with %d letters applied", report, len(letters))
	}
	// New events of the stream apply normally again.
	appendEvents(ctx, t, store, poisonTenant, order.StreamID(poisonID), perStream, order.Placed{OrderID: poisonID,
		Total: money.Money{Amount: placedTotal(ctx, t, b, poisonTenant, poisonID), Currency: "EUR"}, At: at.Add(time.Hour)})
	head = lastPosition(ctx, t, b)
	waitFor(t, 30*time.Second, "the projection to reach the head", func() bool { return !checkpoint(ctx, t, b, p.Name()).Position.Less(head) })
	want := dumpTables(ctx, t, b.d.AdminURL, freshRebuild(ctx, t, b, head, p))
	got := dumpTables(ctx, t, b.d.AdminURL, liveTables(p))
	if got != want {
		t.Fatalf("after retry the read model differs from a fresh rebuild:\n%s", diffLines(want, got))
	}
	// Twice changes nothing.
	if _, err := b.svc.Retry(ctx, replay.RetrySpec{All: true, Actor: "test"}); !errors.Is(err, replay.ErrNothingToDo) {
		t.Fatalf("second retry: %v, want ErrNothingToDo", err)
	}
	if again := dumpTables(ctx, t, b.d.AdminURL, liveTables(p)); again != got {
		t.Fatalf("the second retry changed rows:\n%s", diffLines(got, again))
	}
	retried, err := b.svc.DeadLetters(ctx, replay.ListOptions{Statuses: []projections.LetterStatus{projections.LetterRetried}, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(retried) != len(letters) || retried[0].ResolvedBy != "test" || retried[0].ResolvedAt.IsZero() {
		t.Errorf("%d letters marked retried (first %+v), want %d by test", len(retried), retried, len(letters))
	}
	if cp := checkpoint(ctx, t, b, p.Name()); cp.ParkedStreams != 0 || cp.ParkedLetters != 0 {
		t.Errorf("checkpoint counts %d parked streams and %d letters after the retry, want 0", cp.ParkedStreams, cp.ParkedLetters)
	}
}

// placedTotal is the order's total as projected (what placing it needs).
func placedTotal(ctx context.Context, t testing.TB, b *bundle, tenant, id string) int64 {
	t.Helper()
	var total int64
	if err := adminConn(ctx, t, b.d.AdminURL).QueryRow(ctx, `SELECT total_amount FROM order_details WHERE tenant_id = $1 AND order_id = $2`,
		tenant, id).Scan(&total); err != nil {
		t.Fatal(err)
	}
	return total
}

// eventIDs returns a stream's event IDs by version.
func eventIDs(ctx context.Context, t testing.TB, b *bundle, tenant, stream string) map[int64]string {
	t.Helper()
	rows, err := adminConn(ctx, t, b.d.AdminURL).Query(ctx, `SELECT version, event_id::text FROM events WHERE tenant_id = $1 AND stream_id = $2`, tenant, stream)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]string{}
	for rows.Next() {
		var v int64
		var id string
		if err := rows.Scan(&v, &id); err != nil {
			t.Fatal(err)
		}
		out[v] = id
	}
	return out
}

// lastPosition is the position of the newest event written (read as the
// superuser, not limited by the cluster's horizon: another test's open
// transaction must not make it look older than it is).
func lastPosition(ctx context.Context, t testing.TB, b *bundle) event.Position {
	t.Helper()
	var tx string
	var pos int64
	err := adminConn(ctx, t, b.d.AdminURL).QueryRow(ctx, `SELECT tx_id::text AS tx_text, position FROM events ORDER BY events.tx_id DESC, events.position DESC LIMIT 1`).Scan(&tx, &pos)
	if errors.Is(err, pgx.ErrNoRows) {
		return event.Position{}
	}
	if err != nil {
		t.Fatal(err)
	}
	var p event.Position
	if _, err := fmt.Sscan(tx, &p.Major); err != nil {
		t.Fatal(err)
	}
	p.Minor = uint64(pos)
	return p
}

// diffLines shows the lines only in want (-) or only in got (+).
func diffLines(want, got string) string {
	count := func(s string) map[string]int {
		m := map[string]int{}
		for _, l := range splitLines(s) {
			m[l]++
		}
		return m
	}
	w, g := count(want), count(got)
	var out []string
	for _, l := range splitLines(want) {
		if g[l] < w[l] && len(out) < 40 {
			out = append(out, "- "+l)
		}
	}
	for _, l := range splitLines(got) {
		if w[l] < g[l] && len(out) < 80 {
			out = append(out, "+ "+l)
		}
	}
	return joinLines(out)
}
