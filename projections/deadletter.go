package projections

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
)

// The dead-letter store (migration 004_dead_letters; ARCHITECTURE decision
// 5). A parked stream has a row in parked_streams; each event of it the
// projection did not apply has a row in dead_letters, in stream order. Rows
// belong to a projection's generation (projection_checkpoints.generation):
// a rebuild parks into a generation of its own, which its swap makes the
// live one.
//
// Everything that changes which streams are parked (parking, retrying,
// discarding) runs under the projection's lease: the runner itself, or a
// tool holding an Exclusive. So the runner can trust what it read about
// parked streams for as long as it holds the lease. A writer without a
// runner (a broker-fed consumer) parks in transactions that hold its key's
// pause lock in shared mode instead (park.go), which an Exclusive excludes.

// LetterStatus is a dead letter's state.
type LetterStatus string

// Dead-letter states (docs/replay.md).
const (
	LetterParked     LetterStatus = "parked"     // waiting: retried by the runner while attempts remain, then by an operator
	LetterRetried    LetterStatus = "retried"    // applied by a retry
	LetterDiscarded  LetterStatus = "discarded"  // never to be applied; who and why are recorded
	LetterSuperseded LetterStatus = "superseded" // replaced by a rebuild of its tenant, which re-applied the event
)

// DeadLetter is an event a projection did not apply.
type DeadLetter struct {
	ID         int64
	Tenant     string
	Projection string
	Generation string
	// Event is the event as stored in the log (payload undecoded).
	Event event.Record
	// Error is the last failure of the event, or, for an event parked
	// behind its stream's head, why it was parked.
	Error string
	// Attempts counts the failed attempts to apply the event (0: parked
	// behind an earlier event of its stream, never tried).
	Attempts                    int
	FirstFailedAt, LastFailedAt time.Time // zero when never tried
	ParkedAt                    time.Time
	// NextAttemptAt is when the runner retries the letter's stream next
	// (set only on a stream's head while automatic attempts remain).
	NextAttemptAt time.Time
	// Head reports whether this is its stream's first parked letter.
	Head       bool
	Status     LetterStatus
	ResolvedAt time.Time
	ResolvedBy string
	Reason     string
}

// LetterFilter selects dead letters of one tenant.
type LetterFilter struct {
	// Projections restricts to these projections (all when empty).
	Projections []string
	// Stream restricts to one stream.
	Stream string
	// Statuses restricts to these states (all when empty). Parked letters
	// are listed only for their projection's current generation; letters
	// of a generation a full rebuild replaced keep the state they had.
	Statuses []LetterStatus
	// AfterID and Limit page through the letters in ID order (Limit 0: 100).
	AfterID int64
	Limit   int
	// ID, when set, selects that one letter whatever its state and
	// generation.
	ID int64
}

const letterColumns = `d.id, d.tenant_id, d.projection, d.generation::text, d.stream_id, d.version, d.event_id::text,
       d.pos_major::text, d.pos_minor::text, d.event_type, d.schema_version, d.data, d.metadata, d.recorded_at,
       d.error, d.attempts, d.first_failed_at, d.last_failed_at, d.parked_at, p.next_attempt_at, p.head_version IS NOT NULL,
       d.status, d.resolved_at, coalesce(d.resolved_by, ''), coalesce(d.reason, '')`

const letterFrom = `dead_letters d
LEFT JOIN parked_streams p ON p.tenant_id = d.tenant_id AND p.projection = d.projection AND p.generation = d.generation
    AND p.stream_id = d.stream_id AND p.head_version = d.version AND d.status = 'parked'`

