package replay

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/projections"
)

// RebuildOptions says what to rebuild.
type RebuildOptions struct {
	// Projections names the projections (all when empty).
	Projections []string
	// Tenant, when set, rebuilds only that tenant's rows: the shadow holds
	// the tenant's rows only and is swapped in by replacing the tenant's
	// live rows in one transaction, at the live checkpoint.
	Tenant string
	// From, when set, re-derives only the streams that have an event after
	// it, each from its first event, in place (see RebuildFrom). Only for
	// projections whose rows each belong to one stream
	// (projections.StreamScoped); refused for the others.
	From *event.Position
	// Actor is recorded on dead letters a swap supersedes.
	Actor string
	// Progress, when set, receives progress reports (at most every
	// ProgressEvery, default 250ms, and at every phase change).
	Progress      func(Progress)
	ProgressEvery time.Duration

	// compare, set by VerifyDeep, makes the rebuild a comparison: the
	// shadow is built up to the live checkpoint, compared with the live
	// rows while the live runner is paused, and dropped; nothing is
	// swapped.
	compare *DeepVerdict
}

// Phase is a step of a rebuild.
type Phase string

// Rebuild phases, in order.
const (
	PhaseBuild   Phase = "build"   // shadow tables catching up from their checkpoint to the head
	PhaseIndexes Phase = "indexes" // building the shadow's deferred indexes
	PhaseSwap    Phase = "swap"    // live runner paused: last catch-up and the swap
	PhaseStreams Phase = "streams" // --from: re-deriving streams in place
	PhaseDone    Phase = "done"
)

// Progress is a rebuild's progress. While building, Done and Total count
// events of the log: the slowest projection's events read, of the events
// that were after its shadow checkpoint when it started.
type Progress struct {
	Phase      Phase
	Projection string // the projection a swap or index phase is about
	Done       int64
	Total      int64
	Elapsed    time.Duration
	Rate       float64       // events per second so far
	ETA        time.Duration // 0 when unknown
}

// Rebuilt is what a rebuild did to one projection.
type Rebuilt struct {
	Name  string
	Scope string // all, tenant or from
	// Checkpoint is where the rebuilt rows are (the live checkpoint after
	// the swap).
	Checkpoint event.Position
	// Events counts the log events the rebuild read; Streams (with From)
	// the streams it re-derived.
	Events  int64
	Streams int64
	// Folded counts the events of Events folded in memory and written
	// once by COPY (projections.Folder), FoldedRows the rows written so.
	Folded, FoldedRows int64
	// FoldTook is the fold's time, FoldWrite the part of it spent writing
	// (COPY, ledger, commit).
	FoldTook, FoldWrite time.Duration
	// Resumed reports that an interrupted rebuild was continued.
	Resumed bool
	// ParkedStreams counts the streams the rebuilt rows have parked.
	ParkedStreams int64
	Elapsed       time.Duration
	// Notes are warnings for the operator (tables left to drop, indexes
	// of the live table the shadow did not have).
	Notes []string
}

// Result is what a rebuild did.
type Result struct {
	Projections []Rebuilt
	// Events is the most events any projection read; Elapsed the wall time.
	Events  int64
	Elapsed time.Duration
}

// Rate is events per second over the whole rebuild.
func (r Result) Rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Events) / r.Elapsed.Seconds()
}

// scope returns the scope name of options.
func (o RebuildOptions) scope() string {
	switch {
	case o.From != nil:
		return "from"
	case o.Tenant != "":
		return "tenant"
	}
	return "all"
}

func tenantHash(tenant string) string {
	h := sha256.Sum256([]byte("strata-tenant\x00" + tenant))
	return hex.EncodeToString(h[:])
}

// check resolves and validates the options.
func (s *Service) check(o RebuildOptions) ([]projections.Projection, error) {
	ps, err := s.resolve(o.Projections)
	if err != nil {
		return nil, err
	}
	if o.Tenant != "" {
		if err := checkTenant(o.Tenant); err != nil {
			return nil, err
		}
		if o.From == nil {
			for _, p := range ps {
				if key := slotKey(p.Name(), o.Tenant); len(key) > 63 {
					return nil, fmt.Errorf("%w: projection name %s is too long for a tenant's rebuild (its slot %s passes 63 bytes)", ErrInvalid, p.Name(), key)
				}
			}
		}
	}
	var refused []string
	for _, p := range ps {
		if o.From != nil {
			if _, ok := p.(projections.StreamScoped); !ok {
				refused = append(refused, p.Name())
			}
			continue
		}
		if _, ok := p.(projections.Retargetable); !ok {
			return nil, fmt.Errorf("%w: projection %s cannot write into other tables (projections.Retargetable), so it cannot be rebuilt without downtime", ErrInvalid, p.Name())
		}
	}
	if len(refused) > 0 {
		return nil, fmt.Errorf("%w: --from is refused for %s: their rows add up events of several streams, so re-deriving only the streams touched since the token would count the others twice or not at all; rebuild them whole or per tenant instead",
			ErrInvalid, strings.Join(refused, ", "))
	}
	return ps, nil
}

