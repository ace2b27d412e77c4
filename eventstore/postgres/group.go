package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
)

// Group commit (issue 18): concurrent appends, of any streams and tenants,
// written in one transaction and one commit. On 2 cores PostgreSQL spends
// about 65-70 µs per single-statement transaction but about 40 µs per event
// inside a batch (notes/postgres-limits.md), so one commit for many appends
// lifts the ceiling of one INSERT per transaction.
//
// It is the classic leader/follower scheme, not a timer: an append that
// finds a free slot (fewer than MaxInFlight transactions of this store
// running) and nobody queued runs alone, exactly as without grouping, so a
// lone writer pays nothing. Appends that arrive while the slots are busy
// queue; when a transaction ends, the queue (up to MaxBatch) becomes the
// next group. The window is therefore the commit in progress.
//
// Each member keeps the guarantees it has alone:
//
//   - The stream locks of every member are taken by the transaction's
//     first statement, in ascending lock-id order (no deadlock between
//     groups, nor with ungrouped appends, which hold one lock), before
//     anything assigns the transaction an xid: the global log's per-stream
//     order holds as for one append (ARCHITECTURE decision 1), and the
//     group's events become visible together, at its commit, below the
//     readers' pg_snapshot_xmin horizon like any transaction's.
//   - One set-based statement per tenant checks every member's expected
//     version under those locks and inserts the events of those that pass;
//     the rows it returns say which went in. A conflict fails that member
//     only; no savepoints. Members on one stream go in successive
//     statements ("rounds"), in arrival order, so the second sees the
//     first's events.
//   - Each statement runs under its own tenant's transaction-local
//     app.tenant_id (set just before it), so RLS's WITH CHECK judges every
//     row under its own tenant, as the projector's batches do.
//   - Idempotency records are inserted in the same transaction, sorted by
//     (tenant, key). Two members with one key never share a group (the
//     later waits for the next), and a key recorded by another transaction
//     fails the shared transaction, whose members are then retried alone.
//   - A failure the server reports before or at COMMIT (a constraint, a
//     deadlock, a serialization failure, a failing deferred trigger) rolls
//     the whole transaction back; every member is then retried alone, in a
//     transaction of its own, and gets exactly the answer it would have had
//     without grouping. A failure that leaves the commit's outcome unknown
//     (the connection lost after COMMIT was sent) is reported to every
//     member as an error, never as a success.
//   - A member whose context ends while queued leaves the queue and nothing
//     of it is written; once its group is running, its outcome is unknown
//     to it (as when an ungrouped append is cancelled mid-flight). The
//     group's transaction runs under a context of its own, cancelled only
//     when every member has given up.

// GroupConfig tunes group commit. Zero fields take the defaults.
type GroupConfig struct {
	// MaxBatch is the most appends one transaction carries (default 64).
	MaxBatch int
	// MaxWait is how long a group that could start lingers for more
	// appends to join while another of this store's transactions is still
	// committing (default 0: it starts at once). It never delays an append
	// that finds nothing in flight.
	MaxWait time.Duration
	// MaxInFlight is how many transactions (groups or lone appends) the
	// store runs at once (default 2). More overlap one commit's fsync with
	// the next group's work; fewer make bigger groups.
	MaxInFlight int
}

func (c GroupConfig) withDefaults() GroupConfig {
	if c.MaxBatch <= 0 {
		c.MaxBatch = 64
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = 2
	}
	if c.MaxWait < 0 {
		c.MaxWait = 0
	}
	return c
}

// WithGroupCommit makes concurrent appends share transactions (see
// GroupConfig). Callers see no difference but throughput.
func WithGroupCommit(cfg GroupConfig) Option {
	return func(s *Store) { s.group = &grouper{cfg: cfg.withDefaults()} }
}