func scanLetter(row pgx.Row) (DeadLetter, error) {
	var l DeadLetter
	var major, minor, status string
	var data, meta []byte
	var first, last, next, resolved *time.Time
	var sv int32
	err := row.Scan(&l.ID, &l.Tenant, &l.Projection, &l.Generation, &l.Event.Stream, &l.Event.Version, &l.Event.ID,
		&major, &minor, &l.Event.Type, &sv, &data, &meta, &l.Event.RecordedAt,
		&l.Error, &l.Attempts, &first, &last, &l.ParkedAt, &next, &l.Head,
		&status, &resolved, &l.ResolvedBy, &l.Reason)
	if err != nil {
		return l, err
	}
	l.Event.Tenant, l.Event.SchemaVersion, l.Event.Data, l.Status = l.Tenant, int(sv), data, LetterStatus(status)
	if l.Event.Position, err = event.ParseColumns(major, minor); err != nil {
		return l, err
	}
	if err := json.Unmarshal(meta, &l.Event.Metadata); err != nil {
		return l, fmt.Errorf("dead letter %d: metadata: %w", l.ID, err)
	}
	for _, t := range []struct {
		dst *time.Time
		src *time.Time
	}{{&l.FirstFailedAt, first}, {&l.LastFailedAt, last}, {&l.NextAttemptAt, next}, {&l.ResolvedAt, resolved}} {
		if t.src != nil {
			*t.dst = *t.src
		}
	}
	return l, nil
}

// BatchSender is what reading under a tenant's setting needs: a pool, a
// connection or a transaction, as db.RoleProjector or db.RoleApp.
type BatchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

func statusStrings(ss []LetterStatus) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return out
}

// ReadDeadLetters returns the dead letters of each of tenants that match f,
// in ID order per tenant, at most f.Limit per tenant. The tenants are read
// in one pipelined round trip per 200, each under its own setting, so
// row-level security confines every read to its tenant.
func ReadDeadLetters(ctx context.Context, q BatchSender, tenants []string, f LetterFilter) ([]DeadLetter, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	projs := f.Projections
	if projs == nil {
		projs = []string{}
	}
	sql := `SELECT ` + letterColumns + ` FROM ` + letterFrom + `
JOIN projection_checkpoints c ON c.projection = d.projection
WHERE d.tenant_id = $1 AND (cardinality($2::text[]) = 0 OR d.projection = ANY($2::text[]))
  AND ($3 = '' OR d.stream_id = $3) AND (cardinality($4::text[]) = 0 OR d.status = ANY($4::text[]))
  AND d.id > $5 AND ($7::bigint = 0 OR d.id = $7) AND (d.status <> 'parked' OR d.generation = c.generation OR $7 <> 0)
ORDER BY d.id LIMIT $6`
	var out []DeadLetter
	for lo := 0; lo < len(tenants); lo += 200 {
		b := &pgx.Batch{}
		for _, t := range tenants[lo:min(lo+200, len(tenants))] {
			b.Queue(db.SetTenantSQL, t)
			b.Queue(sql, t, projs, f.Stream, statusStrings(f.Statuses), f.AfterID, f.Limit, f.ID).Query(func(rows pgx.Rows) error {
				for rows.Next() {
					l, err := scanLetter(rows)
					if err != nil {
						return err
					}
					out = append(out, l)
				}
				return rows.Err()
			})
		}
		if err := q.SendBatch(ctx, b).Close(); err != nil {
			return nil, fmt.Errorf("read dead letters: %w", err)
		}
	}
	return out, nil
}

// ErrLetterNotFound: no dead letter with that ID in the tenant.
var ErrLetterNotFound = errors.New("dead letter not found")

// ReadDeadLetter returns one dead letter of a tenant. Errors:
// ErrLetterNotFound (also for another tenant's letter).
func ReadDeadLetter(ctx context.Context, q BatchSender, tenant string, id int64) (DeadLetter, error) {
	b := &pgx.Batch{}
	b.Queue(db.SetTenantSQL, tenant)
	var l DeadLetter
	found := false
	b.Queue(`SELECT `+letterColumns+` FROM `+letterFrom+` WHERE d.tenant_id = $1 AND d.id = $2`, tenant, id).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var err error
			if l, err = scanLetter(rows); err != nil {
				return err
			}
			found = true
		}
		return rows.Err()
	})
	if err := q.SendBatch(ctx, b).Close(); err != nil {
		return l, fmt.Errorf("read dead letter %d: %w", id, err)
	}
	if !found {
		return l, fmt.Errorf("%w: %d", ErrLetterNotFound, id)
	}
	return l, nil
}