// Rebuild rebuilds projections without taking the read side down
// (ARCHITECTURE decision 6). For each projection, concurrently:
//
//  1. shadow tables <table>__rebuild are created as copies of the live
//     tables' shape (or found, when an interrupted rebuild with the same
//     scope is resumed), with a checkpoint row <name>__rebuild;
//  2. a runner applies the log into them from that checkpoint, under the
//     shadow's lease, while the live runner and the query API go on with
//     the live tables; poison events are parked as usual, into the
//     rebuild's own generation of dead letters;
//  3. near the head, the deferred indexes are built and the shadow
//     catches up again;
//  4. the live runner (in any process) is asked to yield its lease; the
//     shadow catches up to the head and, in one transaction, the tables
//     are swapped by renaming and the live checkpoint (position,
//     generation, counters) takes the shadow's. With a tenant, the live
//     projection is first brought to the same position and the tenant's
//     rows are replaced in one transaction instead;
//  5. the lease is released (the runner resumes from the new checkpoint)
//     and the replaced tables are dropped.
//
// Queries keep reading the old tables until the swap commits; a query
// arriving during the swap waits for it (milliseconds) and then reads the
// new tables. An interrupted rebuild keeps its shadow tables and
// checkpoint; running it again resumes. With From, see RebuildFrom.
func (s *Service) Rebuild(ctx context.Context, o RebuildOptions) (Result, error) {
	ps, err := s.check(o)
	if err != nil {
		return Result{}, err
	}
	if o.Actor == "" {
		o.Actor = "replay"
	}
	if o.From != nil {
		// A full rebuild of a partitioned projection replaces its partitions
		// (swapAll), one tenant's brings them all to the swap's position
		// (swapTenant); --from would re-derive streams in place under each
		// partition's lease, which is not built.
		parts, err := s.partitions(ctx)
		if err != nil {
			return Result{}, err
		}
		for _, p := range ps {
			if len(parts.keys[p.Name()]) > 0 {
				return Result{}, fmt.Errorf("%w: %s runs in partitions: rebuild it whole or one tenant's (no --from)", ErrInvalid, p.Name())
			}
		}
	}
	if o.From != nil {
		return s.rebuildFrom(ctx, ps, o) // in place: no DDL
	}
	if err := s.CheckOwner(ctx); err != nil {
		return Result{}, err
	}
	began := time.Now()
	tr := newTracker(o.Progress, o.ProgressEvery)
	// Runners building from the same position read and decode each batch
	// once; 8 batches of 5,000 events bound the memory to about 40 MB.
	shared := projections.NewSharedReads(s.cfg.Log, s.cfg.Registry, 8)
	lags := newLagCounts(s.cfg.Log)
	out := make([]Rebuilt, len(ps))
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], errs[i] = s.rebuildOne(ctx, p, o, shared, lags, tr)
			if errs[i] != nil {
				tr.drop(p.Name())
				errs[i] = fmt.Errorf("rebuild %s: %w", p.Name(), errs[i])
			}
		}()
	}
	wg.Wait()
	res := Result{Elapsed: time.Since(began)}
	for i, r := range out {
		if errs[i] == nil {
			res.Projections = append(res.Projections, r)
			res.Events = max(res.Events, r.Events)
		}
	}
	tr.finish()
	if err := errors.Join(errs...); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (interrupted: the shadow tables and their checkpoints are kept; run the same command again to resume)", err)
		}
		return res, err
	}
	return res, nil
}