type grouper struct {
	s   *Store
	cfg GroupConfig

	mu       sync.Mutex
	queue    []*pending
	inFlight int
	// lingerUntil is when a group held back by MaxWait starts anyway.
	lingerUntil time.Time

	// Test hooks (group_test.go).
	// gather, when above zero, holds the next group until that many
	// appends are queued (then it is reset): the test's mix is certain.
	gather int
	// beforeCommit runs inside a group's transaction, after every write,
	// before COMMIT; an error rolls the transaction back.
	beforeCommit func(ctx context.Context, conn *pgx.Conn) error
	// onGroup sees every group transaction's size and outcome.
	onGroup func(members int, outcome groupOutcome)
}

// pending is one append waiting in, or carried by, a group.
type pending struct {
	ctx  context.Context
	req  eventstore.AppendRequest
	enc  encoded
	done chan struct{}

	// Set by the group before done is closed.
	res   eventstore.AppendResult
	err   error
	alone bool // the shared transaction failed: run by yourself

	taken bool // guarded by grouper.mu: a group carries it
}

func (p *pending) finish(res eventstore.AppendResult, err error) {
	p.res, p.err = res, err
	close(p.done)
}

func (p *pending) op() string { return "append " + p.req.Stream }

func (g *grouper) append(ctx context.Context, req eventstore.AppendRequest, enc encoded) (eventstore.AppendResult, error) {
	g.mu.Lock()
	if g.gather == 0 && len(g.queue) == 0 && g.inFlight < g.cfg.MaxInFlight {
		// Nothing to join and a slot free: run alone, now.
		g.inFlight++
		g.mu.Unlock()
		defer g.release()
		return g.s.appendAlone(ctx, req, enc)
	}
	p := &pending{ctx: ctx, req: req, enc: enc, done: make(chan struct{})}
	g.queue = append(g.queue, p)
	g.startLocked()
	g.mu.Unlock()

	select {
	case <-p.done:
	case <-ctx.Done():
		g.mu.Lock()
		if !p.taken {
			g.queue = slices.DeleteFunc(g.queue, func(q *pending) bool { return q == p })
			g.mu.Unlock()
			return eventstore.AppendResult{}, translate(p.op(), ctx.Err())
		}
		g.mu.Unlock()
		// Carried by a running transaction: whether it commits is not
		// known here, as when an ungrouped append is cancelled mid-flight.
		return eventstore.AppendResult{}, translate(p.op(), ctx.Err())
	}
	if p.alone {
		return g.s.appendAlone(ctx, req, enc)
	}
	return p.res, p.err
}

// release frees a slot and starts the next group, if any waits.
func (g *grouper) release() {
	g.mu.Lock()
	g.inFlight--
	g.startLocked()
	g.mu.Unlock()
}

// startLocked starts groups from the queue while slots are free.
func (g *grouper) startLocked() {
	for len(g.queue) > 0 && g.inFlight < g.cfg.MaxInFlight {
		switch {
		case g.gather > 0:
			if len(g.queue) < g.gather {
				return
			}
			g.gather = 0
		case g.cfg.MaxWait > 0 && g.inFlight > 0 && len(g.queue) < g.cfg.MaxBatch:
			now := time.Now()
			if g.lingerUntil.IsZero() {
				g.lingerUntil = now.Add(g.cfg.MaxWait)
				time.AfterFunc(g.cfg.MaxWait, g.kick)
				return
			}
			if now.Before(g.lingerUntil) {
				return
			}
		}
		g.lingerUntil = time.Time{}
		batch := g.takeLocked()
		g.inFlight++
		go g.run(batch)
	}
}

func (g *grouper) kick() {
	g.mu.Lock()
	g.startLocked()
	g.mu.Unlock()
}

// takeLocked removes the next group from the queue: up to MaxBatch appends
// in arrival order, leaving for a later group any append whose
// idempotency key an earlier member of this group carries.
func (g *grouper) takeLocked() []*pending {
	var batch, rest []*pending
	var keys map[string]bool
	for _, p := range g.queue {
		if len(batch) == g.cfg.MaxBatch {
			rest = append(rest, p)
			continue
		}
		if idem := p.req.Idempotency; idem != nil {
			k := p.req.Tenant + "\x00" + idem.Key
			if keys[k] {
				rest = append(rest, p)
				continue
			}
			if keys == nil {
				keys = map[string]bool{}
			}
			keys[k] = true
		}
		p.taken = true
		batch = append(batch, p)
	}
	g.queue = rest
	return batch
}