// ParkedStream is a stream a projection does not apply now.
type ParkedStream struct {
	Tenant, Projection, Generation, Stream string
	HeadVersion                            int64
	ParkedAt                               time.Time
	NextAttemptAt                          time.Time // zero: no automatic attempt left
}

// ReadParkedStreams returns the parked streams of each of tenants for the
// named projections' current generations (all projections when none are
// named), pipelined like ReadDeadLetters.
func ReadParkedStreams(ctx context.Context, q BatchSender, tenants []string, projections ...string) ([]ParkedStream, error) {
	if projections == nil {
		projections = []string{}
	}
	var out []ParkedStream
	for lo := 0; lo < len(tenants); lo += 200 {
		b := &pgx.Batch{}
		for _, t := range tenants[lo:min(lo+200, len(tenants))] {
			b.Queue(db.SetTenantSQL, t)
			b.Queue(`SELECT p.tenant_id, p.projection, p.generation::text, p.stream_id, p.head_version, p.parked_at, p.next_attempt_at
FROM parked_streams p JOIN projection_checkpoints c ON c.projection = p.projection AND c.generation = p.generation
WHERE p.tenant_id = $1 AND (cardinality($2::text[]) = 0 OR p.projection = ANY($2::text[]))
ORDER BY p.projection, p.parked_at, p.stream_id`, t, projections).Query(func(rows pgx.Rows) error {
				for rows.Next() {
					var s ParkedStream
					var next *time.Time
					if err := rows.Scan(&s.Tenant, &s.Projection, &s.Generation, &s.Stream, &s.HeadVersion, &s.ParkedAt, &next); err != nil {
						return err
					}
					if next != nil {
						s.NextAttemptAt = *next
					}
					out = append(out, s)
				}
				return rows.Err()
			})
		}
		if err := q.SendBatch(ctx, b).Close(); err != nil {
			return nil, fmt.Errorf("read parked streams: %w", err)
		}
	}
	return out, nil
}

// Tenants lists every tenant that has events in the log, in order. It
// reads as db.RoleProjector through the log's one cross-tenant policy
// (events_projector_read_all), one index probe per tenant (a skip scan of
// events_stream_version). With an event log outside PostgreSQL the events
// table is empty and the list is too.
func Tenants(ctx context.Context, q Querier) ([]string, error) {
	rows, err := q.Query(ctx, `WITH RECURSIVE t(tenant) AS (
    (SELECT tenant_id FROM events ORDER BY tenant_id LIMIT 1)
    UNION ALL
    SELECT (SELECT e.tenant_id FROM events e WHERE e.tenant_id > t.tenant ORDER BY e.tenant_id LIMIT 1)
    FROM t WHERE t.tenant IS NOT NULL)
SELECT tenant FROM t WHERE tenant IS NOT NULL`)
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	return out, nil
}

