package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
)

// Store implements eventstore.Store, eventstore.Log and
// eventstore.IdempotencyStore on PostgreSQL.
type Store struct {
	app       *pgxpool.Pool // runs as db.RoleApp: tenant-scoped
	projector *pgxpool.Pool // runs as db.RoleProjector: global log
	onAppend  func()
	group     *grouper // nil: group commit off
}

var (
	_ eventstore.Store            = (*Store)(nil)
	_ eventstore.Log              = (*Store)(nil)
	_ eventstore.IdempotencyStore = (*Store)(nil)
	_ eventstore.TenantLog        = (*Store)(nil)
)

// Option configures a Store.
type Option func(*Store)

// WithAppendHook calls fn after every committed append, e.g. to wake
// projection runners in this process without waiting for a poll.
func WithAppendHook(fn func()) Option { return func(s *Store) { s.onAppend = fn } }

// New returns a store whose tenant-scoped operations use app (a pool opened
// with db.RoleApp) and whose global-log reads use projector (db.RoleProjector).
// projector may be nil for a process that never reads the global log.
func New(app, projector *pgxpool.Pool, opts ...Option) *Store {
	s := &Store{app: app, projector: projector}
	for _, o := range opts {
		o(s)
	}
	if s.group != nil {
		s.group.s = s
	}
	return s
}

// appendSQL checks the expected version and inserts every event in one
// statement. It runs after the stream lock is held, and under READ
// COMMITTED each statement takes a fresh snapshot, so max(version) sees
// every append committed before ours took the lock. Zero rows back means
// the expectation failed.
const appendSQL = `
WITH cur AS (
    SELECT coalesce(max(version), 0) AS v
    FROM events WHERE tenant_id = $1 AND stream_id = $2
)
INSERT INTO events (tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata)
SELECT $1, $2, cur.v + e.ord, e.id::uuid, e.typ, e.sv, e.data::jsonb, e.meta::jsonb
FROM cur, unnest($4::text[], $5::text[], $6::int[], $7::text[], $8::text[])
    WITH ORDINALITY AS e(id, typ, sv, data, meta, ord)
WHERE CASE $3::bigint
    WHEN -1 THEN true
    WHEN -2 THEN cur.v = 0
    WHEN -3 THEN cur.v > 0
    ELSE cur.v = $3::bigint
END
RETURNING version, tx_id::text AS tx_text, position`

// lockSQL serialises appends to one stream. It must be the first statement
// that could touch a row: it takes no transaction id, so the append's xid is
// assigned after the lock is held and versions of one stream are ordered by
// xid exactly as by version (the global log's per-stream order).
//
// The tenant setting rides in the same statement (one round of parse,
// bind and execute less per append); it takes no transaction id either.
const lockSQL = `SELECT set_config('` + db.TenantSetting + `', $1, true), pg_advisory_xact_lock(hashtextextended($2, 0))`

// appendOneSQL is appendSQL for the common single-event append, with
// scalar parameters instead of arrays to unnest.
const appendOneSQL = `
WITH cur AS (
    SELECT coalesce(max(version), 0) AS v
    FROM events WHERE tenant_id = $1 AND stream_id = $2
)
INSERT INTO events (tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata)
SELECT $1, $2, cur.v + 1, $4::uuid, $5, $6, $7::jsonb, $8::jsonb
FROM cur
WHERE CASE $3::bigint
    WHEN -1 THEN true
    WHEN -2 THEN cur.v = 0
    WHEN -3 THEN cur.v > 0
    ELSE cur.v = $3::bigint
END
RETURNING version, tx_id::text AS tx_text, position`

var uuidPattern = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// ErrInvalidAppend is returned for a request the store cannot accept as is.
var ErrInvalidAppend = errors.New("invalid append request")

func validate(req eventstore.AppendRequest) error {
	switch {
	case req.Tenant == "":
		return eventstore.ErrNoTenant
	case req.Stream == "":
		return fmt.Errorf("%w: empty stream", ErrInvalidAppend)
	case len(req.Events) == 0:
		return fmt.Errorf("%w: no events", ErrInvalidAppend)
	case !req.Expected.Valid():
		return fmt.Errorf("%w: expected version %d", ErrInvalidAppend, req.Expected)
	}
	for _, e := range req.Events {
		if !uuidPattern.MatchString(e.ID) {
			return fmt.Errorf("%w: event id %q is not a UUID", ErrInvalidAppend, e.ID)
		}
		if e.Type == "" || e.SchemaVersion < 1 {
			return fmt.Errorf("%w: event type and schema version are required", ErrInvalidAppend)
		}
	}
	return nil
}