// groupOutcome says what became of a group's transaction.
type groupOutcome int

const (
	groupCommitted     groupOutcome = iota // every member's result is set
	groupRolledBack                        // nothing of the group is stored
	groupIndeterminate                     // the commit may or may not have happened
)

func (g *grouper) run(batch []*pending) {
	defer g.release()
	live := batch[:0]
	for _, p := range batch {
		if err := p.ctx.Err(); err != nil {
			p.finish(eventstore.AppendResult{}, translate(p.op(), err))
			continue
		}
		live = append(live, p)
	}
	switch {
	case len(live) == 0:
		return
	case len(live) == 1 && g.beforeCommit == nil:
		p := live[0]
		p.finish(g.s.appendAlone(p.ctx, p.req, p.enc))
		return
	}
	ctx, cancel := groupContext(live)
	defer cancel()
	outcome, err := g.s.appendGroup(ctx, live, g.beforeCommit)
	if g.onGroup != nil {
		g.onGroup(len(live), outcome)
	}
	for _, p := range live {
		switch outcome {
		case groupCommitted:
			close(p.done) // res and err set by appendGroup
		case groupRolledBack:
			p.alone = true
			close(p.done)
		case groupIndeterminate:
			p.finish(eventstore.AppendResult{}, translate(p.op(), err))
		}
	}
}