// rebuildOne runs the steps of Rebuild for one projection.
func (s *Service) rebuildOne(ctx context.Context, p projections.Projection, o RebuildOptions, shared *projections.SharedReads, lags *lagCounts, tr *tracker) (Rebuilt, error) {
	began := time.Now()
	name, key := p.Name(), slotKey(p.Name(), o.Tenant)
	res := Rebuilt{Name: name, Scope: o.scope()}
	_, folder := p.(projections.Folder)
	fold := folder && o.Tenant == "" && o.compare == nil && s.cfg.FoldRows >= 0
	meta, resumed, err := s.prepareShadow(ctx, p, o.Tenant, fold)
	if err != nil {
		return res, err
	}
	res.Resumed = resumed
	shadowX, err := s.exclusive(ctx, key)
	if err != nil {
		if errors.Is(err, ErrBusy) {
			return res, fmt.Errorf("%w: %s", ErrBusy, runningMessage(name, o.Tenant))
		}
		return res, err
	}
	defer shadowX.Release()

	cfg := s.cfg.Runner
	cfg.Checkpoint, cfg.DeadLetters, cfg.AsyncCommit = key, true, true
	cfg.Shared, cfg.Wake, cfg.Progress = shared, nil, nil
	cfg.Logger = s.cfg.Logger
	if o.Tenant != "" {
		// The tenant's events alone, read through the log's index by
		// tenant where it has one (a shared read of the whole log would
		// defeat it).
		tenant := o.Tenant
		cfg.Filter = func(rec event.Record) bool { return rec.Tenant == tenant }
		cfg.Tenant, cfg.Shared = tenant, nil
	}
	cfg.OnBatch = func(b projections.BatchInfo) {
		res.Events += int64(b.Events)
		tr.advance(name, int64(b.Events))
	}
	runner, err := projections.NewRunner(p.(projections.Retargetable).WithTables(meta.Tables), s.cfg.Log, s.cfg.Pool, cfg)
	if err != nil {
		return res, err
	}
	cps, err := s.checkpoints(ctx, key)
	if err != nil {
		return res, err
	}
	// The work ahead: the log after the shadow's checkpoint, or the
	// tenant's events alone when the runner reads those alone.
	var total int64
	if _, ok := s.cfg.Log.(eventstore.TenantLog); ok && o.Tenant != "" {
		total, err = s.tenantEvents(ctx, o.Tenant, cps[key].Position)
	} else {
		total, err = lags.count(ctx, cps[key].Position)
	}
	if err != nil {
		return res, err
	}
	tr.start(name, total)

	if o.compare != nil {
		return res, s.compareShadow(ctx, p, runner, shadowX, meta, o.Tenant, o.compare)
	}

	// Fold, when the projection folds and the shadow is fresh: its rows
	// up to the head (or the memory bound) written once.
	if meta.Fold {
		folded, err := runner.FoldOn(ctx, shadowX, event.Position{}, s.foldRows()) // up to the head
		if err != nil {
			return res, err
		}
		res.Folded, res.FoldedRows, res.FoldTook, res.FoldWrite = folded.Events, folded.Rows, folded.Took, folded.Write
		if folded.NotFolded != "" && !resumed {
			res.Notes = append(res.Notes, "not folded in memory: "+folded.NotFolded)
		}
	}
	// Build, until the shadow is within a batch of the head.
	for {
		if err := runner.CatchUpOn(ctx, shadowX, event.Position{}); err != nil {
			return res, err
		}
		cps, err := s.checkpoints(ctx, key)
		if err != nil {
			return res, err
		}
		lag, _, err := s.cfg.Log.Lag(ctx, cps[key].Position)
		if err != nil {
			return res, err
		}
		if lag <= int64(cfg.BatchSize) {
			break
		}
	}
	if len(meta.DeferredIndexes) > 0 {
		tr.phase(PhaseIndexes, name)
		if err := s.buildIndexes(ctx, key, meta); err != nil {
			return res, err
		}
		if err := runner.CatchUpOn(ctx, shadowX, event.Position{}); err != nil {
			return res, err
		}
	}
	if err := s.analyze(ctx, meta); err != nil {
		return res, err
	}
	if err := s.checkSecurity(ctx, meta); err != nil {
		return res, err
	}

	// Swap, with the live runner paused.
	tr.phase(PhaseSwap, name)
	// The live lease is held on an owner session: the swap renames tables
	// and must run on the session that holds the lease, so that it cannot
	// go on after losing it.
	liveX, err := s.exclusiveOn(ctx, s.cfg.Owner, name)
	if err != nil {
		return res, err
	}
	defer liveX.Release()
	// A partitioned projection's runners hold its partitions' leases: each
	// is paused until the swap. A whole rebuild replaces the partitions by
	// the rebuilt row (they split off it again when they resume); one
	// tenant's brings each to the swap's position and gives each its share
	// of the tenant's letters and ledger.
	parts, err := s.partitions(ctx)
	if err != nil {
		return res, err
	}
	partCps, err := s.checkpoints(ctx, parts.keys[name]...)
	if err != nil {
		return res, err
	}
	var live []livePartition
	for _, k := range parts.keys[name] {
		cp := partCps[k]
		if cp.Status == projections.StateSplit || cp.Partition == nil {
			continue
		}
		x, err := s.exclusive(ctx, k)
		if err != nil {
			return res, err
		}
		defer x.Release()
		live = append(live, livePartition{key: k, x: x, part: eventstore.Partition{Index: cp.Partition.Index, Count: cp.Partition.Count}})
	}
	head, err := s.cfg.Log.Head(ctx)
	if err != nil {
		return res, err
	}
	if o.Tenant == "" {
		if err := runner.CatchUpOn(ctx, shadowX, head); err != nil {
			return res, err
		}
		swapped, err := s.swapAll(ctx, liveX, p, key, meta, o.Actor)
		if err != nil {
			return res, err
		}
		res.Checkpoint, res.ParkedStreams, res.Notes = swapped.pos, swapped.parkedStreams, swapped.notes
		liveX.Release()
		if err := s.dropTables(ctx, replacedNames(meta)...); err != nil {
			res.Notes = append(res.Notes, fmt.Sprintf("the replaced tables could not be dropped (%v): the next rebuild drops them", err))
		}
		if swapped.oldLetters > 0 {
			if err := s.supersede(ctx, name, swapped.oldGeneration, o.Actor); err != nil {
				res.Notes = append(res.Notes, fmt.Sprintf("the replaced rows' dead letters were not all marked superseded (%v); they are hidden anyway", err))
			}
		}
		for k, g := range swapped.oldPartitions {
			if err := s.supersede(ctx, k, g, o.Actor); err != nil {
				res.Notes = append(res.Notes, fmt.Sprintf("the replaced partition %s's dead letters were not all marked superseded (%v); they are hidden anyway", k, err))
			}
		}
	} else {
		liveCfg := s.cfg.Runner
		liveCfg.Checkpoint, liveCfg.DeadLetters, liveCfg.Logger = "", true, s.cfg.Logger
		liveCfg.Shared, liveCfg.Wake, liveCfg.Progress, liveCfg.Filter, liveCfg.OnBatch = nil, nil, nil, nil, nil
		if len(live) == 0 {
			liveRunner, err := projections.NewRunner(p, s.cfg.Log, s.cfg.Pool, liveCfg)
			if err != nil {
				return res, err
			}
			if err := liveRunner.CatchUpOn(ctx, liveX, head); err != nil {
				return res, fmt.Errorf("bring the live projection to %s: %w", head, err)
			}
		}
		for _, lp := range live {
			cfg := liveCfg
			cfg.Partition = lp.part
			liveRunner, err := projections.NewRunner(p, s.cfg.Log, s.cfg.Pool, cfg)
			if err != nil {
				return res, err
			}
			if err := liveRunner.CatchUpOn(ctx, lp.x, head); err != nil {
				return res, fmt.Errorf("bring the live partition %s to %s: %w", lp.key, head, err)
			}
		}
		if err := runner.CatchUpOn(ctx, shadowX, head); err != nil {
			return res, err
		}
		swapped, err := s.swapTenant(ctx, liveX, p, key, meta, o.Tenant, o.Actor, live)
		if err != nil {
			return res, err
		}
		res.Checkpoint, res.ParkedStreams = swapped.pos, swapped.parkedStreams
		liveX.Release()
		shadowX.Release()
		if err := s.dropTables(ctx, shadowNames(meta)...); err != nil {
			res.Notes = append(res.Notes, fmt.Sprintf("the shadow tables could not be dropped (%v): the next rebuild drops them", err))
		}
	}
	res.Elapsed = time.Since(began)
	tr.done(name)
	return res, nil
}

