package postgres

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/internal/linearize"
)

// multiStore is what the multi-stream workload drives.
type multiStore interface {
	eventstore.Store
	eventstore.MultiAppender
}

// runMultiWorkload records, for linearize.MultiStreamModel, a history of
// one tenant's streams under racing multi-stream appends, single appends
// and reads. It opens with a certain race: s1 is created, then every
// client appends to {s0, s1} expecting neither to exist (every one must
// conflict, and nothing be written) and reads both. Then each client runs
// ops random operations (a multi-stream append on 2 or 3 streams in a
// random order, a single append, a read), expecting the versions it last
// saw (or Any, 1 in 5); 1 in 20 appends is cancelled mid-flight and 1 in
// 20 loses its acknowledgement.
func runMultiWorkload(t *testing.T, store multiStore, streams, clients, ops int, seed uint64) (*linearize.StreamRecorder, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rec := &linearize.StreamRecorder{}
	name := func(i int) string { return fmt.Sprintf("s%d", i) }
	read := func(client int, stream string) int64 {
		c := rec.CallRead(client, "t-m", stream)
		recs, err := store.ReadStream(ctx, "t-m", stream, 0)
		rec.ReturnRead(c, recs, err)
		return int64(len(recs))
	}
	first := eventstore.AppendRequest{Tenant: "t-m", Stream: name(1), Expected: eventstore.NoStream, Events: linEvents(1)}
	c := rec.CallAppend(0, first)
	res, err := store.Append(ctx, first)
	rec.ReturnAppend(c, res, err)
	var multis atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for client := 0; client < clients; client++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(client)))
			known := map[string]int64{}
			<-start
			opening := eventstore.MultiAppendRequest{Tenant: "t-m", Streams: []eventstore.StreamAppend{
				{Stream: name(0), Expected: eventstore.NoStream, Events: linEvents(1)}, {Stream: name(1), Expected: eventstore.NoStream, Events: linEvents(1)}}}
			c := rec.CallMulti(client, opening)
			res, err := store.AppendMulti(ctx, opening)
			rec.ReturnMulti(c, res, err)
			known[name(0)], known[name(1)] = read(client, name(0)), read(client, name(1))
			for i := 0; i < ops; i++ {
				expect := func(stream string) eventstore.ExpectedVersion {
					if rng.IntN(5) == 0 {
						return eventstore.Any
					}
					return eventstore.Exact(known[stream])
				}
				actx, acancel := context.WithCancel(ctx)
				if rng.IntN(20) == 0 {
					actx = context.WithValue(actx, midFlightKey{}, acancel)
				}
				lose := rng.IntN(20) == 0
				switch r := rng.IntN(10); {
				case r < 4:
					pick := rng.Perm(streams)[:2+rng.IntN(2)]
					req := eventstore.MultiAppendRequest{Tenant: "t-m"}
					for _, s := range pick {
						req.Streams = append(req.Streams, eventstore.StreamAppend{Stream: name(s), Expected: expect(name(s)), Events: linEvents(1 + rng.IntN(2))})
					}
					c := rec.CallMulti(client, req)
					res, err := store.AppendMulti(actx, req)
					if lose {
						rec.ReturnMultiIndeterminate(c)
					} else {
						rec.ReturnMulti(c, res, err)
					}
					if err == nil {
						multis.Add(1)
						for j, p := range req.Streams {
							known[p.Stream] = res.Streams[j].LastVersion
						}
					}
				case r < 7:
					s := name(rng.IntN(streams))
					req := eventstore.AppendRequest{Tenant: "t-m", Stream: s, Expected: expect(s), Events: linEvents(1)}
					c := rec.CallAppend(client, req)
					res, err := store.Append(actx, req)
					if lose {
						rec.ReturnIndeterminate(c)
					} else {
						rec.ReturnAppend(c, res, err)
					}
					if err == nil {
						known[s] = res.LastVersion
					}
				default:
					s := name(rng.IntN(streams))
					known[s] = read(client, s)
				}
				acancel()
			}
			for s := 0; s < streams; s++ {
				read(client, name(s))
			}
		}()
	}
	close(start)
	wg.Wait()
	return rec, multis.Load()
}

// TestMultiStreamHistoryIsLinearizable: 3 streams x 8 clients x 40
// operations, multi-stream appends among single ones and reads, some
// cancelled mid-flight or with their acknowledgement lost: porcupine finds
// a linearization under linearize.MultiStreamModel.
func TestMultiStreamHistoryIsLinearizable(t *testing.T) {
	store := linStore(t)
	rec, multis := runMultiWorkload(t, store, 3, 8, 40, 23)
	c := rec.Counts()
	t.Logf("%d operations, %d indeterminate, %d multi-stream appends acknowledged", c.Operations, c.Indeterminate, multis)
	if multis == 0 || c.Indeterminate == 0 {
		t.Fatalf("the history has no acknowledged multi-stream append (%d) or no indeterminate operation (%d): it proves little", multis, c.Indeterminate)
	}
	linearize.Require(t, linearize.MultiStreamModel, rec.MultiOperations(), time.Minute)
}

// nonAtomicMulti is a broken store: it appends a multi-stream append's
// parts one after the other, each in a transaction of its own, so a part
// whose expectation fails leaves the parts before it written.
type nonAtomicMulti struct{ *Store }

func (s nonAtomicMulti) AppendMulti(ctx context.Context, req eventstore.MultiAppendRequest) (eventstore.MultiAppendResult, error) {
	var out eventstore.MultiAppendResult
	for _, p := range req.Streams {
		res, err := s.Store.Append(ctx, eventstore.AppendRequest{Tenant: req.Tenant, Stream: p.Stream, Expected: p.Expected, Events: p.Events})
		if err != nil {
			return eventstore.MultiAppendResult{}, err
		}
		out.Streams = append(out.Streams, res)
		out.Position = res.Position
	}
	return out, nil
}

// noOCCMulti is a broken store: its multi-stream appends drop every
// part's expectation.
type noOCCMulti struct{ *Store }

func (s noOCCMulti) AppendMulti(ctx context.Context, req eventstore.MultiAppendRequest) (eventstore.MultiAppendResult, error) {
	for i := range req.Streams {
		req.Streams[i].Expected = eventstore.Any
	}
	return s.Store.AppendMulti(ctx, req)
}

// TestMultiStreamCheckerBites: the workload's opening race over broken
// stores gives histories porcupine calls illegal, whatever the
// interleaving: with parts appended one by one, the first client to s0
// writes it and then conflicts on s1 (created before); without the
// expectations, every client's append is acknowledged.
func TestMultiStreamCheckerBites(t *testing.T) {
	for _, tc := range []struct {
		name string
		wrap func(*Store) multiStore
	}{
		{"parts appended one by one", func(s *Store) multiStore { return nonAtomicMulti{s} }},
		{"no expected-version check", func(s *Store) multiStore { return noOCCMulti{s} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, _ := runMultiWorkload(t, tc.wrap(linStore(t)), 2, 4, 0, 29)
			dir := os.Getenv(linearize.OutputDirEnv)
			if dir == "" {
				dir = t.TempDir()
			}
			v, err := linearize.Check(linearize.MultiStreamModel, rec.MultiOperations(), time.Minute, dir, t.Name(), false)
			if err != nil {
				t.Fatal(err)
			}
			if v.Result != porcupine.Illegal {
				t.Fatalf("a broken store's history was judged %s, want Illegal", v.Result)
			}
			if !strings.Contains(v.Explain, "append(") {
				t.Fatalf("no explanation of the illegal history: %v", v)
			}
		})
	}
}