// Append implements eventstore.Store. With group commit on
// (WithGroupCommit), concurrent appends share a transaction (group.go);
// otherwise, and for an append that finds no other in flight, it runs in
// a transaction of its own.
func (s *Store) Append(ctx context.Context, req eventstore.AppendRequest) (eventstore.AppendResult, error) {
	if err := validate(req); err != nil {
		return eventstore.AppendResult{}, err
	}
	enc, err := encode(req)
	if err != nil {
		return eventstore.AppendResult{}, err
	}
	var res eventstore.AppendResult
	if s.group != nil {
		res, err = s.group.append(ctx, req, enc)
	} else {
		res, err = s.appendAlone(ctx, req, enc)
	}
	if err != nil {
		return eventstore.AppendResult{}, err
	}
	if s.onAppend != nil {
		s.onAppend()
	}
	return res, nil
}

// encoded holds an append's events as the columns the statements bind.
type encoded struct {
	ids, types, datas, metas []string
	svs                      []int32
	// locks names the tag locks the append takes beside its stream's:
	// its events' tags and its condition's (condition.go).
	locks []string
	// cond is the condition as the statements bind it, nil for none.
	cond *condition
}

// guarded reports whether the append takes tag locks (its events carry
// tags or it has a condition): it then runs through the group statements,
// which take a set of locks, even alone.
func (e encoded) guarded() bool { return len(e.locks) > 0 }

func encode(req eventstore.AppendRequest) (encoded, error) {
	n := len(req.Events)
	enc := encoded{ids: make([]string, n), types: make([]string, n), datas: make([]string, n), metas: make([]string, n), svs: make([]int32, n)}
	var tags []string
	for i, e := range req.Events {
		if len(e.Metadata.Tags) > 0 {
			norm, err := event.NormalizeTags(e.Metadata.Tags)
			if err != nil {
				return encoded{}, fmt.Errorf("%w: %s: %w", ErrInvalidAppend, req.Stream, err)
			}
			e.Metadata.Tags = norm
			tags = append(tags, norm...)
		}
		meta, err := json.Marshal(e.Metadata)
		if err != nil {
			return encoded{}, fmt.Errorf("append %s: encode metadata: %w", req.Stream, err)
		}
		enc.ids[i], enc.types[i], enc.svs[i], enc.datas[i], enc.metas[i] = e.ID, e.Type, int32(e.SchemaVersion), string(e.Data), string(meta)
	}
	if req.Condition != nil {
		cond, err := encodeCondition(req.Condition)
		if err != nil {
			return encoded{}, err
		}
		enc.cond = cond
		tags = append(tags, req.Condition.Query.Tags()...)
	}
	slices.Sort(tags)
	for _, t := range slices.Compact(tags) {
		enc.locks = append(enc.locks, tagLock(req.Tenant, t))
	}
	return enc, nil
}

// appendAlone appends one request in a transaction of its own. Its errors
// are the port's (translated).
func (s *Store) appendAlone(ctx context.Context, req eventstore.AppendRequest, enc encoded) (eventstore.AppendResult, error) {
	if enc.guarded() {
		return s.appendGuarded(ctx, req, enc)
	}
	sql, args := appendSQL, []any{req.Tenant, req.Stream, int64(req.Expected), enc.ids, enc.types, enc.svs, enc.datas, enc.metas}
	if len(enc.ids) == 1 {
		sql, args = appendOneSQL, []any{req.Tenant, req.Stream, int64(req.Expected), enc.ids[0], enc.types[0], enc.svs[0], enc.datas[0], enc.metas[0]}
	}
	var res eventstore.AppendResult
	var err error
	if req.Idempotency == nil {
		res, err = s.appendPipelined(ctx, req, sql, args)
	} else {
		res, err = s.appendWithIdempotency(ctx, req, sql, args)
	}
	if err != nil {
		return eventstore.AppendResult{}, translate(fmt.Sprintf("append %s", req.Stream), err)
	}
	return res, nil
}

