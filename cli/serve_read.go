package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/httpapi"

	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/readmodels"
	"github.com/strata-es/strata/readmodels/queryapi"
)

// readSide is what the query and projector roles of one serve process
// share: the progress the local runners report (so that a query waiting
// for a consistency token wakes on the commit) and the runners themselves
// (for the admin route's standby status).
type readSide struct {
	progress *projections.Progress
	mu       sync.Mutex
	runners  map[string]*projections.Runner
}

// readSides maps a serve process's app to its read side. serve may run
// more than once in one OS process (tests), hence a map, emptied when the
// workers stop.
var readSides sync.Map // *app -> *readSide

func readSideOf(a *app) *readSide {
	rs, loaded := readSides.LoadOrStore(a, &readSide{progress: projections.NewProgress(), runners: map[string]*projections.Runner{}})
	if !loaded {
		a.workers = append(a.workers, worker{name: "read-side cleanup", run: func(ctx context.Context) error {
			<-ctx.Done()
			readSides.Delete(a)
			return nil
		}})
	}
	return rs.(*readSide)
}

func (rs *readSide) local(name string) (projections.RunnerStatus, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r, ok := rs.runners[name]
	if !ok {
		return projections.RunnerStatus{}, false
	}
	return r.Status(), true
}

// wireQuery mounts the query API on the authenticated router. Queries read
// as the application role; a consistency token is waited for against the
// checkpoints table, woken at once by runners in this process.
func wireQuery(a *app) error {
	rs := readSideOf(a)
	monitor := projections.NewMonitor(projections.MonitorConfig{
		App:         a.appPool,
		Log:         a.log,
		Names:       projections.Names(a.mods.Projections()),
		Local:       rs.local,
		ExternalLog: a.external,
	})
	// A token beyond the last committed event was never handed out. In
	// PostgreSQL that is LastCommitted, not Head: Head stops below an
	// older open transaction, and a command that committed after it has
	// a genuine token beyond Head.
	head := a.log.Head
	if !a.external {
		head = a.store.LastCommitted
	}
	models := readmodels.NewDB(a.appPool)
	replicas, onRead, err := queryReplicas(a)
	if err != nil {
		return err
	}
	budget, err := a.env.duration("STRATA_QUERY_REPLICA_BUDGET", 500*time.Millisecond)
	if err != nil {
		return err
	}
	ahead := newAheadGuard(a)
	api := queryapi.New(models, projections.NewConsistency(a.appPool, rs.progress), monitor,
		queryapi.Config{Head: head, WaitSlot: a.waitSlot, Replicas: replicas, ReplicaBudget: budget, OnRead: onRead, Refuse: ahead.refuse,
			Placement: a.placement, Epoch: a.epoch})
	api.RegisterAdmin(a.queryAPI)
	api.Register(a.queryAPI, a.mods.Queries(models)...)
	return nil
}

// logEnd is the newest committed position of the event log: for
// PostgreSQL LogEnd (LastCommitted, as Head stops below an older open
// transaction, or the watermark a purge left), for EventStoreDB its head.
func (a *app) logEnd() func(ctx context.Context) (event.Position, error) {
	if a.external {
		return a.log.Head
	}
	return a.store.LogEnd
}

// aheadGuard refuses the query routes over projections whose checkpoint
// is beyond the end of the log (projections.StateAheadOfLog), as read from
// the checkpoints every few seconds.
type aheadGuard struct {
	ahead atomic.Pointer[map[string]string] // projection -> why
}

