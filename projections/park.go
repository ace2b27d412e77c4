package projections

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain/event"
)

// Parking from outside a Runner.
//
// A writer that applies a projection's events without a Runner (a
// broker-fed consumer, relay.Consumer) parks into the same dead-letter
// store, so that `strata replay dlq` and the admin routes list, retry and
// discard its letters like a runner's. It keeps the runner's rules:
//
//   - A checkpoint key names it: a row of projection_checkpoints (created
//     when it first parks, with a generation of its own that no rebuild
//     replaces), whose parked_streams and parked_letters count its parked
//     streams and letters. Its letters carry the key as their projection
//     and the row's generation.
//   - A letter commits with the writer's own progress past the event:
//     ParkEvent runs in the writer's transaction, under the event's tenant.
//   - Nothing else changes which of its streams are parked while it parks:
//     each of its transactions probes the key's pause lock first
//     (QueuePauseProbe) and gives up when a tool holds it. The tools
//     (RetryStream, DiscardDeadLetter) work only while holding that lock
//     (AcquireExclusive), which waits for the writer's transactions in
//     flight. So a transaction that found a stream parked parks behind its
//     head, and a tool retrying a stream sees every letter committed before
//     it, exactly as with a runner, which gives its lease up instead.

// ConsumerInfo is what a broker-fed consumer applies, as its checkpoint
// row records it (projection_checkpoints.consumer): the projection's name
// and its tables, in the order Projection.Tables lists them. The tooling
// retries the consumer's letters with the projection of that name it
// knows, writing into those tables (Retargetable.WithTables).
type ConsumerInfo struct {
	Projection string   `json:"projection"`
	Tables     []string `json:"tables"`
}

// ErrNotConsumer: the checkpoint key a consumer would take is the row of a
// projection, a rebuild or a relay.
var ErrNotConsumer = errors.New("the name is the checkpoint of a projection, a rebuild or a relay")

// RegisterConsumer records that the checkpoint key key belongs to a
// broker-fed consumer applying p: it creates the key's row (with a
// generation of its own) or updates its description. q runs as
// db.RoleProjector. Errors: ErrNotConsumer when the row exists and is not
// a consumer's (their dead letters and counters would mix), and database
// errors.
func RegisterConsumer(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, key string, p Projection) error {
	if !checkpointKey.MatchString(key) {
		return fmt.Errorf("register consumer: name %q: want [a-z][a-z0-9_]{0,62}", key)
	}
	info := ConsumerInfo{Projection: p.Name(), Tables: p.Tables()}
	var ok bool
	err := q.QueryRow(ctx, `INSERT INTO projection_checkpoints AS c (projection, consumer) VALUES ($1, $2)
ON CONFLICT (projection) DO UPDATE SET consumer = excluded.consumer, updated_at = now()
WHERE c.consumer IS NOT NULL AND c.rebuild IS NULL
RETURNING true`, key, info).Scan(&ok)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("consumer %s: %w: choose another consumer name", key, ErrNotConsumer)
	case err != nil:
		return fmt.Errorf("register consumer %s: %w", key, err)
	}
	return nil
}

// QueuePauseProbe queues into b, which must run inside a transaction, the
// probe of key's pause lock that a Runner makes in every batch: *paused is
// set when a tool holds the lock (AcquireExclusive). When no tool holds it,
// the probe keeps it in shared mode until the transaction ends, so that a
// tool's AcquireExclusive waits for the transaction to finish and every
// later probe fails until the tool is done. A writer outside a Runner that
// parks or reads parked streams under key probes first in each of its
// transactions and, when paused, rolls back and tries again later.
func QueuePauseProbe(b *pgx.Batch, key string, paused *bool) {
	b.Queue(`SELECT NOT pg_try_advisory_xact_lock_shared($1::int, $2::int)`, pauseClass, leaseKey(key)).
		QueryRow(func(row pgx.Row) error { return row.Scan(paused) })
}