// appendPipelined sends tenant, lock and insert in one round trip; the
// pipeline runs as one implicit transaction that commits at its Sync.
func (s *Store) appendPipelined(ctx context.Context, req eventstore.AppendRequest, sql string, args []any) (eventstore.AppendResult, error) {
	b := &pgx.Batch{}
	b.Queue(lockSQL, req.Tenant, req.Tenant+"/"+req.Stream)
	b.Queue(sql, args...)
	br := s.app.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return eventstore.AppendResult{}, err
	}
	rows, err := br.Query()
	if err != nil {
		return eventstore.AppendResult{}, err
	}
	res, err := scanAppended(rows, len(req.Events))
	if err != nil {
		return eventstore.AppendResult{}, err
	}
	if err := br.Close(); err != nil { // commit happens here
		return eventstore.AppendResult{}, err
	}
	return res, nil
}

// appendWithIdempotency appends and records the command's outcome under its
// key in one explicit transaction. A concurrent duplicate blocks on the
// key's unique index until the first commits, then fails with a unique
// violation and rolls back its events: the command executes once.
func (s *Store) appendWithIdempotency(ctx context.Context, req eventstore.AppendRequest, sql string, args []any) (eventstore.AppendResult, error) {
	var res eventstore.AppendResult
	err := pgx.BeginTxFunc(ctx, s.app, pgx.TxOptions{}, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue(lockSQL, req.Tenant, req.Tenant+"/"+req.Stream)
		b.Queue(sql, args...)
		br := tx.SendBatch(ctx, b)
		if _, err := br.Exec(); err != nil {
			br.Close()
			return err
		}
		rows, err := br.Query()
		if err != nil {
			br.Close()
			return err
		}
		if res, err = scanAppended(rows, len(req.Events)); err != nil {
			br.Close()
			return err
		}
		if err := br.Close(); err != nil {
			return err
		}
		resp, err := req.Idempotency.Response(res)
		if err != nil {
			return fmt.Errorf("build idempotent response: %w", err)
		}
		_, err = tx.Exec(ctx, `INSERT INTO idempotency_keys (tenant_id, key, request_hash, response) VALUES ($1, $2, $3, $4)`,
			req.Tenant, req.Idempotency.Key, req.Idempotency.RequestHash, resp)
		return err
	})
	return res, err
}

func scanAppended(rows pgx.Rows, want int) (eventstore.AppendResult, error) {
	var res eventstore.AppendResult
	count := 0
	for rows.Next() {
		var version, pos int64
		var tx string
		if err := rows.Scan(&version, &tx, &pos); err != nil {
			return res, err
		}
		major, err := strconv.ParseUint(tx, 10, 64)
		if err != nil {
			return res, fmt.Errorf("parse tx id %q: %w", tx, err)
		}
		if count == 0 || version < res.FirstVersion {
			res.FirstVersion = version
		}
		if version > res.LastVersion {
			res.LastVersion = version
		}
		if p := (event.Position{Major: major, Minor: uint64(pos)}); res.Position.Less(p) {
			res.Position = p
		}
		count++
	}
	if err := rows.Err(); err != nil {
		return res, err
	}
	if count == 0 {
		return res, errExpectation
	}
	if count != want {
		return res, fmt.Errorf("appended %d of %d events", count, want)
	}
	return res, nil
}

var errExpectation = errors.New("expected version not satisfied")