// groupContext returns a context for a group's transaction that ends only
// once every member's context has ended: one caller giving up must not
// cancel the others' commit.
func groupContext(members []*pending) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	var live atomic.Int32
	live.Store(int32(len(members)))
	stops := make([]func() bool, len(members))
	for i, p := range members {
		stops[i] = context.AfterFunc(p.ctx, func() {
			if live.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// groupLockSQL takes the stream locks of a whole group, each once, in
// ascending lock-id order, as the transaction's first statement (it
// assigns no xid). Ordered by lock id, not by name: two names may share a
// lock id, and only one total order of the locks rules out deadlocks.
//
// The same statement sets the first tenant ($2) and makes the
// transaction's statements run generic plans: planning groupAppendSQL for
// its parameters costs about 0.3 ms, twice its execution, once per tenant
// per group, while its generic plan (index probes by tenant and stream,
// whatever the arrays hold) is made once per connection. Both settings are
// transaction-local (the pooled connection's other queries keep theirs);
// repeating them on every lock's row is harmless.
const groupLockSQL = `SELECT pg_advisory_xact_lock(l.id), set_config('` + db.TenantSetting + `', $2, true),
    set_config('plan_cache_mode', 'force_generic_plan', true)
FROM (SELECT DISTINCT hashtextextended(k, 0) AS id FROM unnest($1::text[]) AS k ORDER BY 1) AS l`

// groupAppendSQL appends the events of several appends of one tenant, on
// distinct streams, checking each one's expected version against its
// stream's version read under the locks (a statement's fresh snapshot
// under READ COMMITTED sees every append committed before the locks were
// granted, and this transaction's earlier rounds). Only the appends whose
// expectation holds are inserted; the rows returned say which. Events go
// in ordered by their place in the arrays (append, then event), so
// positions follow versions within a stream.
//
// $1 tenant; per append: $2 stream, $3 expected version; per event: $4 its
// append (1-based), $5 its index within the append (1-based), $6 id,
// $7 type, $8 schema version, $9 data, $10 metadata.
const groupAppendSQL = `
WITH req AS MATERIALIZED (
    SELECT r.stream, r.expected, r.ord,
        (SELECT coalesce(max(e.version), 0) FROM events e WHERE e.tenant_id = $1 AND e.stream_id = r.stream) AS cur
    FROM unnest($2::text[], $3::bigint[]) WITH ORDINALITY AS r(stream, expected, ord)
), ok AS (
    SELECT stream, cur, ord FROM req
    WHERE CASE expected
        WHEN -1 THEN true
        WHEN -2 THEN cur = 0
        WHEN -3 THEN cur > 0
        ELSE cur = expected
    END
)
INSERT INTO events (tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata)
SELECT $1, ok.stream, ok.cur + ev.n, ev.id::uuid, ev.typ, ev.sv, ev.data::jsonb, ev.meta::jsonb
FROM unnest($4::int[], $5::int[], $6::text[], $7::text[], $8::int[], $9::text[], $10::text[])
    WITH ORDINALITY AS ev(req, n, id, typ, sv, data, meta, i)
JOIN ok ON ok.ord = ev.req
ORDER BY ev.i
RETURNING stream_id, version, tx_id::text AS tx_text, position`

// groupCondAppendSQL is groupAppendSQL for a statement one of whose
// appends has a condition (per append: $11 the query's items, jsonb, NULL
// for none; $12 the position's transaction, $13 its position, $14 the
// query's tags, condition.go): an append is inserted when its expectation
// and its condition hold, and each one that is not comes back as a row
// naming why (failed: 'version' or 'condition'; the inserted events' rows
// have an empty failed).
var groupCondAppendSQL = `
WITH req AS MATERIALIZED (
    SELECT r.stream, r.expected, r.ord, r.items, ` + fmt.Sprintf(conditionAfterSQL, "r.tx", "r.pos", "r.tags") + `,
        (SELECT coalesce(max(e.version), 0) FROM events e WHERE e.tenant_id = $1 AND e.stream_id = r.stream) AS cur
    FROM unnest($2::text[], $3::bigint[], $11::jsonb[], $12::text[], $13::bigint[], $14::text[])
        WITH ORDINALITY AS r(stream, expected, items, tx, pos, tags, ord)
), judged AS MATERIALIZED (
    SELECT stream, cur, ord,
        CASE expected
            WHEN -1 THEN true
            WHEN -2 THEN cur = 0
            WHEN -3 THEN cur > 0
            ELSE cur = expected
        END AS version_ok,
        items IS NULL OR NOT ` + fmt.Sprintf(conditionFailsSQL, "items", "after_tx", "after_pos", "after_tags") + ` AS cond_ok
    FROM req
), ins AS (
    INSERT INTO events (tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata)
    SELECT $1, j.stream, j.cur + ev.n, ev.id::uuid, ev.typ, ev.sv, ev.data::jsonb, ev.meta::jsonb
    FROM unnest($4::int[], $5::int[], $6::text[], $7::text[], $8::int[], $9::text[], $10::text[])
        WITH ORDINALITY AS ev(req, n, id, typ, sv, data, meta, i)
    JOIN judged j ON j.ord = ev.req AND j.version_ok AND j.cond_ok
    ORDER BY ev.i
    RETURNING stream_id, version, tx_id::text AS tx_text, position
)
SELECT stream_id, version, tx_text, position, '' AS failed FROM ins
UNION ALL
SELECT stream, 0, '', 0, CASE WHEN version_ok THEN 'condition' ELSE 'version' END
FROM judged WHERE NOT (version_ok AND cond_ok)`

// groupKeysSQL records the idempotency keys of one tenant's members.
const groupKeysSQL = `INSERT INTO idempotency_keys (tenant_id, key, request_hash, response)
SELECT $1, k.key, k.hash, k.resp FROM unnest($2::text[], $3::text[], $4::bytea[]) AS k(key, hash, resp)`

// groupStmt is one append statement of a group: members of one tenant on
// distinct streams.
type groupStmt struct {
	tenant  string
	members []*pending
}

// conditional reports whether a member of the statement has a condition:
// it then runs groupCondAppendSQL.
func (st groupStmt) conditional() bool {
	return slices.ContainsFunc(st.members, func(p *pending) bool { return p.enc.cond != nil })
}

// sql returns the statement's text and arguments.
func (st groupStmt) sql() (string, []any) {
	args := st.args()
	if !st.conditional() {
		return groupAppendSQL, args
	}
	n := len(st.members)
	items, txs, poss, tags := make([][]byte, n), make([]string, n), make([]int64, n), make([]string, n)
	for i, p := range st.members {
		if c := p.enc.cond; c != nil {
			items[i], txs[i], poss[i], tags[i] = c.items, c.tx, c.pos, c.tags
		}
	}
	return groupCondAppendSQL, append(args, items, txs, poss, tags)
}

func (st groupStmt) args() []any {
	streams, expected := make([]string, len(st.members)), make([]int64, len(st.members))
	var reqs, ns, svs []int32
	var ids, types, datas, metas []string
	for i, p := range st.members {
		streams[i], expected[i] = p.req.Stream, int64(p.req.Expected)
		for j := range p.enc.ids {
			reqs, ns = append(reqs, int32(i+1)), append(ns, int32(j+1))
		}
		ids, types, svs = append(ids, p.enc.ids...), append(types, p.enc.types...), append(svs, p.enc.svs...)
		datas, metas = append(datas, p.enc.datas...), append(metas, p.enc.metas...)
	}
	return []any{st.tenant, streams, expected, reqs, ns, ids, types, svs, datas, metas}
}

// planGroup orders a group's appends into statements: round r holds each
// stream's r-th member (arrival order), split by tenant (sorted).
//
// A member that takes tag locks (condition.go) is ordered by its tags as by
// its stream: members sharing a tag go in successive rounds, so that a
// condition's check sees what an earlier member tagged.
func planGroup(members []*pending) (stmts []groupStmt, locks []string) {
	seen := map[string]int{}
	var rounds [][]*pending
	for _, p := range members {
		keys := append([]string{p.req.Tenant + "/" + p.req.Stream}, p.enc.locks...)
		r := 0
		for _, k := range keys {
			r = max(r, seen[k])
		}
		for _, k := range keys {
			if _, held := seen[k]; !held {
				locks = append(locks, k)
			}
			seen[k] = r + 1
		}
		if r == len(rounds) {
			rounds = append(rounds, nil)
		}
		rounds[r] = append(rounds[r], p)
	}
	for _, round := range rounds {
		byTenant := map[string][]*pending{}
		var tenants []string
		for _, p := range round {
			if _, ok := byTenant[p.req.Tenant]; !ok {
				tenants = append(tenants, p.req.Tenant)
			}
			byTenant[p.req.Tenant] = append(byTenant[p.req.Tenant], p)
		}
		slices.Sort(tenants)
		for _, t := range tenants {
			stmts = append(stmts, groupStmt{tenant: t, members: byTenant[t]})
		}
	}
	return stmts, locks
}

// appendGroup runs members in one transaction. On groupCommitted every
// member's res/err is set (success or a conflict); otherwise err says why.
func (s *Store) appendGroup(ctx context.Context, members []*pending, beforeCommit func(context.Context, *pgx.Conn) error) (groupOutcome, error) {
	stmts, locks := planGroup(members)
	idempotent := slices.ContainsFunc(members, func(p *pending) bool { return p.req.Idempotency != nil })
	// Without idempotency records the whole transaction is one pipelined
	// round trip, committed at its Sync; with them, the records need the
	// results first, so the transaction is explicit.
	explicit := idempotent || beforeCommit != nil

	conn, err := s.app.Acquire(ctx)
	if err != nil {
		return groupRolledBack, err
	}
	defer conn.Release()

	b := &pgx.Batch{}
	if explicit {
		b.Queue("BEGIN")
	}
	b.Queue(groupLockSQL, locks, stmts[0].tenant)
	for i, st := range stmts {
		if i > 0 && st.tenant != stmts[i-1].tenant {
			b.Queue(db.SetTenantSQL, st.tenant)
		}
		sql, args := st.sql()
		b.Queue(sql, args...)
	}
	br := conn.SendBatch(ctx, b)
	err = readGroupAppends(br, explicit, stmts)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if explicit {
			// COMMIT was never sent: nothing of the group is stored.
			rollback(conn.Conn())
			return groupRolledBack, err
		}
		if rolledBack(err) {
			return groupRolledBack, err
		}
		return groupIndeterminate, err
	}
	if !explicit {
		return groupCommitted, nil
	}

	// The idempotency records, sorted by (tenant, key) so that groups
	// inserting the same keys wait for each other in one order.
	var keyed []*pending
	for _, p := range members {
		if p.req.Idempotency != nil && p.err == nil {
			keyed = append(keyed, p)
		}
	}
	slices.SortFunc(keyed, func(a, b *pending) int {
		return cmp.Or(cmp.Compare(a.req.Tenant, b.req.Tenant), cmp.Compare(a.req.Idempotency.Key, b.req.Idempotency.Key))
	})
	b = &pgx.Batch{}
	for i := 0; i < len(keyed); {
		j := i
		var keys, hashes []string
		var resps [][]byte
		for ; j < len(keyed) && keyed[j].req.Tenant == keyed[i].req.Tenant; j++ {
			p := keyed[j]
			resp, err := respond(p.req.Idempotency, p.res)
			if err != nil {
				// Its events are in the transaction: nothing may commit.
				// Alone, it fails with this error; the others go in.
				rollback(conn.Conn())
				return groupRolledBack, fmt.Errorf("build idempotent response: %w", err)
			}
			keys, hashes, resps = append(keys, p.req.Idempotency.Key), append(hashes, p.req.Idempotency.RequestHash), append(resps, resp)
		}
		b.Queue(db.SetTenantSQL, keyed[i].req.Tenant)
		b.Queue(groupKeysSQL, keyed[i].req.Tenant, keys, hashes, resps)
		i = j
	}
	if beforeCommit == nil {
		b.Queue("COMMIT")
	}
	var tag pgconn.CommandTag
	if b.Len() > 0 {
		br = conn.SendBatch(ctx, b)
		for range b.Len() {
			if tag, err = br.Exec(); err != nil {
				break
			}
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil && beforeCommit != nil {
		if err := beforeCommit(ctx, conn.Conn()); err != nil {
			rollback(conn.Conn())
			return groupRolledBack, err
		}
		tag, err = conn.Exec(ctx, "COMMIT")
	}
	return commitOutcome(conn.Conn(), tag, err)
}

// respond builds a member's idempotent response. A panic becomes an
// error: it would otherwise take the process down from the group's
// goroutine, where no request handler recovers it; retried alone, the
// member panics again, in its caller's goroutine, as without grouping.
func respond(idem *eventstore.Idempotency, res eventstore.AppendResult) (resp []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("response builder panicked: %v", r)
		}
	}()
	return idem.Response(res)
}

// commitOutcome classifies the end of an explicit group transaction whose
// COMMIT was sent (or was about to be).
func commitOutcome(conn *pgx.Conn, tag pgconn.CommandTag, err error) (groupOutcome, error) {
	switch {
	case err == nil && tag.String() == "COMMIT":
		return groupCommitted, nil
	case err == nil:
		// COMMIT of a failed transaction answers ROLLBACK: nothing stored.
		return groupRolledBack, fmt.Errorf("group transaction ended with %q", tag.String())
	case rolledBack(err):
		if conn.PgConn().TxStatus() != 'I' {
			rollback(conn)
		}
		return groupRolledBack, err
	}
	return groupIndeterminate, err
}

// rolledBack reports whether err is the server's definite rejection of a
// statement (or of COMMIT): the transaction ended without effect. A lost
// connection, or the server going away, leaves the outcome unknown.
func rolledBack(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	sev := cmp.Or(pgErr.SeverityUnlocalized, pgErr.Severity)
	return sev == "ERROR" && !db.IsUnavailable(err)
}

func rollback(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// An error leaves the connection in a transaction; the pool then
	// destroys it on release instead of reusing it.
	_, _ = conn.Exec(ctx, "ROLLBACK")
}

// readGroupAppends reads the results of a group's first batch and sets
// every member's result: its versions and position, or a conflict.
func readGroupAppends(br pgx.BatchResults, explicit bool, stmts []groupStmt) error {
	if explicit {
		if _, err := br.Exec(); err != nil { // BEGIN
			return err
		}
	}
	if _, err := br.Exec(); err != nil { // the locks and the first tenant
		return err
	}
	for i, st := range stmts {
		if i > 0 && st.tenant != stmts[i-1].tenant {
			if _, err := br.Exec(); err != nil { // the tenant
				return err
			}
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		byStream := make(map[string]*pending, len(st.members))
		count := make(map[*pending]int, len(st.members))
		for _, p := range st.members {
			byStream[p.req.Stream] = p
			p.res = eventstore.AppendResult{}
		}
		conditional := st.conditional()
		failed := make(map[*pending]error)
		for rows.Next() {
			var stream, tx, why string
			var version, pos int64
			dest := []any{&stream, &version, &tx, &pos}
			if conditional {
				dest = append(dest, &why)
			}
			if err := rows.Scan(dest...); err != nil {
				rows.Close()
				return err
			}
			p := byStream[stream]
			if p == nil {
				rows.Close()
				return fmt.Errorf("group append returned a row of stream %q, which it did not append to", stream)
			}
			switch why {
			case "":
			case "condition":
				failed[p] = errCondition
				continue
			default:
				failed[p] = errExpectation
				continue
			}
			major, err := strconv.ParseUint(tx, 10, 64)
			if err != nil {
				rows.Close()
				return fmt.Errorf("parse tx id %q: %w", tx, err)
			}
			if count[p] == 0 || version < p.res.FirstVersion {
				p.res.FirstVersion = version
			}
			p.res.LastVersion = max(p.res.LastVersion, version)
			if at := (event.Position{Major: major, Minor: uint64(pos)}); p.res.Position.Less(at) {
				p.res.Position = at
			}
			count[p]++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, p := range st.members {
			switch n := count[p]; {
			case failed[p] != nil:
				p.err = translate(p.op(), failed[p])
			case n == 0:
				p.err = translate(p.op(), errExpectation)
			case n != len(p.enc.ids):
				return fmt.Errorf("group append stored %d of %d events of %s", n, len(p.enc.ids), p.req.Stream)
			default:
				p.err = nil
			}
		}
	}
	return nil
}

// DefaultGroupCommit is the group-commit setting strata uses when none is
// configured (STRATA_GROUP_COMMIT): on, because it wins in the append
// benchmark at every concurrency above one and costs a lone writer
// nothing (docs/benchmarks.md).
const DefaultGroupCommit = "on"

// ParseGroupCommit reads a group-commit setting: "off", "on", or "on"
// followed by comma-separated max_batch=N, max_wait=DURATION and
// in_flight=N, e.g. "on,max_batch=32,max_wait=200us".
func ParseGroupCommit(v string) (GroupConfig, bool, error) {
	parts := strings.Split(strings.TrimSpace(v), ",")
	switch strings.ToLower(strings.TrimSpace(parts[0])) {
	case "off", "false", "0":
		if len(parts) > 1 {
			return GroupConfig{}, false, fmt.Errorf("%q: no parameters after off", v)
		}
		return GroupConfig{}, false, nil
	case "on", "true", "1":
	default:
		return GroupConfig{}, false, fmt.Errorf("%q: want off, on, or on,max_batch=N,max_wait=DURATION,in_flight=N", v)
	}
	var cfg GroupConfig
	for _, kv := range parts[1:] {
		k, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return GroupConfig{}, false, fmt.Errorf("%q: %q is not key=value", v, kv)
		}
		switch k {
		case "max_batch", "in_flight":
			n, err := strconv.Atoi(val)
			if err != nil || n <= 0 {
				return GroupConfig{}, false, fmt.Errorf("%q: %s wants a positive integer", v, k)
			}
			if k == "max_batch" {
				cfg.MaxBatch = n
			} else {
				cfg.MaxInFlight = n
			}
		case "max_wait":
			d, err := time.ParseDuration(val)
			if err != nil || d < 0 {
				return GroupConfig{}, false, fmt.Errorf("%q: max_wait wants a duration such as 200us", v)
			}
			cfg.MaxWait = d
		default:
			return GroupConfig{}, false, fmt.Errorf("%q: unknown parameter %q", v, k)
		}
	}
	return cfg.withDefaults(), true, nil
}