func newAheadGuard(a *app) *aheadGuard {
	g := &aheadGuard{}
	g.ahead.Store(&map[string]string{})
	end := a.logEnd()
	refresh := func(ctx context.Context) {
		cps, err := projections.ReadCheckpoints(ctx, a.appPool)
		if err != nil {
			return // keep the last answer through an outage
		}
		head, err := end(ctx)
		if err != nil {
			return
		}
		m := map[string]string{}
		for name, cp := range cps {
			// Found by a runner (and kept), or not yet: a query process
			// started on a restored database refuses from its first look.
			if cp.Status == projections.StateAheadOfLog || head.Less(cp.Position) {
				if cp.Partition != nil {
					name = cp.Partition.Projection // a partition's refuses its projection
				}
				m[name] = cp.LastError
			}
		}
		g.ahead.Store(&m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	refresh(ctx)
	cancel()
	a.workers = append(a.workers, worker{name: "ahead-of-log guard", run: func(ctx context.Context) error {
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
			refresh(ctx)
		}
	}})
	return g
}

func (g *aheadGuard) refuse(names []string) error {
	m := *g.ahead.Load()
	for _, n := range names {
		if _, ok := m[n]; ok {
			return &httpapi.Error{Status: http.StatusServiceUnavailable, Code: httpapi.CodeUnavailable, RetryAfter: 30 * time.Second,
				Message: "the read model of projection " + n + " is ahead of the event store (restored from a later point than the events) and is not served until an operator rebuilds it"}
		}
	}
	return nil
}

// wireProjector starts one runner per projection, the LISTEN connection
// that wakes them on appends of other processes, and the forwarding of
// this process's own appends.
func wireProjector(a *app) error {
	batch, err := a.env.integer("STRATA_PROJECTION_BATCH", 500)
	if err != nil {
		return err
	}
	poll, err := a.env.duration("STRATA_PROJECTION_POLL", time.Second)
	if err != nil {
		return err
	}
	policy, err := failurePolicy(a.env)
	if err != nil {
		return err
	}
	group, err := a.env.boolean("STRATA_PROJECTION_GROUP", true)
	if err != nil {
		return err
	}
	gather, err := a.env.duration("STRATA_PROJECTION_GATHER", 5*time.Millisecond)
	if err != nil {
		return err
	}
	partitions, err := projectionPartitions(a.env, a.mods.Projections())
	if err != nil {
		return err
	}
	rs := readSideOf(a)
	wake := a.projectionWake()
	var runners, grouped []*projections.Runner
	// Runners catching up together (a fresh install, a restart far behind)
	// read and decode each batch once between them.
	shared := projections.NewSharedReads(a.log, a.registry, 0)
	var share *projections.Share
	if len(partitions) > 0 && !a.external {
		// Partitions read the log through its partition log, which a
		// deployment adds once (`strata migrate partition-log`).
		has, err := db.HasPartitionLog(context.Background(), a.projPool)
		if err != nil {
			return err
		}
		if !has {
			return errors.New("STRATA_PROJECTION_PARTITIONS: this database's event log has no partition log: run `strata migrate partition-log` " +
				"(once; it rewrites the events table, so choose the moment)")
		}
	}
	if len(partitions) > 0 {
		share = projections.NewShare(a.projPool, a.logger)
		a.workers = append(a.workers, worker{name: "partition share", run: share.Run})
	}
	for _, p := range a.mods.Projections() {
		cfg := projections.RunnerConfig{
			LogEnd:       a.logEnd(),
			BatchSize:    batch,
			PollInterval: poll,
			Gather:       gather,
			Wake:         wake.C,
			Progress:     rs.progress,
			Shared:       shared,
			Registry:     a.registry,
			Logger:       a.logger,
			DeadLetters:  true, // decision 5: a poison event parks its stream (docs/replay.md)
			Failures:     policy,
			OnBatch: func(b projections.BatchInfo) {
				a.metrics.ProjectionBatches.WithLabelValues(p.Name()).Inc()
				a.metrics.ProjectionEvents.WithLabelValues(p.Name()).Add(float64(b.Events))
			},
		}
		// A partitioned projection runs a runner per partition, each alone
		// on a session of its own, reading its partition; the projector
		// processes share them.
		if n := partitions[p.Name()]; n > 0 {
			name := p.Name()
			a.metrics.PartitionsHeld(name, func() int { return share.Held(name) })
			cfg.Shared, cfg.Share = nil, share
			for i := range n {
				cfg.Partition = eventstore.Partition{Index: i, Count: n}
				r, err := projections.NewRunner(p, a.log, a.projPool, cfg)
				if err != nil {
					return err
				}
				runners = append(runners, r)
				rs.mu.Lock()
				rs.runners[r.Name()] = r
				rs.mu.Unlock()
				a.workers = append(a.workers, worker{name: "projection " + r.Name(), run: r.Run})
			}
			continue
		}
		r, err := projections.NewRunner(p, a.log, a.projPool, cfg)
		if err != nil {
			return err
		}
		runners = append(runners, r)
		rs.mu.Lock()
		rs.runners[p.Name()] = r
		rs.mu.Unlock()
		if !group {
			a.workers = append(a.workers, worker{name: "projection " + p.Name(), run: r.Run})
		} else {
			grouped = append(grouped, r)
		}
	}
	if len(grouped) > 0 {
		// One session, one read and one transaction per wake-up for every
		// projection (issue 35 §2); a projection in error, paused by a
		// tool or on standby runs alone until it can rejoin.
		g, err := projections.NewGroup(grouped)
		if err != nil {
			return err
		}
		a.workers = append(a.workers, worker{name: "projection group", run: g.Run})
	}
	// Ready once every runner has a session: active, standby, or active
	// and retrying a failing event (queries still answer, from the last
	// applied position; the admin route shows the error).
	a.readiness = append(a.readiness, readinessCheck{"projections", func(ctx context.Context) error {
		var waiting, ahead []string
		for _, r := range runners {
			switch s := r.Status().State; s {
			case projections.StateStarting, projections.StateStopped:
				waiting = append(waiting, r.Name()+" "+string(s))
			case projections.StateAheadOfLog:
				ahead = append(ahead, r.Name())
			}
		}
		var problems []string
		if len(waiting) > 0 {
			problems = append(problems, "projection runners not connected: "+strings.Join(waiting, ", "))
		}
		if len(ahead) > 0 {
			problems = append(problems, "checkpoints beyond the end of the event log (read models restored from a later point than the events): "+
				strings.Join(ahead, ", ")+"; rebuild them (`strata replay rebuild P`)")
		}
		if len(problems) > 0 {
			return errors.New(strings.Join(problems, "; "))
		}
		return nil
	}})
	return nil
}

// wireNotifier makes the command role announce its appends to projection
// runners in other processes: a NOTIFY after commit, coalesced.
func wireNotifier(a *app) error {
	a.workers = append(a.workers, worker{name: "append notifier", run: func(ctx context.Context) error {
		return projections.NotifyAppends(ctx, a.appPool, a.appended.C, a.logger)
	}})
	return nil
}

// duration reads a positive duration such as 1s or 250ms.
func (e env) duration(name string, def time.Duration) (time.Duration, error) {
	v := e.str(name, "")
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive duration such as 1s or 250ms", name, v)
	}
	return d, nil
}