// lagCounts counts the log after a position once for all the projections
// of a rebuild that start there (usually every one, at the first event):
// counting a log of 300,000 events took about a second, and each
// projection counting it at once took that much longer.
type lagCounts struct {
	log Log
	mu  sync.Mutex
	at  map[event.Position]*lagCount
}

func newLagCounts(log Log) *lagCounts {
	return &lagCounts{log: log, at: map[event.Position]*lagCount{}}
}

type lagCount struct {
	once sync.Once
	n    int64
	err  error
}

func (c *lagCounts) count(ctx context.Context, after event.Position) (int64, error) {
	c.mu.Lock()
	lc := c.at[after]
	if lc == nil {
		lc = &lagCount{}
		c.at[after] = lc
	}
	c.mu.Unlock()
	lc.once.Do(func() { lc.n, _, lc.err = c.log.Lag(ctx, after) })
	return lc.n, lc.err
}

func replacedNames(m *rebuildMeta) []string {
	var out []string
	for live := range m.Tables {
		out = append(out, live+replacedSuffix)
	}
	return out
}

func shadowNames(m *rebuildMeta) []string {
	var out []string
	for _, shadow := range m.Tables {
		out = append(out, shadow)
	}
	return out
}

// runningMessage says that a rebuild of name in the slot of tenant ("":
// every tenant) is running already, naming no tenant.
func runningMessage(name, tenant string) string {
	if tenant == "" {
		return fmt.Sprintf("a rebuild of %s of every tenant is running already", name)
	}
	return fmt.Sprintf("a rebuild of %s of this tenant is running already", name)
}