// Statements of parking, queued in a batch's transaction after the tenant
// is set. $1 tenant, $2 projection, $3 generation, $4 stream, $5 version,
// $6 event ID, $7/$8 position, $9 type, $10 schema version, $11 data, $12
// metadata, $13 recorded at, $14 error.
const (
	letterValues = `($1, $2, $3::uuid, $4, $5, $6::uuid, $7::text::numeric, $8::text::numeric, $9, $10, $11::jsonb, $12::jsonb, $13, $14`
	// parkHeadSQL stores a failed event and parks its stream; $15 is the
	// first automatic retry (NULL: none), $16 the failed attempts so far
	// (1 for a runner, which retries itself afterwards).
	parkHeadSQL = `WITH l AS (
    INSERT INTO dead_letters (tenant_id, projection, generation, stream_id, version, event_id, pos_major, pos_minor, event_type,
        schema_version, data, metadata, recorded_at, error, attempts, first_failed_at, last_failed_at)
    VALUES ` + letterValues + `, $16::int, now(), now())
    RETURNING 1)
INSERT INTO parked_streams (tenant_id, projection, generation, stream_id, head_version, next_attempt_at)
SELECT $1, $2, $3::uuid, $4, $5, $15 FROM l`
	// parkBehindSQL stores an event of a parked stream, never tried.
	parkBehindSQL = `INSERT INTO dead_letters (tenant_id, projection, generation, stream_id, version, event_id, pos_major, pos_minor, event_type,
    schema_version, data, metadata, recorded_at, error)
VALUES ` + letterValues + `)`
)

// behindText is the error recorded with an event parked behind its
// stream's head, never tried.
func behindText(head int64) string {
	return fmt.Sprintf("parked behind version %d of its stream, which this projection could not apply", head)
}

// maxErrorText bounds the error text kept with a dead letter.
const maxErrorText = 2000

func errorText(err error) string { return clipError(err.Error()) }

func clipError(msg string) string {
	if len(msg) > maxErrorText {
		msg = strings.ToValidUTF8(msg[:maxErrorText], "")
	}
	return msg
}

func letterArgs(projection, generation string, rec event.Record, errText string) ([]any, error) {
	meta, err := json.Marshal(rec.Metadata)
	if err != nil {
		return nil, fmt.Errorf("park %s v%d: metadata: %w", rec.Stream, rec.Version, err)
	}
	data := []byte(rec.Data)
	if len(data) == 0 {
		data = []byte("null")
	}
	return []any{rec.Tenant, projection, generation, rec.Stream, rec.Version, rec.ID, u64(rec.Position.Major), u64(rec.Position.Minor),
		rec.Type, int32(rec.SchemaVersion), data, meta, rec.RecordedAt, errText}, nil
}

// lookupParkedSQL answers, for some streams of one tenant, which are parked
// and from which version, and when they are retried next.
const lookupParkedSQL = `SELECT stream_id, head_version, next_attempt_at FROM parked_streams
WHERE tenant_id = $1 AND projection = $2 AND generation = $3::uuid AND stream_id = ANY($4::text[])`

// parkedHere is a stream parked before the batch: every event of it in the
// batch is parked behind head.
type parkedHere struct {
	head int64
	next time.Time
}

// Undecoded is a Projection that applies events as stored, never their
// decoded payloads (the relay's Republisher, which publishes the stored
// JSON): a retry hands it its letters undecoded (Event.Payload nil), so
// that a letter is retried whether or not this process has its codec.
type Undecoded interface {
	Projection
	AppliesUndecoded()
}

// RetryOutcome is what re-applying a parked stream's dead letters did.
type RetryOutcome struct {
	Tenant, Stream string
	// Applied lists the letters applied, in stream order.
	Applied []int64
	// Unparked: every parked letter of the stream applied (or none was
	// left); the stream is applied normally again.
	Unparked bool
	// Failed is the letter that failed (the stream's head now), with its
	// new error and attempt count; nil when Unparked.
	Failed *DeadLetter
	// NextAttemptAt is when the runner retries the stream again (zero: it
	// does not; an operator must act).
	NextAttemptAt time.Time

	parkedStreams int64 // the checkpoint's counter afterwards
}

// ErrNotParked: the stream is not parked (any more) for the projection.
var ErrNotParked = errors.New("the stream is not parked")

// retryFailure is the letter a retry stops at.
type retryFailure struct {
	at  int
	err error
}

