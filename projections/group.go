package projections

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/internal/failpoint"
	"github.com/strata-es/strata/internal/pgsession"
)

// Group runs the runners of one database's projections on one session:
// per wake-up one read of the log and one transaction that applies the
// batch to every member and moves every member's checkpoint, instead of a
// read, a transaction and a commit per projection. Each member keeps what
// is its own: its lease (held by the group's session), checkpoint,
// completeness ledger, parked streams and dead letters, written in the
// shared transaction. A batch commits for all members or for none.
//
// Only the ordinary case is grouped. A member leaves the group and runs
// alone on a session of its own, as Runner.Run does, when:
//
//   - its part of a batch fails: the group's transaction rolls back and
//     each member applies that batch in a transaction of its own (so a
//     poison event parks its stream, or fails the one member, exactly as
//     without a group); a member whose own batch fails leaves;
//   - a tool asks for it (a rebuild's swap, a dead-letter retry): it yields
//     its lease to the tool and waits while the tool works;
//   - another process holds its lease (it stands by) or its checkpoint is
//     beyond the end of the log.
//
// Catching up is not grouped either: one session applies the members'
// statements one after the other, where a session per member applies them
// in parallel. Every member starts alone, and when the group finds itself
// far behind (two full reads in a row) its members leave to catch up alone.
//
// The group takes a member back once it has applied a batch alone and
// caught up with the head; a member behind the others is brought to their
// position on the group's session first, in transactions of its own.
type Group struct {
	members []*member
	cfg     RunnerConfig // the first member's: wake-ups, polling, the read
	logger  *slog.Logger
	back    chan *member // members whose alone run ended

	// Owned by the goroutine in Run or CatchUp.
	catchingUp  bool
	wakeTakenAt time.Time
	until       event.Position // CatchUp's bound (zero: none)
	strict      error          // CatchUp: a member that would leave fails the call instead (set to its error)
	inCatchUp   bool
	runCtx      context.Context // Run's: members running alone live as long as it
	alone       sync.WaitGroup
	retryTurn   int // the member whose parked streams are retried first next time

	mu    sync.Mutex
	stats GroupStats
}

// GroupStats counts how a group's batches were applied.
type GroupStats struct {
	// Grouped counts batches applied to every aligned member in one
	// transaction; Split those whose transaction failed and were applied
	// member by member; Behind the batches members behind the others
	// applied alone to reach them.
	Grouped, Split, Behind int64
	// Joined counts the times a member was taken into the group; Left the
	// times one left it (the group's session lost counts every member).
	// Joined - Left is how many members are in the group now.
	Joined, Left int64
}

type memberMode int8

const (
	memberFree    memberMode = iota // neither in the group nor running alone
	memberGrouped                   // its lease is held by the group's session
	memberAlone                     // running alone (runAlone)
)

type member struct {
	r    *Runner
	mode memberMode
}

// NewGroup groups runners, which must read the same log with the same
// registry and pool, each over the whole log under its own checkpoint key
// (no Tenant, no Filter). The group takes its wake-ups, polling and reads
// from the first runner's configuration.
func NewGroup(runners []*Runner) (*Group, error) {
	if len(runners) == 0 {
		return nil, errors.New("projection group: no runners")
	}
	first := runners[0]
	keys := map[string]bool{}
	g := &Group{cfg: first.cfg, logger: first.cfg.Logger, back: make(chan *member, len(runners))}
	for _, r := range runners {
		switch {
		case keys[r.key]:
			return nil, fmt.Errorf("projection group: %s is in it twice", r.key)
		case r.cfg.Tenant != "" || r.cfg.Filter != nil || !r.cfg.Partition.IsZero():
			return nil, fmt.Errorf("projection group: %s applies part of the log only (Tenant, Filter or Partition)", r.key)
		case r.log != first.log || r.pool != first.pool || r.cfg.Registry != first.cfg.Registry || r.cfg.Shared != first.cfg.Shared:
			return nil, fmt.Errorf("projection group: %s reads another log, registry, pool or shared reads than %s", r.key, first.key)
		}
		keys[r.key] = true
		g.members = append(g.members, &member{r: r})
	}
	return g, nil
}

// Runners returns the group's runners.
func (g *Group) Runners() []*Runner {
	out := make([]*Runner, len(g.members))
	for i, m := range g.members {
		out[i] = m.r
	}
	return out
}

// Stats returns how the group's batches were applied.
func (g *Group) Stats() GroupStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.stats
}

func (g *Group) count(f func(*GroupStats)) {
	g.mu.Lock()
	f(&g.stats)
	g.mu.Unlock()
}