// allScopeMessage is why a tenant's rebuild waits for the operator's:
// both would be correct, but the full rebuild's swap would replace the
// tenant's rows again, so the tenant's work would be wasted.
func allScopeMessage(name string) string {
	return fmt.Sprintf("a rebuild of %s of every tenant is in progress or interrupted (started by an operator): it rebuilds this tenant's rows too; retry when it is done", name)
}

// prepareShadow finds the shadow of an interrupted rebuild in the slot of
// the scope (every tenant, or this tenant), or creates the shadow tables
// and their checkpoint row in one transaction (dropping what earlier
// attempts left behind). A tenant's rebuild is refused while a rebuild of
// every tenant exists; other tenants' slots are never looked at.
func (s *Service) prepareShadow(ctx context.Context, p projections.Projection, tenant string, fold bool) (*rebuildMeta, bool, error) {
	name, key, suffix := p.Name(), slotKey(p.Name(), tenant), slotSuffix(tenant)
	cps, err := s.checkpoints(ctx, key, p.Name()+rebuildSuffix)
	if err != nil {
		return nil, false, err
	}
	scope, hash := "all", ""
	if tenant != "" {
		scope, hash = "tenant", tenantHash(tenant)
		// A tenant rebuild interrupted before slots were per tenant sits
		// in the shared slot with scope "tenant": it blocks only the
		// operator (who may --abort it), not tenants.
		if cp, ok := cps[p.Name()+rebuildSuffix]; ok {
			if m, err := parseMeta(cp.Rebuild); err != nil || (m != nil && m.Scope == "all") {
				return nil, false, fmt.Errorf("%w: %s", ErrInvalid, allScopeMessage(name))
			}
		}
	}
	if cp, ok := cps[key]; ok {
		m, err := parseMeta(cp.Rebuild)
		if err != nil {
			return nil, false, err
		}
		if m == nil || m.Of != name {
			return nil, false, fmt.Errorf("%w: checkpoint row %s exists but is no rebuild of %s: remove it by hand", ErrInvalid, key, name)
		}
		if m.Scope != scope || m.TenantSHA256 != hash {
			if tenant != "" {
				// Two tenants whose hashes share the slot's prefix: said
				// without naming or hinting at the other tenant.
				return nil, false, fmt.Errorf("%w: the rebuild slot of %s is taken: retry later, or ask an operator", ErrInvalid, name)
			}
			return nil, false, fmt.Errorf("%w: an interrupted rebuild of %s of one tenant exists in the shared slot (from an older strata): finish it with its own flags, or drop it with `strata replay rebuild --projection %s --abort`",
				ErrInvalid, name, name)
		}
		for _, shadow := range m.Tables {
			var exists bool
			if err := s.cfg.Pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, ident(shadow)).Scan(&exists); err != nil {
				return nil, false, err
			}
			if !exists {
				return nil, false, fmt.Errorf("%w: shadow table %s of the interrupted rebuild of %s is gone: drop the rebuild with `strata replay rebuild --projection %s --abort` and start again",
					ErrInvalid, shadow, name, name)
			}
		}
		return m, true, nil
	}
	m := &rebuildMeta{Of: name, Scope: scope, TenantSHA256: hash, Tables: map[string]string{}, StartedAt: time.Now().UTC(), Fold: fold}
	err = s.ownerTx(ctx, s.cfg.Owner, func(tx pgx.Tx) error {
		for _, t := range p.Tables() {
			shadow := t + suffix
			if err := checkNameLen(shadow); err != nil {
				return err
			}
			drop := ident(shadow)
			if tenant == "" { // the replaced tables belong to full swaps
				drop += ", " + ident(t+replacedSuffix)
			}
			if _, err := tx.Exec(ctx, `DROP TABLE IF EXISTS `+drop); err != nil {
				return err
			}
			deferred, err := cloneTable(ctx, tx, t, shadow, suffix, true, fold)
			if err != nil {
				return err
			}
			if tenant == "" {
				m.DeferredIndexes = append(m.DeferredIndexes, deferred...)
			} // a tenant's shadow is only copied from: no index needed
			m.Tables[t] = shadow
		}
		raw, err := json.Marshal(m)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO projection_checkpoints (projection, rebuild) VALUES ($1, $2)`, key, raw)
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("create shadow tables of %s: %w", name, err)
	}
	return m, false, nil
}

// buildIndexes creates the shadow's deferred indexes, one transaction per
// index, each removing itself from the rebuild's state (so a resumed
// rebuild builds only the missing ones).
func (s *Service) buildIndexes(ctx context.Context, key string, m *rebuildMeta) error {
	for len(m.DeferredIndexes) > 0 {
		stmt := m.DeferredIndexes[0]
		rest := m.DeferredIndexes[1:]
		next := *m
		next.DeferredIndexes = rest
		raw, err := json.Marshal(next)
		if err != nil {
			return err
		}
		err = s.ownerTx(ctx, s.cfg.Owner, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL maintenance_work_mem = '256MB'`); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, stmt); err != nil && db.SQLState(err) != "42P07" { // built before an interruption
				return fmt.Errorf("%s: %w", stmt, err)
			}
			_, err := tx.Exec(ctx, `UPDATE projection_checkpoints SET rebuild = $2 WHERE projection = $1`, key, raw)
			return err
		})
		if err != nil {
			return fmt.Errorf("build index: %w", err)
		}
		m.DeferredIndexes = rest
	}
	return nil
}