// retryStream re-applies the parked letters of one stream in version
// order, with the projection's per-event Apply, on conn (which holds the
// lease of key). Letters that apply are marked retried in the same
// transaction; when all of them apply the stream is unparked. When one
// fails, the ones before it commit, it becomes the head with one more
// attempt and, when auto is set and attempts remain, the time of the next
// automatic attempt. A failure that is not the event's own (IsPoison false)
// changes nothing and is returned.
func retryStream(ctx context.Context, conn *pgx.Conn, p Projection, reg *event.Registry, key, generation, tenant, stream, actor string, auto *FailurePolicy) (RetryOutcome, error) {
	out := RetryOutcome{Tenant: tenant, Stream: stream}
	b := &pgx.Batch{}
	b.Queue(db.SetTenantSQL, tenant)
	var letters []DeadLetter
	b.Queue(`SELECT `+letterColumns+` FROM `+letterFrom+`
WHERE d.tenant_id = $1 AND d.projection = $2 AND d.generation = $3::uuid AND d.stream_id = $4 AND d.status = 'parked'
ORDER BY d.version`, tenant, letterName(p.Name(), key), generation, stream).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			l, err := scanLetter(rows)
			if err != nil {
				return err
			}
			letters = append(letters, l)
		}
		return rows.Err()
	})
	parked := false
	b.Queue(`SELECT true FROM parked_streams WHERE tenant_id = $1 AND projection = $2 AND generation = $3::uuid AND stream_id = $4`,
		tenant, letterName(p.Name(), key), generation, stream).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			parked = true
		}
		return rows.Err()
	})
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return out, fmt.Errorf("read dead letters of %s/%s: %w", tenant, stream, err)
	}
	if !parked {
		return out, fmt.Errorf("%w: %s of tenant %s for %s", ErrNotParked, stream, tenant, p.Name())
	}
	evs := make([]Event, len(letters))
	n := len(letters)
	var fail *retryFailure
	_, raw := p.(Undecoded)
	for i, l := range letters {
		if raw {
			evs[i] = Event{Record: l.Event}
			continue
		}
		payload, err := reg.DecodeRecord(l.Event)
		if err != nil {
			n, fail = i, &retryFailure{at: i, err: err}
			break
		}
		evs[i] = Event{Record: l.Event, Payload: payload}
	}
	for {
		err := commitRetry(ctx, conn, p, key, generation, tenant, stream, letters, evs[:n], fail, actor, auto, &out)
		var ee *EventError
		if errors.As(err, &ee) && IsPoison(ee.Err) && ee.Index < n {
			n, fail = ee.Index, &retryFailure{at: ee.Index, err: ee.Err}
			continue
		}
		return out, err
	}
}

