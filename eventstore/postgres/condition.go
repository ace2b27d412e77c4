package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
)

// Tags and append conditions on PostgreSQL (eventstore.TagReader).
//
// Tags live in the event's metadata (metadata->'tags'), so every path
// that copies events carries them; migration 024's trigger keeps a row per
// tag in event_tags beside them, which tagged reads find. What makes a
// condition exact is a lock per tag, in the lock set every append
// takes first (groupLockSQL, ascending lock ids, before the transaction
// has an xid):
//
//   - an append of events carrying tag t, or conditioned on a query naming
//     t, holds t's lock exclusively until it commits, and gets its xid
//     (the Major of its positions) only once it holds it;
//   - ReadTagged holds the query's tags' locks shared while it reads, so
//     no matching append is in flight then, and reads with a snapshot
//     taken after the locks were granted: it sees every matching event
//     committed, and every matching append after it gets an xid at or
//     above the snapshot's xmax. The position it returns, (xmax-1, max),
//     is therefore after everything it saw and before everything it did
//     not;
//   - a conditional append, under its locks, fails when a matching event
//     of its tenant sits after that position: its candidates are the rows
//     of event_tags of the query's tags after it (conditionFailsSQL).

var _ eventstore.TagReader = (*Store)(nil)

// errCondition marks a member whose append condition failed.
var errCondition = errors.New("append condition failed")

// tagLock is the lock name of a tenant's tag; stream locks are
// tenant + "/" + stream, and a tenant ID holds neither '/' nor '#'.
func tagLock(tenant, tag string) string { return tenant + "#" + tag }

// condition is an append condition as the statements bind it: typed
// columns, so that nothing of it is parsed from JSON per append but the
// query's items, which only a candidate event is matched against.
type condition struct {
	items []byte // the query, a jsonb array of {types, tags}
	tx    string // the position's Major, decimal (an xid8)
	pos   int64  // the position's Minor
	tags  string // the query's tags, joined by tagSeparator
}

// tagSeparator joins a condition's tags in one text value: no valid tag
// holds a control character (event.ValidTag).
const tagSeparator = "\x1f"

// encodeCondition validates and encodes c (nil for none).
func encodeCondition(c *eventstore.AppendCondition) (*condition, error) {
	if c == nil {
		return nil, nil
	}
	if err := c.Query.Validate(); err != nil {
		return nil, fmt.Errorf("%w: condition: %w", ErrInvalidAppend, err)
	}
	if c.After.Minor > math.MaxInt64 {
		return nil, fmt.Errorf("%w: condition position %s", ErrInvalidAppend, c.After)
	}
	items, err := json.Marshal(c.Query)
	if err != nil {
		return nil, err
	}
	return &condition{items: items, tx: strconv.FormatUint(c.After.Major, 10), pos: int64(c.After.Minor),
		tags: strings.Join(c.Query.Tags(), tagSeparator)}, nil
}

// matchingSQL is the predicate "event e matches one of the items of the
// query $q" ($q: jsonb array of {types, tags}).
const matchingSQL = `e.metadata ? 'tags' AND EXISTS (
    SELECT 1 FROM jsonb_array_elements(%[1]s) AS it(item)
    WHERE e.metadata->'tags' @> (it.item->'tags')
      AND (NOT it.item ? 'types' OR e.event_type IN (SELECT jsonb_array_elements_text(it.item->'types'))))`

// tagCandidatesSQL is the rows of event_tags of tenant $1 carrying one of
// the tags %[1]s (text[]) and satisfying %[2]s: one index probe per tag
// (t.tag = q.tag), in every plan. "t.tag = ANY (tags)" gave generic
// plans, made while event_tags was small, that scanned the tenant's whole
// range of event_tags and filtered the tags, so a tagged read cost the
// tenant's every tagged event (1,223 rows read for none returned, more as
// the run went on: auto_explain under the conditional bench). OFFSET 0
// keeps the lateral subquery from being flattened into a join, whose plan
// would again depend on the table's size when it was made.
const tagCandidatesSQL = `SELECT c.tx_id, c.position FROM unnest(%[1]s) AS q(tag)
        CROSS JOIN LATERAL (
            SELECT t.tx_id, t.position FROM event_tags t
            WHERE t.tenant_id = $1 AND t.tag = q.tag%[2]s OFFSET 0) AS c`

// conditionFailsSQL is true when an event of tenant $1 matching the
// condition's items %[1]s (jsonb) sits after the condition's position.
// Its candidates are the rows of event_tags of the condition's tags after
// the position, an index range per tag that holds only the events that
// could match, however busy the tenant (scanning the tenant's log after
// the position read every event appended since, tagged or not, and
// matched each).
// %[2]s, %[3]s and %[4]s (conditionAfterSQL) are plain columns of a
// materialized row, never expressions of the condition: under row-level
// security only leakproof operators are index conditions, and ->> and the
// casts are not.
var conditionFailsSQL = `EXISTS (
    SELECT 1 FROM events e
    WHERE e.tenant_id = $1
      AND (e.tx_id, e.position) IN (` + fmt.Sprintf(tagCandidatesSQL, "%[4]s", " AND (t.tx_id, t.position) > (%[2]s, %[3]s)") + `)
      AND ` + fmt.Sprintf(matchingSQL, "%[1]s") + `)`