// analyze gathers statistics on the shadow tables, so that queries plan
// well against them from the first moment after the swap.
func (s *Service) analyze(ctx context.Context, m *rebuildMeta) error {
	for _, shadow := range m.Tables {
		if err := s.ownerTx(ctx, s.cfg.Owner, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `ANALYZE `+ident(shadow))
			return err
		}); err != nil {
			return fmt.Errorf("analyze %s: %w", shadow, err)
		}
	}
	return nil
}

// swapped is what a swap transaction changed.
type swapped struct {
	pos           event.Position
	parkedStreams int64
	oldGeneration string
	oldLetters    int64
	notes         []string
	// oldPartitions are the rows of the projection's partitions the swap
	// removed: key -> generation, of those with parked letters.
	oldPartitions map[string]string
}

// swapAll swaps the shadow tables in and the live checkpoint over to the
// shadow's, in one transaction as the owner on the live lease's session.
// A lock timeout (queries holding the tables) retries the transaction.
func (s *Service) swapAll(ctx context.Context, liveX *projections.Exclusive, p projections.Projection, key string, m *rebuildMeta, actor string) (swapped, error) {
	var out swapped
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		out = swapped{}
		err = s.ownerTx(ctx, liveX.Conn(), func(tx pgx.Tx) error {
			// A projection that never ran has no row yet.
			if _, err := tx.Exec(ctx, `INSERT INTO projection_checkpoints (projection) VALUES ($1) ON CONFLICT (projection) DO NOTHING`, p.Name()); err != nil {
				return err
			}
			err := tx.QueryRow(ctx, `SELECT generation::text, parked_letters FROM projection_checkpoints WHERE projection = $1 FOR UPDATE`, p.Name()).
				Scan(&out.oldGeneration, &out.oldLetters)
			if err != nil {
				return fmt.Errorf("read the live checkpoint: %w", err)
			}
			lost, err := swapTables(ctx, tx, m.Tables, p.Tables())
			if err != nil {
				return err
			}
			for _, l := range lost {
				out.notes = append(out.notes, fmt.Sprintf("index %s of the live table had no counterpart in the shadow (added after the rebuild began?) and is gone: create it again", l))
			}
			var major, minor string
			err = tx.QueryRow(ctx, `UPDATE projection_checkpoints l SET pos_major = r.pos_major, pos_minor = r.pos_minor, generation = r.generation,
    parked_streams = r.parked_streams, parked_letters = r.parked_letters, status = 'running', last_error = NULL, error_at = NULL, updated_at = now()
FROM projection_checkpoints r WHERE l.projection = $1 AND r.projection = $2
RETURNING r.pos_major::text, r.pos_minor::text, r.parked_streams`, p.Name(), key).Scan(&major, &minor, &out.parkedStreams)
			if err != nil {
				return fmt.Errorf("move the live checkpoint: %w", err)
			}
			if out.pos, err = event.ParseColumns(major, minor); err != nil {
				return err
			}
			if _, err = tx.Exec(ctx, `DELETE FROM projection_checkpoints WHERE projection = $1`, key); err != nil {
				return err
			}
			// The partitions (of every layout) go: the rebuilt row replaces
			// them, and the runners of the partitions split off it again.
			rows, err := tx.Query(ctx, `DELETE FROM projection_checkpoints WHERE partition->>'projection' = $1
RETURNING projection, generation::text, parked_letters`, p.Name())
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var k, g string
				var letters int64
				if err := rows.Scan(&k, &g, &letters); err != nil {
					return err
				}
				if letters > 0 {
					if out.oldPartitions == nil {
						out.oldPartitions = map[string]string{}
					}
					out.oldPartitions[k] = g
				}
			}
			return rows.Err()
		})
		if err == nil || !retrySwap(err) || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Duration(50+attempt*10) * time.Millisecond)
	}
	if err != nil {
		return out, fmt.Errorf("swap %s (nothing was swapped; run the same command again to retry): %w", p.Name(), err)
	}
	return out, nil
}

func retrySwap(err error) bool {
	switch db.SQLState(err) {
	case "55P03", "40P01", "40001":
		return true
	}
	return false
}