// Run keeps every member up to date until ctx ends, as each member's Run
// would, and returns nil then.
func (g *Group) Run(ctx context.Context) error {
	g.runCtx = ctx
	for _, m := range g.members {
		m.r.setState(StateStarting)
	}
	defer func() {
		g.alone.Wait() // members running alone stop with ctx
		for _, m := range g.members {
			m.r.setState(StateStopped)
		}
	}()
	// Every member starts alone: a process far behind (a restart, a fresh
	// install) catches up on a session per member, in parallel, and each
	// member joins the group once it is at the head.
	for _, m := range g.members {
		g.goAlone(m, "catching up at start")
	}
	var backoff pgsession.Backoff
	for ctx.Err() == nil {
		conn, err := g.members[0].r.connect(ctx)
		if err != nil {
			if ctx.Err() == nil {
				g.logger.Warn("projection group cannot connect; retrying", "error", err.Error(), "retry_in", g.cfg.LeaseRetry.String())
			}
			pgsession.Sleep(ctx, g.cfg.LeaseRetry)
			continue
		}
		led := time.Now()
		err = g.lead(ctx, conn)
		// Ending the session releases every lease it holds.
		pgsession.Close(conn)
		for _, m := range g.members {
			if m.mode == memberGrouped {
				m.mode = memberFree
				m.r.setState(StateStarting)
				g.count(func(s *GroupStats) { s.Left++ })
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		delay := backoff.After(time.Since(led))
		g.logger.Warn("projection group lost its session; reconnecting", "error", fmt.Sprint(err), "retry_in", delay.String())
		pgsession.Sleep(ctx, delay)
	}
	return nil
}

// lead applies batches on conn until ctx ends (nil) or the session fails.
func (g *Group) lead(ctx context.Context, conn *pgx.Conn) error {
	g.catchingUp, g.wakeTakenAt = false, time.Time{}
	var (
		pace      pacer
		lastStart time.Time
		wake      <-chan struct{}
		haveWake  bool
	)
	for {
		if g.cfg.Wake != nil && !haveWake {
			wake = g.cfg.Wake()
			g.wakeTakenAt = time.Now()
		}
		haveWake = false
		if ctx.Err() != nil {
			g.stop(conn)
			return nil
		}
		if err := g.admit(ctx, conn); err != nil {
			return err
		}
		lastStart = time.Now()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.FinishTimeout)
		n, err := g.step(sctx, conn)
		cancel()
		if err != nil {
			return err
		}
		if err := g.retryDue(ctx, conn, n); err != nil {
			return err
		}
		timeout := pace.next(n, g.catchingUp, &g.cfg)
		if g.catchingUp {
			continue
		}
		for _, m := range g.grouped() {
			if d, ok := m.r.nextRetry(); ok && d < timeout {
				timeout = max(d, time.Millisecond)
			}
		}
		timer := time.NewTimer(timeout)
		select {
		case <-ctx.Done():
			timer.Stop()
			g.stop(conn)
			return nil
		case m := <-g.back:
			timer.Stop()
			m.mode = memberFree // admitted at the top of the loop
			haveWake = wake != nil
		case <-wake:
			timer.Stop()
			pace.woken()
			wake, haveWake = g.cfg.Wake(), true
			g.wakeTakenAt = time.Now()
			if wait := g.cfg.Gather - time.Since(lastStart); wait > 0 && !pgsession.Sleep(ctx, wait) {
				g.stop(conn)
				return nil
			}
		case <-timer.C:
			if pace.timedOut() {
				// The idle probe of Runner.lead, for every member: is the
				// session alive, and has a tool asked for one of them?
				pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := g.yieldPaused(pctx, conn)
				cancel()
				if err != nil && ctx.Err() == nil {
					return fmt.Errorf("projection group: session: %w", err)
				}
			}
		}
	}
}

// grouped returns the members the group's session holds.
func (g *Group) grouped() []*member {
	var out []*member
	for _, m := range g.members {
		if m.mode == memberGrouped {
			out = append(out, m)
		}
	}
	return out
}

// admit takes free members into the group: their lease on conn, their
// checkpoint loaded. A member a tool holds, whose lease another session
// holds, or whose checkpoint is beyond the log, runs alone instead.
func (g *Group) admit(ctx context.Context, conn *pgx.Conn) error {
	for drained := false; !drained; {
		select {
		case m := <-g.back:
			m.mode = memberFree
		default:
			drained = true
		}
	}
	for _, m := range g.members {
		if m.mode != memberFree {
			continue
		}
		r := m.r
		paused, err := pauseRequested(ctx, conn, r.key)
		if err != nil {
			return fmt.Errorf("projection %s: %w", r.key, err)
		}
		if paused {
			g.goAlone(m, "a tool holds it")
			continue
		}
		ok, err := lease.Try(ctx, conn, r.key)
		if err != nil {
			return err
		}
		if !ok {
			g.goAlone(m, "another session holds its lease")
			continue
		}
		if err := r.begin(ctx, conn); err != nil {
			lease.Release(conn, r.key)
			return err
		}
		ahead, err := r.aheadOfLog(ctx)
		if err != nil || ahead != "" {
			lease.Release(conn, r.key)
			if err != nil {
				return err
			}
			g.goAlone(m, "its checkpoint is beyond the end of the log")
			continue
		}
		m.mode = memberGrouped
		g.count(func(s *GroupStats) { s.Joined++ })
		r.mu.Lock()
		r.status.State, r.status.Checkpoint = StateRunning, r.checkpoint
		r.mu.Unlock()
		r.logger.Info("projection runner active in the group", "checkpoint", r.checkpoint.Token(), "position", r.checkpoint.String())
	}
	return nil
}

// Why members leave the group other than by failing: a tool asked for
// one, or the group is far behind the head.
var (
	errPaused    = errors.New("a tool asked for it")
	errFarBehind = errors.New("catching up: far behind the head")
)

// leave gives m's lease back and runs it alone (in CatchUp: fails the call
// with why).
func (g *Group) leave(ctx context.Context, conn *pgx.Conn, m *member, why error) {
	lease.Release(conn, m.r.key)
	g.count(func(s *GroupStats) { s.Left++ })
	if g.inCatchUp {
		m.mode = memberFree
		if g.strict == nil {
			g.strict = why
		}
		return
	}
	g.goAlone(m, why.Error())
}

func (g *Group) goAlone(m *member, why string) {
	ctx := g.runCtx // not a batch's: the member outlives it
	m.mode = memberAlone
	m.r.logger.Info("projection runs alone until it can rejoin its group", "reason", why)
	g.alone.Add(1)
	go func() {
		defer g.alone.Done()
		_ = m.r.runAlone(ctx)
		if ctx.Err() == nil {
			g.back <- m // buffered: one slot per member
		}
	}()
}

// yieldPaused lets the members a tool asks for go (one probe for all).
func (g *Group) yieldPaused(ctx context.Context, conn *pgx.Conn) error {
	ms := g.grouped()
	if len(ms) == 0 {
		_, err := conn.Exec(ctx, "SELECT 1")
		return err
	}
	keys := make([]int32, len(ms))
	for i, m := range ms {
		keys[i] = leaseKey(m.r.key)
	}
	rows, err := conn.Query(ctx, `SELECT k FROM unnest($2::int[]) k WHERE NOT pg_try_advisory_xact_lock_shared($1::int, k)`, pauseClass, keys)
	if err != nil {
		return err
	}
	paused := map[int32]bool{}
	for rows.Next() {
		var k int32
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return err
		}
		paused[k] = true
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, m := range ms {
		if paused[leaseKey(m.r.key)] {
			g.leave(ctx, conn, m, errPaused)
		}
	}
	return nil
}

func (g *Group) stop(conn *pgx.Conn) {
	for _, m := range g.grouped() {
		m.r.stop(conn)
	}
}

// readSize is how many events the group's next read asks for.
func (g *Group) readSize() int {
	if g.catchingUp {
		return g.cfg.CatchUpBatch
	}
	return g.cfg.BatchSize
}

// step brings members behind the others to them, then applies one batch
// to every member at the group's position. It returns how many events the
// batch held, and an error only when the session is gone.
func (g *Group) step(ctx context.Context, conn *pgx.Conn) (int, error) {
	ms := g.grouped()
	if len(ms) == 0 {
		return 0, nil
	}
	pos := ms[0].r.checkpoint
	for _, m := range ms[1:] {
		if pos.Less(m.r.checkpoint) {
			pos = m.r.checkpoint
		}
	}
	if !g.until.IsZero() && g.until.Less(pos) {
		pos = g.until
	}
	var aligned []*member
	behind := 0
	for _, m := range ms {
		if m.r.checkpoint != pos {
			n, err := g.stepBehind(ctx, conn, m, pos)
			if err != nil {
				return 0, err
			}
			behind += n
		}
		if m.mode == memberGrouped && m.r.checkpoint == pos {
			aligned = append(aligned, m)
		}
	}
	if len(aligned) == 0 {
		return behind, nil
	}
	began := time.Now()
	recs, decoded, err := g.read(ctx, pos)
	if err != nil {
		g.catchingUp = false
		if conn.IsClosed() || db.IsUnavailable(err) || ctx.Err() != nil {
			return 0, err
		}
		g.logger.Warn("projection group cannot read the log; retrying", "error", err.Error())
		return behind, nil
	}
	if len(recs) == 0 {
		return behind, nil
	}
	ctx, span := startBatchSpan(ctx, "group", recs)
	err = g.applyAll(ctx, conn, aligned, recs, decoded, began)
	endBatchSpan(span, err)
	if err == nil {
		g.count(func(s *GroupStats) { s.Grouped++ })
		for _, m := range aligned {
			if m.r.pauseSeen {
				g.leave(ctx, conn, m, errPaused)
			}
		}
		if g.catchingUp && len(recs) == g.cfg.CatchUpBatch && !g.inCatchUp {
			// Far behind (two full reads in a row): one session applies
			// the members' batches one after the other, where sessions
			// of their own apply them in parallel (catch-up through one
			// session measured 0.68x of one per member on 2 cores,
			// `strata bench --workloads catchup`). Members catch up alone
			// and rejoin at the head.
			for _, m := range g.grouped() {
				g.leave(ctx, conn, m, errFarBehind)
			}
			g.catchingUp = false
		}
		return behind + len(recs), nil
	}
	if conn.IsClosed() || db.IsUnavailable(err) {
		return 0, err
	}
	// Split: each member applies the batch in a transaction of its own,
	// which parks a poison event's stream or names the member that fails.
	g.count(func(s *GroupStats) { s.Split++ })
	g.logger.Debug("projection group's batch failed as a whole; applying it member by member", "error", err.Error())
	for _, m := range aligned {
		if _, err := m.r.applyRead(ctx, conn, recs, decoded, began); err != nil {
			if conn.IsClosed() || db.IsUnavailable(err) {
				return 0, err
			}
			g.leave(ctx, conn, m, err)
			continue
		}
		if m.r.pauseSeen {
			g.leave(ctx, conn, m, errPaused)
		}
	}
	return behind + len(recs), nil
}

// stepBehind applies one batch, up to pos, to a member behind the others.
func (g *Group) stepBehind(ctx context.Context, conn *pgx.Conn, m *member, pos event.Position) (int, error) {
	r := m.r
	r.until = pos
	n, err := r.step(ctx, conn)
	r.until = event.Position{}
	g.count(func(s *GroupStats) { s.Behind++ })
	switch {
	case err == nil && r.pauseSeen:
		g.leave(ctx, conn, m, errPaused)
	case err != nil && (conn.IsClosed() || db.IsUnavailable(err)):
		return 0, err
	case err != nil:
		g.leave(ctx, conn, m, err)
	}
	return n, nil
}

// read returns the batch after pos, decoded once for every member.
func (g *Group) read(ctx context.Context, pos event.Position) ([]event.Record, *sharedBatch, error) {
	size := g.readSize()
	var b *sharedBatch
	if sh := g.cfg.Shared; sh != nil {
		var err error
		if b, err = sh.read(ctx, g, pos, size, g.catchingUp, g.wakeTakenAt); err != nil {
			return nil, nil, err
		}
	} else {
		recs, err := g.members[0].r.log.ReadAll(ctx, pos, size)
		if err != nil {
			return nil, nil, err
		}
		b = &sharedBatch{recs: recs, payloads: make([]event.Payload, len(recs)), errs: make([]error, len(recs))}
		for i, rec := range recs {
			b.payloads[i], b.errs[i] = g.cfg.Registry.DecodeRecord(rec)
		}
	}
	recs := b.recs
	g.catchingUp = len(recs) == size
	if !g.until.IsZero() {
		k := len(recs)
		for k > 0 && g.until.Less(recs[k-1].Position) {
			k--
		}
		recs = recs[:k]
	}
	return recs, b, nil
}

// groupPart is one member's share of a grouped batch.
type groupPart struct {
	m     *member
	last  map[streamKey]int64
	items []item
	plan  *parkPlan
	res   applied
}

// applyAll applies recs to every member in aligned in one transaction:
// each member's statements as it would send them alone (queueApply), but
// the members' ledger rows of a tenant in one statement, one BEGIN and one
// COMMIT. Any failure rolls everything back and is returned.
func (g *Group) applyAll(ctx context.Context, conn *pgx.Conn, aligned []*member, recs []event.Record, decoded *sharedBatch, began time.Time) error {
	if commitCheckpointFirst != nil { // the chaos_broken build: its defect lives in apply
		return errors.New("projection group: the chaos_broken build applies member by member")
	}
	next := recs[len(recs)-1].Position
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	owner := []int{ownerRunner}
	parts := make([]groupPart, len(aligned)) // fixed: the batch's callbacks write into each part's res
	for i, m := range aligned {
		r := m.r
		last, err := checkContiguous(ctx, r.locator, r.streams, recs)
		if err != nil {
			return fmt.Errorf("projection %s: %w", r.key, err)
		}
		items, err := r.prepare(recs, decoded)
		if err != nil {
			return err
		}
		plan, err := r.planParks(ctx, conn, items)
		if err != nil {
			return err
		}
		if err := r.ledger.Load(ctx, conn, recs); err != nil {
			return err
		}
		bp, setBased := r.proj.(BatchProjection)
		setBased = setBased && !r.cfg.PerEvent
		parts[i] = groupPart{m: m, last: last, items: items, plan: plan}
		if err := r.queueApply(b, &owner, &parts[i].res, recs, items, r.checkpoint, next, bp, setBased, plan, true); err != nil {
			return err
		}
	}
	// The members' ledger rows: one statement per tenant for all of them.
	books := make([]*LedgerBook, len(parts))
	lbts := make([]LedgerBatch, len(parts))
	var tenants []string
	seen := map[string]bool{}
	for i, p := range parts {
		books[i], lbts[i] = p.m.r.ledger, p.res.ledger
		for _, t := range p.res.ledger.Tenants() {
			if !seen[t] {
				seen[t] = true
				tenants = append(tenants, t)
			}
		}
	}
	for _, t := range tenants {
		b.Queue(db.SetTenantSQL, t)
		queueTenantRows(b, books, lbts, t)
	}
	err := sendTx(ctx, conn, b, func() { failpoint.Hit(FailpointBeforeCommit) }, func(k int, err error) error {
		if errors.Is(err, pgx.ErrNoRows) || errors.Is(err, errCheckpointMoved) {
			return errCheckpointMoved
		}
		return fmt.Errorf("projection group: apply batch: %w", err)
	})
	if err != nil {
		return err
	}
	for _, p := range parts {
		p.m.r.committed(ctx, recs, p.last, p.res, p.plan, len(p.items), began)
	}
	return nil
}

// CatchUp takes every member's lease on one session and applies batches
// until every checkpoint reaches until (or, when until is zero, until no
// further event is visible), as Runner.CatchUp does for one. For tests and
// benchmarks: a member that fails fails the call.
func (g *Group) CatchUp(ctx context.Context, until event.Position) error {
	conn, err := g.members[0].r.connect(ctx)
	if err != nil {
		return err
	}
	defer pgsession.Close(conn)
	for _, m := range g.members {
		ok, err := lease.Try(ctx, conn, m.r.key)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("projection %s: %w", m.r.key, ErrLeaseHeld)
		}
		if err := m.r.begin(ctx, conn); err != nil {
			return err
		}
		m.mode = memberGrouped
	}
	g.until, g.catchingUp, g.wakeTakenAt, g.inCatchUp, g.strict = until, false, time.Time{}, true, nil
	defer func() {
		for _, m := range g.members {
			m.mode = memberFree
		}
		g.until, g.inCatchUp, g.strict = event.Position{}, false, nil
	}()
	repoll := g.cfg.MinRepoll
	for {
		done := true
		if g.strict != nil {
			return g.strict
		}
		for _, m := range g.members {
			if until.IsZero() || m.r.checkpoint.Less(until) {
				done = false
			}
		}
		if done && !until.IsZero() {
			return nil
		}
		n, err := g.step(ctx, conn)
		if err != nil {
			return err
		}
		if g.strict != nil {
			return g.strict
		}
		if err := g.retryDue(ctx, conn, n); err != nil {
			return err
		}
		if n > 0 {
			repoll = g.cfg.MinRepoll
			continue
		}
		if until.IsZero() {
			return nil
		}
		if !pgsession.Sleep(ctx, repoll) {
			return ctx.Err()
		}
		repoll = min(2*repoll, 100*time.Millisecond)
	}
}

// retryDue retries the members' parked streams that are due after a step
// that applied n events: while the head moves one stream in all, taking
// the members in turn (the retries run on the group's session, ahead of
// every tenant's next events); every one due otherwise.
func (g *Group) retryDue(ctx context.Context, conn *pgx.Conn, n int) error {
	members := g.grouped()
	limit := retryLimit(n)
	for i := range members {
		m := members[(g.retryTurn+i)%len(members)]
		tried, err := m.r.retryDue(ctx, conn, limit)
		if err != nil {
			return err
		}
		if limit > 0 && tried > 0 {
			g.retryTurn = (g.retryTurn + i + 1) % len(members)
			return nil
		}
	}
	return nil
}