// translate maps driver errors onto the port's errors. Database text never
// leaves this function inside a port error; the wrapped original stays
// available to logs through errors.Unwrap chains of non-port errors.
func translate(op string, err error) error {
	switch {
	case errors.Is(err, errExpectation):
		return fmt.Errorf("%s: %w", op, eventstore.ErrVersionConflict)
	case errors.Is(err, errCondition):
		return fmt.Errorf("%s: %w", op, eventstore.ErrConditionFailed)
	case db.SQLState(err) == "23505":
		switch db.ConstraintName(err) {
		case "idempotency_keys_pkey":
			return fmt.Errorf("%s: %w", op, eventstore.ErrIdempotencyKeyExists)
		case "events_stream_version":
			return fmt.Errorf("%s: %w", op, eventstore.ErrVersionConflict)
		case "events_event_id":
			return fmt.Errorf("%s: %w: an event with this id is already stored", op, eventstore.ErrVersionConflict)
		}
	case db.SQLState(err) == "SF001": // refuse_frozen_writes (migration 014)
		return fmt.Errorf("%s: %w", op, eventstore.ErrWritesFrozen)
	case db.IsUnavailable(err):
		return fmt.Errorf("%s: %w: %w", op, eventstore.ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// selectColumns returns tx_id as text (pgx has no xid8 type) under another
// name: an output column named tx_id would capture ORDER BY tx_id and sort
// the log as text, "1000" before "999".
const selectColumns = `position, tx_id::text AS tx_text, tenant_id, stream_id, version, event_id::text, event_type, schema_version, data, metadata, recorded_at`

// ReadStream implements eventstore.Store.
func (s *Store) ReadStream(ctx context.Context, tenant, stream string, after int64) ([]event.Record, error) {
	if tenant == "" {
		return nil, eventstore.ErrNoTenant
	}
	b := &pgx.Batch{}
	b.Queue(db.SetTenantSQL, tenant)
	b.Queue(`SELECT `+selectColumns+` FROM events
		WHERE tenant_id = $1 AND stream_id = $2 AND version > $3 ORDER BY version`, tenant, stream, after)
	br := s.app.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, translate("read stream "+stream, err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, translate("read stream "+stream, err)
	}
	recs, err := scanRecords(rows, 0)
	if err != nil {
		return nil, translate("read stream "+stream, err)
	}
	return recs, nil
}

// readAllSQL is the never-skipping cursor. The bound and the rows come from
// one statement, hence one snapshot: every transaction with an xid below
// pg_snapshot_xmin has ended, and no new transaction can get an xid below
// it, so the rows returned are final and nothing can later appear behind
// the cursor. Marten's worst skip bug came from computing such a bound in a
// separate statement with its own snapshot.
const readAllSQL = `SELECT ` + selectColumns + ` FROM events
WHERE (tx_id, position) > ($1::text::xid8, $2::bigint)
  AND tx_id < pg_snapshot_xmin(pg_current_snapshot())
ORDER BY events.tx_id, events.position
LIMIT $3`

// ReadAll implements eventstore.Log.
func (s *Store) ReadAll(ctx context.Context, after event.Position, limit int) ([]event.Record, error) {
	if s.projector == nil {
		return nil, errors.New("read all: store opened without a projector pool")
	}
	if limit <= 0 {
		limit = 500
	}
	rows, err := s.projector.Query(ctx, readAllSQL, strconv.FormatUint(after.Major, 10), int64(after.Minor), limit)
	if err != nil {
		return nil, translate("read all", err)
	}
	recs, err := scanRecords(rows, limit)
	if err != nil {
		return nil, translate("read all", err)
	}
	return recs, nil
}

const readTenantSQL = `SELECT ` + selectColumns + ` FROM events
WHERE tenant_id = $1 AND (tx_id, position) > ($2::text::xid8, $3::bigint)
  AND tx_id < pg_snapshot_xmin(pg_current_snapshot())
ORDER BY events.tx_id, events.position
LIMIT $4`

// ReadTenant implements eventstore.TenantLog through the index
// events_tenant_log (tenant_id, tx_id, position), under the same horizon
// as ReadAll.
func (s *Store) ReadTenant(ctx context.Context, tenant string, after event.Position, limit int) ([]event.Record, error) {
	if s.projector == nil {
		return nil, errors.New("read tenant: store opened without a projector pool")
	}
	if limit <= 0 {
		limit = 500
	}
	rows, err := s.projector.Query(ctx, readTenantSQL, tenant, strconv.FormatUint(after.Major, 10), int64(after.Minor), limit)
	if err != nil {
		return nil, translate("read tenant", err)
	}
	recs, err := scanRecords(rows, limit)
	if err != nil {
		return nil, translate("read tenant", err)
	}
	return recs, nil
}

// TenantLag counts tenant's events after `after`, through the index of
// the log by tenant.
func (s *Store) TenantLag(ctx context.Context, tenant string, after event.Position) (int64, error) {
	if s.projector == nil {
		return 0, errors.New("tenant lag: store opened without a projector pool")
	}
	var n int64
	if err := s.projector.QueryRow(ctx, `SELECT count(*) FROM events WHERE tenant_id = $1 AND (tx_id, position) > ($2::text::xid8, $3::bigint)`,
		tenant, strconv.FormatUint(after.Major, 10), int64(after.Minor)).Scan(&n); err != nil {
		return 0, translate("tenant lag", err)
	}
	return n, nil
}

// Head implements eventstore.Log.
func (s *Store) Head(ctx context.Context) (event.Position, error) {
	if s.projector == nil {
		return event.Position{}, errors.New("head: store opened without a projector pool")
	}
	var tx string
	var pos int64
	err := s.projector.QueryRow(ctx, `SELECT tx_id::text AS tx_text, position FROM events
		WHERE tx_id < pg_snapshot_xmin(pg_current_snapshot())
		ORDER BY events.tx_id DESC, events.position DESC LIMIT 1`).Scan(&tx, &pos)
	if errors.Is(err, pgx.ErrNoRows) {
		return event.Position{}, nil
	}
	if err != nil {
		return event.Position{}, translate("head", err)
	}
	major, err := strconv.ParseUint(tx, 10, 64)
	if err != nil {
		return event.Position{}, fmt.Errorf("head: parse tx id: %w", err)
	}
	return event.Position{Major: major, Minor: uint64(pos)}, nil
}

// LastCommitted returns the position of the newest committed event, also
// when an older transaction is still open and Head stops short of it: no
// append this store acknowledged is beyond it. The query API refuses
// consistency tokens beyond it (they were never handed out); Head would
// refuse genuine ones while a long transaction holds the horizon back.
func (s *Store) LastCommitted(ctx context.Context) (event.Position, error) {
	if s.projector == nil {
		return event.Position{}, errors.New("last committed: store opened without a projector pool")
	}
	var tx string
	var pos int64
	err := s.projector.QueryRow(ctx, `SELECT tx_id::text AS tx_text, position FROM events
		ORDER BY events.tx_id DESC, events.position DESC LIMIT 1`).Scan(&tx, &pos)
	if errors.Is(err, pgx.ErrNoRows) {
		return event.Position{}, nil
	}
	if err != nil {
		return event.Position{}, translate("last committed", err)
	}
	major, err := strconv.ParseUint(tx, 10, 64)
	if err != nil {
		return event.Position{}, fmt.Errorf("last committed: parse tx id: %w", err)
	}
	return event.Position{Major: major, Minor: uint64(pos)}, nil
}

// LogEnd is the end of the log for the check of checkpoints beyond it
// (projections.RunnerConfig.LogEnd): the newest committed event, or the
// log_watermark a purge of a tenant's events left (migration 014) when
// that is later, so that deleting the newest events never makes the
// runners' checkpoints look ahead of the log.
func (s *Store) LogEnd(ctx context.Context) (event.Position, error) {
	end, err := s.LastCommitted(ctx)
	if err != nil {
		return end, err
	}
	var major string
	var minor int64
	err = s.projector.QueryRow(ctx, `SELECT pos_major::text, pos_minor FROM log_watermark`).Scan(&major, &minor)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return end, nil
	case err != nil:
		return end, translate("log end", err)
	}
	m, err := strconv.ParseUint(major, 10, 64)
	if err != nil {
		return end, fmt.Errorf("log end: parse the watermark: %w", err)
	}
	if mark := (event.Position{Major: m, Minor: uint64(minor)}); end.Less(mark) {
		return mark, nil
	}
	return end, nil
}

// Lag counts the events a reader at after has not seen yet and returns the
// recording time of the oldest of them (zero when there are none). It also
// counts events not yet visible because an older transaction is still
// open: that is exactly the lag an operator needs to see.
func (s *Store) Lag(ctx context.Context, after event.Position) (events int64, oldest time.Time, err error) {
	if s.projector == nil {
		return 0, time.Time{}, errors.New("lag: store opened without a projector pool")
	}
	var at *time.Time
	err = s.projector.QueryRow(ctx, `SELECT count(*), min(recorded_at) FROM events
		WHERE (tx_id, position) > ($1::text::xid8, $2::bigint)`,
		strconv.FormatUint(after.Major, 10), int64(after.Minor)).Scan(&events, &at)
	if err != nil {
		return 0, time.Time{}, translate("lag", err)
	}
	if at != nil {
		oldest = *at
	}
	return events, oldest, nil
}

// scanRecords reads rows of selectColumns, then of the extra columns
// scanned into extra (overwritten row after row).
func scanRecords(rows pgx.Rows, sizeHint int, extra ...any) ([]event.Record, error) {
	defer rows.Close()
	out := make([]event.Record, 0, min(sizeHint, 10_000))
	for rows.Next() {
		var r event.Record
		var pos int64
		var tx string
		var data, meta []byte
		var sv int32
		// The payload into bytes, not into json.RawMessage: that would go
		// through encoding/json, which validates what jsonb holds valid
		// already (a third of a log read's time, measured).
		if err := rows.Scan(append([]any{&pos, &tx, &r.Tenant, &r.Stream, &r.Version, &r.ID, &r.Type, &sv, &data, &meta, &r.RecordedAt}, extra...)...); err != nil {
			return nil, err
		}
		r.Data = data
		major, err := strconv.ParseUint(tx, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("parse tx id %q: %w", tx, err)
		}
		r.Position = event.Position{Major: major, Minor: uint64(pos)}
		r.SchemaVersion = int(sv)
		if r.Metadata, err = event.DecodeMetadata(meta); err != nil {
			return nil, fmt.Errorf("decode metadata of %s/%d: %w", r.Stream, r.Version, err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// LookupIdempotency implements eventstore.IdempotencyStore.
func (s *Store) LookupIdempotency(ctx context.Context, tenant, key string) (eventstore.IdempotencyRecord, bool, error) {
	if tenant == "" {
		return eventstore.IdempotencyRecord{}, false, eventstore.ErrNoTenant
	}
	b := &pgx.Batch{}
	b.Queue(db.SetTenantSQL, tenant)
	b.Queue(`SELECT request_hash, response, created_at FROM idempotency_keys WHERE tenant_id = $1 AND key = $2`, tenant, key)
	rec, found, err := func() (eventstore.IdempotencyRecord, bool, error) {
		br := s.app.SendBatch(ctx, b)
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return eventstore.IdempotencyRecord{}, false, err
		}
		var rec eventstore.IdempotencyRecord
		err := br.QueryRow().Scan(&rec.RequestHash, &rec.Response, &rec.CreatedAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return eventstore.IdempotencyRecord{}, false, nil
		}
		return rec, err == nil, err
	}()
	if err != nil {
		return eventstore.IdempotencyRecord{}, false, translate("lookup idempotency key", err)
	}
	if !found {
		return rec, false, nil
	}
	// The record is about to be answered as the command's outcome. It may
	// be visible before it is durable: when the first attempt's client
	// gave up while its COMMIT waited for the synchronous standby, pgx
	// cancelled the wait and PostgreSQL kept the commit, locally only. A
	// failover then takes it back, and a replay would have acknowledged a
	// lost command (db.CommitBarrier). Answer once it is as durable as a
	// commit of our own; while no standby answers, the retry gets 503 as
	// its first attempt did.
	if err := db.CommitBarrier(ctx, s.app); err != nil {
		return eventstore.IdempotencyRecord{}, false, translate("lookup idempotency key: wait until the record is durable", err)
	}
	return rec, true, nil
}

// SaveIdempotency implements eventstore.IdempotencyStore.
func (s *Store) SaveIdempotency(ctx context.Context, tenant, key, requestHash string, response []byte) error {
	if tenant == "" {
		return eventstore.ErrNoTenant
	}
	b := &pgx.Batch{}
	b.Queue(db.SetTenantSQL, tenant)
	b.Queue(`INSERT INTO idempotency_keys (tenant_id, key, request_hash, response) VALUES ($1, $2, $3, $4)`,
		tenant, key, requestHash, response)
	br := s.app.SendBatch(ctx, b)
	defer br.Close()
	for i := 0; i < 2; i++ {
		if _, err := br.Exec(); err != nil {
			return translate("save idempotency key", err)
		}
	}
	return translate0("save idempotency key", br.Close())
}

func translate0(op string, err error) error {
	if err == nil {
		return nil
	}
	return translate(op, err)
}