// supersedeTenantLettersSQL moves a tenant's letters of the rows a
// tenant's rebuild replaces ($1 tenant, $2 projection column, $3 its
// generation) to a generation of their own ($4), the parked ones
// superseded by $5: the rebuild applied them anew.
const supersedeTenantLettersSQL = `UPDATE dead_letters SET generation = $4::uuid,
    status = CASE WHEN status = 'parked' THEN 'superseded' ELSE status END,
    resolved_at = coalesce(resolved_at, now()),
    resolved_by = CASE WHEN status = 'parked' THEN $5 ELSE resolved_by END,
    reason = CASE WHEN status = 'parked' THEN 'replaced by a rebuild of the tenant' ELSE reason END
WHERE tenant_id = $1 AND projection = $2 AND generation = $3::uuid`

// dropShadowRow deletes the rebuild's checkpoint row at the end of a
// tenant's swap: the projector may not delete checkpoint rows; the owner
// may.
func (s *Service) dropShadowRow(ctx context.Context, tx pgx.Tx, key string) error {
	if _, err := tx.Exec(ctx, `SET LOCAL ROLE strata_owner`); err != nil {
		s.cfg.Logger.Warn("cannot switch to the owner role", "error", err.Error())
		return fmt.Errorf("%w: %w", ErrInvalid, ErrNoOwner)
	}
	_, err := tx.Exec(ctx, `DELETE FROM projection_checkpoints WHERE projection = $1`, key)
	return err
}

