package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/eventstore/storetest"
	"github.com/strata-es/strata/internal/linearize"
	"github.com/strata-es/strata/internal/testdb"
)

// The race tests of the conformance suite count winners and check
// contiguity; here porcupine, a checker nobody on the team wrote, judges
// a whole recorded history of racing appends (exact, any, stream-exists)
// and reads against the sequential model of a versioned stream
// (linearize.StreamModel). Some appends are made indeterminate on purpose,
// at fixed points of the schedule:
//
//   - cancelled mid-flight: the driver's tracer cancels the context as
//     the append's batch is sent: whether it committed is up to the race,
//     and the history must be linearizable either way;
//   - lost acknowledgement: the append completes but its answer is
//     thrown away, as when a connection drops on the way back: it
//     committed and the appender does not know it.

// midFlightKey marks a context whose append is cancelled mid-flight.
type midFlightKey struct{}

// midFlight is a pgx tracer that cancels a marked context as its batch
// (lock, insert, commit) is sent: the cancellation races the send and the
// server's work, so the append may fail before anything reached the
// server, or fail while the server commits it, or succeed.
type midFlight struct{}

func (midFlight) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (midFlight) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (midFlight) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	if cancel, ok := ctx.Value(midFlightKey{}).(context.CancelFunc); ok {
		go cancel()
	}
	return ctx
}
func (midFlight) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (midFlight) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// linStore returns a store whose app pool carries the midFlight tracer.
func linStore(t *testing.T, opts ...Option) *Store {
	t.Helper()
	d := testdb.New(t)
	app, err := db.OpenPool(context.Background(), d.AdminURL, db.PoolConfig{Role: db.RoleApp, MaxConns: 16, Tracer: midFlight{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(app.Close)
	return New(app, d.Projector, opts...)
}

type streamWorkload struct {
	streams, clients, ops int
	seed                  uint64
}

// streamRun counts what a workload's appends answered.
type streamRun struct {
	mu                                      sync.Mutex
	ok, conflicts, cancelled, lost, errored int
	cancelledOK                             int // cancelled mid-flight yet acknowledged (the cancel lost the race)
	unexpected                              []error
	// unknown holds the first event ID of every indeterminate append;
	// committed counts those found by the final reads.
	unknown   []string
	committed int
}

func (r *streamRun) String() string {
	return fmt.Sprintf("%d ok, %d conflicts, %d cancelled mid-flight (%d of them acknowledged anyway), %d acknowledgements lost; %d of %d indeterminate appends had committed",
		r.ok, r.conflicts, r.cancelled, r.cancelledOK, r.lost, r.committed, len(r.unknown))
}

const linTenant = "t-lin"

// runStreamWorkload races w.clients goroutines on each of w.streams
// streams, recording every operation. Each goroutine first appends with
// Exact(0), all at once (one winner per stream), then w.ops operations
// drawn from a seeded generator: appends expecting the version it last
// saw, appends with Any or StreamExists, and reads; after a conflict it
// reads. Operation 4 of every twenty, if an append, is cancelled
// mid-flight and operation 14 loses its acknowledgement (1 in 20 each:
// every indeterminate operation stays open to the end of the history, and
// the checker's search grows with how many are open at once). Once all
// are done, an acknowledged append with Any and a read of each stream
// close the history (so a read that misses an acknowledged event is
// certain to be caught, whatever the interleaving before).
func runStreamWorkload(t *testing.T, store eventstore.Store, w streamWorkload) (*linearize.StreamRecorder, *streamRun) {
	t.Helper()
	rec := &linearize.StreamRecorder{}
	run := &streamRun{}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for s := 0; s < w.streams; s++ {
		stream := fmt.Sprintf("lin-%d", s)
		for g := 0; g < w.clients; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(w.seed, uint64(s*1000+g)))
				var seen int64
				refresh := false
				read := func() {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					c := rec.CallRead(g, linTenant, stream)
					recs, err := store.ReadStream(ctx, linTenant, stream, 0)
					rec.ReturnRead(c, recs, err)
					if err != nil {
						run.add(func() { run.unexpected = append(run.unexpected, err) })
						return
					}
					if n := len(recs); n > 0 {
						seen = recs[n-1].Version
					}
					refresh = false
				}
				appendOp := func(i int, exp eventstore.ExpectedVersion, n int) {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					cancelMid, loseAck := i%20 == 4, i%20 == 14
					if cancelMid {
						ctx = context.WithValue(ctx, midFlightKey{}, cancel)
					}
					req := eventstore.AppendRequest{Tenant: linTenant, Stream: stream, Expected: exp, Events: linEvents(n)}
					c := rec.CallAppend(g, req)
					res, err := store.Append(ctx, req)
					if loseAck {
						rec.ReturnIndeterminate(c)
						run.add(func() { run.lost++; run.unknown = append(run.unknown, req.Events[0].ID) })
						return
					}
					rec.ReturnAppend(c, res, err)
					switch {
					case err == nil:
						seen = res.LastVersion
						run.add(func() {
							run.ok++
							if cancelMid {
								run.cancelled++
								run.cancelledOK++
							}
						})
					case errors.Is(err, eventstore.ErrVersionConflict):
						refresh = true
						run.add(func() {
							run.conflicts++
							if cancelMid {
								run.cancelled++
							}
						})
					case cancelMid:
						refresh = true
						run.add(func() { run.cancelled++; run.unknown = append(run.unknown, req.Events[0].ID) })
					default:
						run.add(func() { run.unexpected = append(run.unexpected, err) })
					}
				}
				<-start
				appendOp(-1, eventstore.Exact(0), 1)
				for i := 0; i < w.ops; i++ {
					if refresh {
						read()
						continue
					}
					switch r := rng.IntN(10); {
					case r < 4:
						appendOp(i, eventstore.Exact(seen), 1+rng.IntN(2))
					case r < 6:
						appendOp(i, eventstore.Any, 1+rng.IntN(2))
					case r < 7:
						appendOp(i, eventstore.StreamExists, 1)
					default:
						read()
					}
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	stored := map[string]bool{}
	for s := 0; s < w.streams; s++ {
		stream := fmt.Sprintf("lin-%d", s)
		req := eventstore.AppendRequest{Tenant: linTenant, Stream: stream, Expected: eventstore.Any, Events: linEvents(1)}
		a := rec.CallAppend(w.clients, req)
		res, err := store.Append(context.Background(), req)
		rec.ReturnAppend(a, res, err)
		if err != nil {
			t.Fatalf("closing append to %s: %v", stream, err)
		}
		c := rec.CallRead(w.clients, linTenant, stream)
		recs, err := store.ReadStream(context.Background(), linTenant, stream, 0)
		rec.ReturnRead(c, recs, err)
		if err != nil {
			t.Fatalf("final read of %s: %v", stream, err)
		}
		for _, r := range recs {
			stored[r.ID] = true
		}
	}
	for _, id := range run.unknown {
		if stored[id] {
			run.committed++
		}
	}
	if len(run.unexpected) > 0 {
		t.Fatalf("unexpected errors (beyond conflicts and the injected cancellations): %v", run.unexpected)
	}
	return rec, run
}

func (r *streamRun) add(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f()
}

func linEvents(n int) []eventstore.NewEvent {
	out := make([]eventstore.NewEvent, n)
	for i := range out {
		out[i] = eventstore.NewEvent{ID: storetest.NewID(), Type: "lin.appended", SchemaVersion: 1, Data: []byte(`{}`)}
	}
	return out
}

// TestStreamHistoryIsLinearizable: 3 streams x 8 goroutines x 50
// operations plus the opening race, with 1 in 20 operations cancelled
// mid-flight and 1 in 20 losing its acknowledgement: porcupine finds a
// linearization of every stream's history.
func TestStreamHistoryIsLinearizable(t *testing.T) {
	store := linStore(t)
	rec, run := runStreamWorkload(t, store, streamWorkload{streams: 3, clients: 8, ops: 50, seed: 19})
	c := rec.Counts()
	t.Logf("%d operations, %d indeterminate; appends: %v", c.Operations, c.Indeterminate, run)
	// The schedule injects indeterminate operations; if none were
	// recorded, the run proves nothing about them.
	if run.lost == 0 || run.cancelled == 0 || c.Indeterminate < run.lost {
		t.Fatalf("no indeterminate operations recorded: %v", run)
	}
	// Nor if none of them had committed: the model's "it happened" branch
	// would go untested. (A lost acknowledgement of an Any append always
	// committed.)
	if run.committed == 0 {
		t.Fatalf("no indeterminate append committed: %v", run)
	}
	linearize.Require(t, linearize.StreamModel, rec.Operations(), time.Minute)
}

// noOCC is a broken store: it drops the expected-version check (every
// append goes in as Any).
type noOCC struct{ eventstore.Store }

func (s noOCC) Append(ctx context.Context, req eventstore.AppendRequest) (eventstore.AppendResult, error) {
	req.Expected = eventstore.Any
	return s.Store.Append(ctx, req)
}

// ackRolledBack is a broken store: it acknowledges an append whose
// expectation failed (and which therefore stored nothing), answering the
// version the appender hoped for.
type ackRolledBack struct{ eventstore.Store }

func (s ackRolledBack) Append(ctx context.Context, req eventstore.AppendRequest) (eventstore.AppendResult, error) {
	res, err := s.Store.Append(ctx, req)
	if errors.Is(err, eventstore.ErrVersionConflict) {
		v := max(int64(req.Expected), 0)
		return eventstore.AppendResult{FirstVersion: v + 1, LastVersion: v + int64(len(req.Events))}, nil
	}
	return res, err
}

// staleRead is a broken store: its reads miss a stream's newest event,
// as a read from a lagging replica or a cache not invalidated would.
type staleRead struct{ eventstore.Store }

func (s staleRead) ReadStream(ctx context.Context, tenant, stream string, after int64) ([]event.Record, error) {
	recs, err := s.Store.ReadStream(ctx, tenant, stream, after)
	if n := len(recs); n > 0 {
		recs = recs[:n-1]
	}
	return recs, err
}

// TestStreamCheckerBites: the same workload over deliberately broken
// stores must give histories porcupine calls illegal. It is certain,
// whatever the interleaving: every goroutine first appends with Exact(0)
// at once, and more than one of them is acknowledged (the first two
// stores); the closing read follows an acknowledged append it misses
// (the third).
func TestStreamCheckerBites(t *testing.T) {
	for _, tc := range []struct {
		name string
		wrap func(*Store) eventstore.Store
	}{
		{"no expected-version check", func(s *Store) eventstore.Store { return noOCC{s} }},
		{"acknowledges a rolled-back append", func(s *Store) eventstore.Store { return ackRolledBack{s} }},
		{"reads miss the newest event", func(s *Store) eventstore.Store { return staleRead{s} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A database of its own: the streams start empty.
			store := tc.wrap(linStore(t))
			rec, run := runStreamWorkload(t, store, streamWorkload{streams: 1, clients: 8, ops: 20, seed: 19})
			dir := os.Getenv(linearize.OutputDirEnv)
			if dir == "" {
				dir = t.TempDir()
			}
			v, err := linearize.Check(linearize.StreamModel, rec.Operations(), time.Minute, dir, t.Name(), false)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("appends: %v\n%v", run, v)
			if v.Result != porcupine.Illegal {
				t.Fatalf("a broken store's history was judged %s, want Illegal", v.Result)
			}
			if _, err := os.Stat(v.Visualization); err != nil || !strings.Contains(v.Explain, "append(") {
				t.Fatalf("no visualisation or explanation of the illegal history: %v", v)
			}
		})
	}
}
