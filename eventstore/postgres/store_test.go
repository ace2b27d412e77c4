package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/eventstore/storetest"
	"github.com/strata-es/strata/internal/pgtest"
	"github.com/strata-es/strata/internal/testdb"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestConformance(t *testing.T) {
	harness := func(t *testing.T) storetest.Harness {
		d := testdb.New(t)
		s := New(d.App, d.Projector)
		return storetest.Harness{Store: s, Log: s, Idempotency: s}
	}
	storetest.Run(t, harness)
	storetest.RunMulti(t, harness)
	storetest.RunConditions(t, harness)
}

func ctxT(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// tailer follows the global log the way a projection does and records what
// it saw, so tests can assert it never skipped.
type tailer struct {
	log  eventstore.Log
	mu   sync.Mutex
	pos  event.Position
	seen []event.Record
}

func (tl *tailer) poll(t *testing.T) int {
	t.Helper()
	n := 0
	for {
		tl.mu.Lock()
		pos := tl.pos
		tl.mu.Unlock()
		recs, err := tl.log.ReadAll(context.Background(), pos, 100)
		if err != nil {
			t.Error(err)
			return n
		}
		if len(recs) == 0 {
			return n
		}
		tl.mu.Lock()
		tl.seen = append(tl.seen, recs...)
		tl.pos = recs[len(recs)-1].Position
		tl.mu.Unlock()
		n += len(recs)
	}
}

func (tl *tailer) count() int {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return len(tl.seen)
}

// holdAppend starts an append to stream and leaves its transaction open
// after the insert, exactly where a slow command would be.
func holdAppend(t *testing.T, d *testdb.DB, tenant, stream string) (commit, rollback func()) {
	t.Helper()
	ctx := ctxT(t)
	tx, err := d.App.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	meta, _ := json.Marshal(event.Metadata{})
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{lockSQL, []any{tenant, tenant + "/" + stream}},
		{appendSQL, []any{tenant, stream, int64(eventstore.Any), []string{storetest.NewID()}, []string{"held.event"}, []int32{1}, []string{`{}`}, []string{string(meta)}}},
	} {
		if _, err := tx.Exec(ctx, q.sql, q.args...); err != nil {
			t.Fatal(err)
		}
	}
	return func() {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}, func() {
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
		}
}

// TestGlobalLogNeverSkipsLateCommit holds one append transaction open while
// 1,000 others commit, with a reader tailing the log throughout. The reader
// must not move past the open transaction; once it commits the reader must
// get every event exactly once; once it rolls back the reader must not
// stall.
func TestGlobalLogNeverSkipsLateCommit(t *testing.T) {
	for _, outcome := range []string{"commit", "rollback"} {
		t.Run(outcome, func(t *testing.T) {
			t.Parallel()
			// A cluster of its own: the held transaction pauses every
			// global-log reader of its cluster, other tests' included.
			d := testdb.NewPrivate(t, nil).DB
			s := New(d.App, d.Projector)
			tl := &tailer{log: s}
			commit, rollback := holdAppend(t, d, "t-a", "held")

			const others = 1000
			var wg sync.WaitGroup
			work := make(chan int)
			for w := 0; w < 8; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range work {
						_, err := s.Append(context.Background(), eventstore.AppendRequest{
							Tenant: []string{"t-a", "t-b"}[i%2], Stream: fmt.Sprintf("s-%d", i%37), Expected: eventstore.Any,
							Events: []eventstore.NewEvent{{ID: storetest.NewID(), Type: "x.y", SchemaVersion: 1, Data: []byte(`{}`)}},
						})
						if err != nil {
							t.Error(err)
						}
					}
				}()
			}
			stop, done := make(chan struct{}), make(chan struct{})
			go func() { // tail while the others commit
				defer close(done)
				for {
					select {
					case <-time.After(2 * time.Millisecond):
						tl.poll(t)
					case <-stop:
						return
					}
				}
			}()
			for i := 0; i < others; i++ {
				work <- i
			}
			close(work)
			wg.Wait()
			close(stop)
			<-done
			tl.poll(t)
			if n := tl.count(); n != 0 {
				t.Fatalf("reader saw %d events while an older transaction was still open", n)
			}
			head, err := s.Head(context.Background())
			if err != nil || !head.IsZero() {
				t.Fatalf("head moved to %v while an older transaction was open (err %v)", head, err)
			}
			n, _, err := s.Lag(context.Background(), event.Position{})
			if err != nil || n < others {
				t.Fatalf("lag reports %d events (err %v), want >= %d", n, err, others)
			}

			want := others
			if outcome == "commit" {
				commit()
				want++
			} else {
				rollback()
			}
			start := time.Now()
			tl.poll(t)
			if got := tl.count(); got != want {
				t.Fatalf("after %s the reader has %d events, want %d", outcome, got, want)
			}
			if time.Since(start) > 2*time.Second {
				t.Fatalf("reader took %v to catch up after %s", time.Since(start), outcome)
			}
			ids := map[string]bool{}
			for _, r := range tl.seen {
				if ids[r.ID] {
					t.Fatalf("event %s delivered twice", r.ID)
				}
				ids[r.ID] = true
			}
			all, err := s.ReadAll(context.Background(), event.Position{}, 5000)
			if err != nil || len(all) != want {
				t.Fatalf("log holds %d events (err %v), want %d", len(all), err, want)
			}
			for _, r := range all {
				if !ids[r.ID] {
					t.Fatalf("reader skipped %s", r.ID)
				}
			}
		})
	}
}

// TestHeldAppendBlocksSameStreamInOrder: an append waiting for a stream's
// lock gets its transaction id only after the holder commits, so the log
// orders the two by version even though the second started first.
func TestHeldAppendBlocksSameStreamInOrder(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	s := New(d.App, d.Projector)
	commit, _ := holdAppend(t, d, "t-a", "s")
	res := make(chan error)
	go func() {
		_, err := s.Append(context.Background(), eventstore.AppendRequest{Tenant: "t-a", Stream: "s", Expected: eventstore.Any,
			Events: []eventstore.NewEvent{{ID: storetest.NewID(), Type: "x.y", SchemaVersion: 1, Data: []byte(`{}`)}}})
		res <- err
	}()
	select {
	case err := <-res:
		t.Fatalf("append did not wait for the stream lock (err %v)", err)
	case <-time.After(200 * time.Millisecond):
	}
	commit()
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	// The log shows the second event once no older transaction of the
	// cluster is open (the parallel tests hold some): wait for it, then
	// check the order.
	var all []event.Record
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		all, err = s.ReadAll(context.Background(), event.Position{}, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(all) >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if len(all) != 2 || all[0].Version != 1 || all[1].Version != 2 {
		t.Fatalf("log %v, want versions 1 then 2", all)
	}
}