// swapTenant replaces one tenant's live rows by the shadow's, moves the
// shadow's dead letters and parked streams into the live generation
// (superseding the tenant's old ones) and drops the shadow's checkpoint
// row, in one transaction on the live lease's session (an owner session),
// where the live projection and the shadow stand at the same position.
func (s *Service) swapTenant(ctx context.Context, liveX *projections.Exclusive, p projections.Projection, key string, m *rebuildMeta, tenant, actor string, parts []livePartition) (swapped, error) {
	var out swapped
	err := pgx.BeginFunc(ctx, liveX.Conn(), func(tx pgx.Tx) error {
		// The rows are the projector's to write, under row-level security;
		// the session is the owner connection's, whatever role it runs as.
		if _, err := tx.Exec(ctx, `SET LOCAL ROLE `+db.RoleProjector); err != nil {
			return fmt.Errorf("%w: the owner connection's login must be a member of %s as well (`strata migrate up` grants it): %v", ErrInvalid, db.RoleProjector, err)
		}
		if err := db.SetTenant(ctx, tx, tenant); err != nil {
			return err
		}
		for _, live := range p.Tables() {
			rows, err := tx.Query(ctx, `SELECT quote_ident(attname) FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0
AND NOT attisdropped AND attgenerated = '' ORDER BY attnum`, ident(live))
			if err != nil {
				return err
			}
			cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return err
			}
			list := strings.Join(cols, ", ")
			if _, err := tx.Exec(ctx, `DELETE FROM `+ident(live)+` WHERE tenant_id = $1`, tenant); err != nil {
				return fmt.Errorf("delete the tenant's rows of %s: %w", live, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+ident(live)+` (`+list+`) SELECT `+list+` FROM `+ident(m.Tables[live])+` WHERE tenant_id = $1`, tenant); err != nil {
				return fmt.Errorf("copy the tenant's rows into %s: %w", live, err)
			}
		}
		if len(parts) > 0 {
			if err := swapTenantPartitions(ctx, tx, p, key, tenant, actor, parts, &out); err != nil {
				return err
			}
			return s.dropShadowRow(ctx, tx, key)
		}
		var liveGen, shadowGen string
		var shadowStreams, shadowLetters int64
		var major, minor string
		if err := tx.QueryRow(ctx, `SELECT l.generation::text, r.generation::text, r.parked_streams, r.parked_letters, l.pos_major::text, l.pos_minor::text
FROM projection_checkpoints l, projection_checkpoints r WHERE l.projection = $1 AND r.projection = $2 FOR UPDATE`, p.Name(), key).
			Scan(&liveGen, &shadowGen, &shadowStreams, &shadowLetters, &major, &minor); err != nil {
			return fmt.Errorf("read checkpoints: %w", err)
		}
		var oldLetters int64
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM dead_letters WHERE tenant_id = $1 AND projection = $2 AND generation = $3::uuid AND status = 'parked'`,
			tenant, p.Name(), liveGen).Scan(&oldLetters); err != nil {
			return err
		}
		// The tenant's letters of the replaced rows move to a generation of
		// their own (the shadow's letters may be about the same events);
		// the parked ones are superseded: the rebuild applied them anew.
		if _, err := tx.Exec(ctx, supersedeTenantLettersSQL, tenant, p.Name(), liveGen, uuid.NewString(), actor); err != nil {
			return fmt.Errorf("supersede dead letters: %w", err)
		}
		ct, err := tx.Exec(ctx, `DELETE FROM parked_streams WHERE tenant_id = $1 AND projection = $2 AND generation = $3::uuid`, tenant, p.Name(), liveGen)
		if err != nil {
			return err
		}
		oldStreams := ct.RowsAffected()
		for _, t := range []string{"dead_letters", "parked_streams"} {
			if _, err := tx.Exec(ctx, `UPDATE `+t+` SET generation = $3::uuid WHERE tenant_id = $1 AND projection = $2 AND generation = $4::uuid`,
				tenant, p.Name(), liveGen, shadowGen); err != nil {
				return fmt.Errorf("move the rebuild's %s: %w", t, err)
			}
		}
		// The tenant's completeness ledger is the rebuild's from now on.
		for _, t := range []string{"projection_ledger_marks", "projection_ledger"} {
			if _, err := tx.Exec(ctx, `DELETE FROM `+t+` WHERE tenant_id = $1 AND generation = $2::uuid`, tenant, liveGen); err != nil {
				return fmt.Errorf("drop the replaced %s: %w", t, err)
			}
			if _, err := tx.Exec(ctx, `UPDATE `+t+` SET generation = $2::uuid WHERE tenant_id = $1 AND generation = $3::uuid`,
				tenant, liveGen, shadowGen); err != nil {
				return fmt.Errorf("move the rebuild's %s: %w", t, err)
			}
		}
		if err := tx.QueryRow(ctx, `UPDATE projection_checkpoints SET parked_streams = parked_streams - $2 + $3, parked_letters = parked_letters - $4 + $5, updated_at = now()
WHERE projection = $1 RETURNING parked_streams`, p.Name(), oldStreams, shadowStreams, oldLetters, shadowLetters).Scan(&out.parkedStreams); err != nil {
			return err
		}
		if out.pos, err = event.ParseColumns(major, minor); err != nil {
			return err
		}
		return s.dropShadowRow(ctx, tx, key)
	})
	if err != nil {
		return out, fmt.Errorf("swap tenant %s of %s (nothing was swapped; run the same command again to retry): %w", tenant, p.Name(), err)
	}
	return out, nil
}

// supersede marks the parked dead letters of a generation a full rebuild
// replaced, tenant by tenant (best effort: they are hidden anyway).
func (s *Service) supersede(ctx context.Context, name, generation, actor string) error {
	tenants, err := projections.Tenants(ctx, s.cfg.Pool)
	if err != nil {
		return err
	}
	for lo := 0; lo < len(tenants); lo += 200 {
		b := &pgx.Batch{}
		for _, t := range tenants[lo:min(lo+200, len(tenants))] {
			b.Queue(db.SetTenantSQL, t)
			b.Queue(`UPDATE dead_letters SET status = 'superseded', resolved_at = now(), resolved_by = $4, reason = 'replaced by a rebuild'
WHERE tenant_id = $1 AND projection = $2 AND generation = $3::uuid AND status = 'parked'`, t, name, generation, actor)
			b.Queue(`DELETE FROM parked_streams WHERE tenant_id = $1 AND projection = $2 AND generation = $3::uuid`, t, name, generation)
		}
		if err := s.cfg.Pool.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
	}
	return nil
}

// Abort drops an interrupted rebuild of a projection: its shadow tables and
// checkpoint row, in the slot of tenant ("" for a rebuild of every
// tenant). A running rebuild must be stopped first.
func (s *Service) Abort(ctx context.Context, name, tenant string) error {
	p, err := s.projection(name)
	if err != nil {
		return err
	}
	if tenant != "" {
		if err := checkTenant(tenant); err != nil {
			return err
		}
	}
	key := slotKey(p.Name(), tenant)
	cps, err := s.checkpoints(ctx, key)
	if err != nil {
		return err
	}
	cp, ok := cps[key]
	if !ok {
		return fmt.Errorf("%w: there is no rebuild of %s to abort", ErrNothingToDo, name)
	}
	m, err := parseMeta(cp.Rebuild)
	if err != nil {
		return err
	}
	x, err := s.exclusiveOn(ctx, s.cfg.Owner, key)
	if err != nil {
		if errors.Is(err, ErrBusy) {
			return fmt.Errorf("%w: the rebuild of %s is running: stop it first (Ctrl-C), then abort", ErrBusy, name)
		}
		return err
	}
	defer x.Release()
	return s.ownerTx(ctx, x.Conn(), func(tx pgx.Tx) error {
		if m != nil {
			for _, shadow := range m.Tables {
				if _, err := tx.Exec(ctx, `DROP TABLE IF EXISTS `+ident(shadow)); err != nil {
					return err
				}
			}
		}
		_, err := tx.Exec(ctx, `DELETE FROM projection_checkpoints WHERE projection = $1`, key)
		return err
	})
}