// commitRetry applies evs (the first len(evs) letters) in one transaction,
// marks them retried, and either unparks the stream (fail == nil) or
// records the failure of letters[fail.at].
func commitRetry(ctx context.Context, conn *pgx.Conn, p Projection, key, generation, tenant, stream string, letters []DeadLetter,
	evs []Event, fail *retryFailure, actor string, auto *FailurePolicy, out *RetryOutcome) error {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	b.Queue(db.SetTenantSQL, tenant)
	owner := []int{ownerRunner, ownerRunner}
	for i, ev := range evs {
		n := b.Len()
		if err := ApplyEvent(p, b, ev); err != nil {
			return &EventError{Projection: p.Name(), Index: i, Event: ev.Record, Err: err}
		}
		for range b.Len() - n {
			owner = append(owner, i)
		}
	}
	ids := make([]int64, len(evs))
	for i := range evs {
		ids[i] = letters[i].ID
	}
	queue := func(sql string, args ...any) *pgx.QueuedQuery {
		owner = append(owner, ownerRunner)
		return b.Queue(sql, args...)
	}
	if len(ids) > 0 {
		queue(`UPDATE dead_letters SET status = 'retried', resolved_at = now(), resolved_by = $3
WHERE tenant_id = $1 AND id = ANY($2::bigint[]) AND status = 'parked'`, tenant, ids, actor)
	}
	var next *time.Time
	var failed DeadLetter
	streams := int64(0)
	if fail == nil {
		queue(`DELETE FROM parked_streams WHERE tenant_id = $1 AND projection = $2 AND generation = $3::uuid AND stream_id = $4`,
			tenant, letterName(p.Name(), key), generation, stream)
		streams = 1
	} else {
		failed = letters[fail.at]
		failed.Attempts++
		failed.Error = errorText(fail.err)
		failed.LastFailedAt = time.Now()
		if failed.FirstFailedAt.IsZero() {
			failed.FirstFailedAt = failed.LastFailedAt
		}
		failed.Head = true
		if auto != nil && failed.Attempts < auto.Attempts {
			t := time.Now().Add(auto.Delay(failed.Attempts))
			next = &t
			failed.NextAttemptAt = t
		}
		queue(`UPDATE dead_letters SET attempts = attempts + 1, error = $3, last_failed_at = now(), first_failed_at = coalesce(first_failed_at, now())
WHERE tenant_id = $1 AND id = $2`, tenant, failed.ID, failed.Error)
		queue(`UPDATE parked_streams SET head_version = $5, next_attempt_at = $6
WHERE tenant_id = $1 AND projection = $2 AND generation = $3::uuid AND stream_id = $4`, tenant, letterName(p.Name(), key), generation, stream, failed.Event.Version, next)
	}
	var counter int64
	queue(`UPDATE projection_checkpoints SET parked_streams = parked_streams - $2, parked_letters = parked_letters - $3, updated_at = now()
WHERE projection = $1 RETURNING parked_streams`, key, streams, int64(len(ids))).QueryRow(func(row pgx.Row) error {
		return row.Scan(&counter)
	})

	if err := sendTx(ctx, conn, b, nil, func(k int, err error) error {
		if k >= 0 {
			if o := owner[k]; o >= 0 {
				return &EventError{Projection: p.Name(), Index: o, Event: evs[o].Record, Err: err}
			}
		}
		return fmt.Errorf("retry %s/%s for %s: %w", tenant, stream, p.Name(), err)
	}); err != nil {
		return err
	}
	out.Applied = ids
	out.parkedStreams = counter
	if fail == nil {
		out.Unparked = true
	} else {
		out.Failed = &failed
		if next != nil {
			out.NextAttemptAt = *next
		}
	}
	return nil
}

// letterName is the projection column of the dead letters and parked
// streams of a runner of projection name under checkpoint key: the key of
// a partition (each partition parks its streams under its own generation
// and key, which the tools' joins with projection_checkpoints follow), the
// projection's name otherwise (a rebuild's letters move to the live row
// with its generation at the swap).
func letterName(name, key string) string {
	if strings.HasPrefix(key, name+"__part_") {
		return key
	}
	return name
}

// generationOf returns the generation of a checkpoint row, creating the
// row of a projection that never ran (so that its generation is fixed).
func generationOf(ctx context.Context, conn *pgx.Conn, key string) (string, error) {
	if _, err := conn.Exec(ctx, ensureCheckpointSQL, key); err != nil {
		return "", fmt.Errorf("create checkpoint of %s: %w", key, err)
	}
	var g string
	if err := conn.QueryRow(ctx, `SELECT generation::text FROM projection_checkpoints WHERE projection = $1`, key).Scan(&g); err != nil {
		return "", fmt.Errorf("read generation of %s: %w", key, err)
	}
	return g, nil
}