// projectionPartitions reads STRATA_PROJECTION_PARTITIONS: a comma-separated
// list of projection=count (a power of two from 2 to 16), the projections
// split into partitions that projector processes share (issue 35 §5).
func projectionPartitions(e env, ps []projections.Projection) (map[string]int, error) {
	const name = "STRATA_PROJECTION_PARTITIONS"
	v := strings.TrimSpace(e.str(name, ""))
	out := map[string]int{}
	if v == "" {
		return out, nil
	}
	known := map[string]projections.Projection{}
	for _, p := range ps {
		known[p.Name()] = p
	}
	for _, item := range strings.Split(v, ",") {
		proj, count, ok := strings.Cut(strings.TrimSpace(item), "=")
		n, err := strconv.Atoi(count)
		p, isKnown := known[proj]
		switch {
		case !ok || err != nil:
			return nil, fmt.Errorf("%s=%q: want projection=count, such as order_details=2", name, v)
		case !isKnown:
			return nil, fmt.Errorf("%s: no projection %q (the projections: %s)", name, proj, strings.Join(projections.Names(ps), ", "))
		case out[proj] != 0:
			return nil, fmt.Errorf("%s: %s is listed twice", name, proj)
		}
		if err := (eventstore.Partition{Count: n}).Validate(); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", name, proj, err)
		}
		if _, ok := p.(projections.Partitionable); !ok {
			return nil, fmt.Errorf("%s: projection %s cannot be split into partitions: it does not declare itself Partitionable", name, proj)
		}
		out[proj] = n
	}
	return out, nil
}