// conditionAfterSQL are a condition's position (%[1]s, %[2]s) and tags
// (%[3]s, joined by tagSeparator) as the columns conditionFailsSQL
// compares with.
const conditionAfterSQL = `%[1]s::xid8 AS after_tx, %[2]s AS after_pos,
    string_to_array(%[3]s, E'\x1f') AS after_tags`

// readTaggedLockSQL takes the query's tags' locks shared, in the order
// every append takes locks (groupLockSQL), and the tenant; and, as
// groupLockSQL does, makes the read that follows run its generic plan:
// under the default plan cache mode PostgreSQL kept planning
// readTaggedSQL afresh on every call (its generic plan's estimate looked
// worse than the custom plans'), and the planning cost ten times the
// execution (8 readers: 4,000 reads/s against 30,000 stream reads/s). Its
// last column is the horizon of its snapshot, taken before the locks
// were granted (ReadTagged).
const readTaggedLockSQL = `SELECT pg_advisory_xact_lock_shared(l.id), set_config('` + db.TenantSetting + `', $2, true),
    set_config('plan_cache_mode', 'force_generic_plan', true), ` + horizonSQL + `
FROM (SELECT DISTINCT hashtextextended(k, 0) AS id FROM unnest($1::text[]) AS k ORDER BY 1) AS l`

// horizonSQL is the xmax of the statement's snapshot: every transaction
// visible to it has a smaller xid, and every transaction that gets an
// xid after it was taken gets this one or a larger one.
const horizonSQL = `pg_snapshot_xmax(pg_current_snapshot())::text AS horizon`

// readTaggedSQL finds the events carrying the query's tags ($3) through
// event_tags (migration 024: text equality, usable under row-level
// security), then keeps those matching an item ($2).
var readTaggedSQL = `SELECT ` + selectColumns + `, ` + horizonSQL + ` FROM events e
WHERE e.tenant_id = $1
  AND (e.tx_id, e.position) IN (` + fmt.Sprintf(tagCandidatesSQL, "$3::text[]", "") + `)
  AND ` + fmt.Sprintf(matchingSQL, "$2::jsonb") + `
ORDER BY e.tx_id, e.position`

// ReadTagged implements eventstore.TagReader.
func (s *Store) ReadTagged(ctx context.Context, tenant string, q event.Query) ([]event.Record, event.Position, error) {
	if tenant == "" {
		return nil, event.Position{}, eventstore.ErrNoTenant
	}
	if err := q.Validate(); err != nil {
		return nil, event.Position{}, fmt.Errorf("%w: %w", ErrInvalidAppend, err)
	}
	items, err := json.Marshal(q)
	if err != nil {
		return nil, event.Position{}, err
	}
	tags := q.Tags()
	locks := make([]string, len(tags))
	for i, t := range tags {
		locks[i] = tagLock(tenant, t)
	}
	// One pipelined batch, one implicit transaction (the locks last until
	// its end), two statements and so two snapshots under READ
	// COMMITTED: the locks', taken before they are granted, and the
	// read's, taken once they are held. The position is the read's
	// horizon less one, or, when it returns nothing, the locks': every
	// matching append takes a tag's lock before it has an xid, so one
	// that held it when the locks were asked for had committed by the
	// read (which saw it), and one that takes it later gets an xid past
	// both horizons.
	b := &pgx.Batch{}
	b.Queue(readTaggedLockSQL, locks, tenant)
	b.Queue(readTaggedSQL, tenant, items, tags)
	br := s.app.SendBatch(ctx, b)
	recs, horizon, err := readTaggedResults(br)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, event.Position{}, translate("read tagged events", err)
	}
	xmax, err := strconv.ParseUint(horizon, 10, 64)
	if err != nil || xmax == 0 {
		return nil, event.Position{}, fmt.Errorf("read tagged events: snapshot xmax %q", horizon)
	}
	return recs, event.Position{Major: xmax - 1, Minor: math.MaxInt64}, nil
}

// readTaggedResults reads ReadTagged's batch: the records, and the read's
// horizon, or the locks' when the read returned no row.
func readTaggedResults(br pgx.BatchResults) (recs []event.Record, horizon string, err error) {
	rows, err := br.Query()
	if err != nil {
		return nil, "", err
	}
	for rows.Next() {
		if err := rows.Scan(nil, nil, nil, &horizon); err != nil {
			rows.Close()
			return nil, "", err
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, "", err
	}
	if rows, err = br.Query(); err != nil {
		return nil, "", err
	}
	if recs, err = scanRecords(rows, 0, &horizon); err != nil {
		return nil, "", err
	}
	return recs, horizon, nil
}

// appendGuarded appends a request that takes tag locks, alone: a group of
// one, whose statements take a set of locks and check conditions.
func (s *Store) appendGuarded(ctx context.Context, req eventstore.AppendRequest, enc encoded) (eventstore.AppendResult, error) {
	p := &pending{ctx: ctx, req: req, enc: enc}
	outcome, err := s.appendGroup(ctx, []*pending{p}, nil)
	if outcome == groupCommitted {
		return p.res, p.err
	}
	return eventstore.AppendResult{}, translate(p.op(), err)
}