// RetryStream re-applies the parked dead letters of one stream of a tenant,
// in stream order, with p's per-event Apply, under x (the lease of p's
// checkpoint key, so the runner is not applying p meanwhile). actor is
// recorded on the letters it applies. When every letter applies the stream
// is unparked; when one fails it stays parked with that letter at its head
// (its attempts counted, no automatic retry scheduled) and the outcome says
// so. Errors: ErrNotParked, failures that are not the event's own (nothing
// is changed then), and database errors.
func RetryStream(ctx context.Context, x *Exclusive, p Projection, reg *event.Registry, tenant, stream, actor string) (RetryOutcome, error) {
	if reg == nil {
		return RetryOutcome{}, errors.New("retry: the event registry is required")
	}
	gen, err := generationOf(ctx, x.conn, x.key)
	if err != nil {
		return RetryOutcome{}, err
	}
	return retryStream(ctx, x.conn, p, reg, x.key, gen, tenant, stream, actor, nil)
}

// ErrLetterResolved: the dead letter is no longer parked (retried,
// discarded or superseded), or belongs to a generation a rebuild replaced.
var ErrLetterResolved = errors.New("the dead letter is not parked")

// DiscardDeadLetter marks a parked dead letter of the projection's current
// generation discarded, recording actor and reason, under x. It never
// applies anything. If no parked letter is left in its stream the stream is
// unparked; otherwise the next letter becomes the head and waits for a
// retry (automatic retries of the stream stop). Errors: ErrLetterNotFound,
// ErrLetterResolved, and database errors.
func DiscardDeadLetter(ctx context.Context, x *Exclusive, tenant string, id int64, actor, reason string) (DeadLetter, error) {
	if strings.TrimSpace(reason) == "" || strings.TrimSpace(actor) == "" {
		return DeadLetter{}, errors.New("discard: a reason and an actor are required")
	}
	l, err := ReadDeadLetter(ctx, x.conn, tenant, id)
	if err != nil {
		return l, err
	}
	gen, err := generationOf(ctx, x.conn, x.key)
	if err != nil {
		return l, err
	}
	if l.Status != LetterParked || l.Generation != gen {
		return l, fmt.Errorf("%w: letter %d is %s", ErrLetterResolved, id, l.Status)
	}
	err = pgx.BeginFunc(ctx, x.conn, func(tx pgx.Tx) error {
		if err := db.SetTenant(ctx, tx, tenant); err != nil {
			return err
		}
		ct, err := tx.Exec(ctx, `UPDATE dead_letters SET status = 'discarded', resolved_at = now(), resolved_by = $3, reason = $4
WHERE tenant_id = $1 AND id = $2 AND status = 'parked'`, tenant, id, actor, reason)
		if err != nil {
			return err
		}
		if ct.RowsAffected() != 1 {
			return fmt.Errorf("%w: letter %d", ErrLetterResolved, id)
		}
		var left int64
		var head *int64
		if err := tx.QueryRow(ctx, `SELECT count(*), min(version) FROM dead_letters
WHERE tenant_id = $1 AND projection = $2 AND generation = $3::uuid AND stream_id = $4 AND status = 'parked'`,
			tenant, l.Projection, gen, l.Event.Stream).Scan(&left, &head); err != nil {
			return err
		}
		streams := int64(0)
		if left == 0 {
			if _, err := tx.Exec(ctx, `DELETE FROM parked_streams WHERE tenant_id = $1 AND projection = $2 AND generation = $3::uuid AND stream_id = $4`,
				tenant, l.Projection, gen, l.Event.Stream); err != nil {
				return err
			}
			streams = 1
		} else if _, err := tx.Exec(ctx, `UPDATE parked_streams SET head_version = $5,
    next_attempt_at = CASE WHEN head_version = $6 THEN NULL ELSE next_attempt_at END
WHERE tenant_id = $1 AND projection = $2 AND generation = $3::uuid AND stream_id = $4`,
			tenant, l.Projection, gen, l.Event.Stream, *head, l.Event.Version); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE projection_checkpoints SET parked_streams = parked_streams - $2, parked_letters = parked_letters - 1, updated_at = now()
WHERE projection = $1`, x.key, streams)
		return err
	})
	if err != nil {
		return l, fmt.Errorf("discard dead letter %d: %w", id, err)
	}
	return ReadDeadLetter(ctx, x.conn, tenant, id)
}