// parkedHeadSQL finds a stream's parked head in the current generation of
// a checkpoint key. $1 tenant, $2 key, $3 stream.
const parkedHeadSQL = `SELECT p.head_version FROM parked_streams p
JOIN projection_checkpoints c ON c.projection = p.projection AND c.generation = p.generation
WHERE p.tenant_id = $1 AND p.projection = $2 AND p.stream_id = $3`

// ParkedHead reports whether stream of tenant is parked for the writer
// whose checkpoint key is key (in the key's current generation), and the
// version of its head. It runs in tx, with tenant set (db.SetTenant).
func ParkedHead(ctx context.Context, tx pgx.Tx, key, tenant, stream string) (head int64, parked bool, err error) {
	err = tx.QueryRow(ctx, parkedHeadSQL, tenant, key, stream).Scan(&head)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("parked stream %s of tenant %s for %s: %w", stream, tenant, key, err)
	}
	return head, true, nil
}

// Parking is where ParkEvent put an event.
type Parking struct {
	// Head: the event failed and is now the head of its stream, which it
	// parked; false: the stream was parked already and the event waits
	// behind HeadVersion, never tried.
	Head        bool
	HeadVersion int64
}

// ParkEvent puts rec into the dead-letter store for the writer whose
// checkpoint key is key, in tx (the writer's own transaction, with rec's
// tenant set, after QueuePauseProbe found no pause). If rec's stream is
// parked already, rec waits behind its head (attempts 0, the runner's
// "parked behind version N" text). Otherwise rec becomes the head of its
// newly parked stream with errText and attempts (at least 1), and no
// automatic retry is scheduled: the writer did its retries already, and
// an operator retries or discards the stream (`strata replay dlq`). The
// key's checkpoint row is created if missing (with a generation of its
// own) and locked, and its counters change in tx. rec must not be in the
// store already for the key's generation (a unique violation otherwise):
// the writer records in tx, too, that it has handled rec.
func ParkEvent(ctx context.Context, tx pgx.Tx, key string, rec event.Record, errText string, attempts int) (Parking, error) {
	var out Parking
	if !checkpointKey.MatchString(key) {
		return out, fmt.Errorf("park: key %q: want [a-z][a-z0-9_]{0,62}", key)
	}
	fail := func(err error) (Parking, error) {
		return out, fmt.Errorf("park %s/%s v%d for %s: %w", rec.Tenant, rec.Stream, rec.Version, key, err)
	}
	b := &pgx.Batch{}
	b.Queue(ensureCheckpointSQL, key)
	var gen string
	b.Queue(`SELECT generation::text FROM projection_checkpoints WHERE projection = $1 FOR UPDATE`, key).
		QueryRow(func(row pgx.Row) error { return row.Scan(&gen) })
	b.Queue(parkedHeadSQL, rec.Tenant, key, rec.Stream).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			if err := rows.Scan(&out.HeadVersion); err != nil {
				return err
			}
		}
		return rows.Err()
	})
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fail(err)
	}
	b = &pgx.Batch{}
	streams := int64(0)
	if out.HeadVersion > 0 {
		args, err := letterArgs(key, gen, rec, behindText(out.HeadVersion))
		if err != nil {
			return fail(err)
		}
		b.Queue(parkBehindSQL, args...)
	} else {
		out.Head, out.HeadVersion, streams = true, rec.Version, 1
		args, err := letterArgs(key, gen, rec, clipError(errText))
		if err != nil {
			return fail(err)
		}
		b.Queue(parkHeadSQL, append(args, (*time.Time)(nil), int32(max(attempts, 1)))...)
	}
	b.Queue(`UPDATE projection_checkpoints SET parked_streams = parked_streams + $2, parked_letters = parked_letters + 1, updated_at = now()
WHERE projection = $1`, key, streams)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fail(err)
	}
	return out, nil
}
