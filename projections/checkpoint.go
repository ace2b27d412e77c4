package projections

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain/event"
)

// Checkpoint is a projection's row in projection_checkpoints.
type Checkpoint struct {
	Projection string
	// Position is the last event the projection applied (zero: none yet).
	Position event.Position
	// Status is what the active runner last reported: running, error or
	// stopped (whether a runner is alive is the lease's business).
	Status    State
	LastError string
	ErrorAt   time.Time
	UpdatedAt time.Time
	// Generation identifies the projection's current rows: a rebuild's
	// swap replaces it, and dead letters belong to one generation.
	Generation string
	// ParkedStreams and ParkedLetters count, over every tenant, the
	// streams parked now and the dead letters still parked (of this
	// generation).
	ParkedStreams, ParkedLetters int64
	// Rebuild describes the rebuild a <name>__rebuild row stands for (raw
	// JSON; nil on other rows).
	Rebuild []byte
	// Consumer describes what a broker-fed consumer's row stands for (nil
	// on the rows of projections, rebuilds and relays).
	Consumer *ConsumerInfo
	// Partition says which projection and partition a partition's row is
	// (nil on every other row).
	Partition *PartitionInfo
}

// Querier is what reading checkpoints needs (a pool, a connection or a
// transaction of any strata role).
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// ReadCheckpoints returns the checkpoints of the named projections (all of
// them when names is empty). A projection that never ran has no row.
func ReadCheckpoints(ctx context.Context, q Querier, names ...string) (map[string]Checkpoint, error) {
	if names == nil {
		names = []string{} // an empty array, not NULL
	}
	rows, err := q.Query(ctx, `SELECT projection, pos_major::text, pos_minor::text, status, coalesce(last_error, ''), error_at, updated_at,
       generation::text, parked_streams, parked_letters, rebuild, consumer, partition
FROM projection_checkpoints WHERE cardinality($1::text[]) = 0 OR projection = ANY($1::text[])`, names)
	if err != nil {
		return nil, fmt.Errorf("read checkpoints: %w", err)
	}
	defer rows.Close()
	out := map[string]Checkpoint{}
	for rows.Next() {
		var c Checkpoint
		var major, minor, status string
		var errorAt *time.Time
		if err := rows.Scan(&c.Projection, &major, &minor, &status, &c.LastError, &errorAt, &c.UpdatedAt,
			&c.Generation, &c.ParkedStreams, &c.ParkedLetters, &c.Rebuild, &c.Consumer, &c.Partition); err != nil {
			return nil, fmt.Errorf("read checkpoints: %w", err)
		}
		if c.Position, err = event.ParseColumns(major, minor); err != nil {
			return nil, fmt.Errorf("read checkpoint of %s: %w", c.Projection, err)
		}
		c.Status = State(status)
		if errorAt != nil {
			c.ErrorAt = *errorAt
		}
		out[c.Projection] = c
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read checkpoints: %w", err)
	}
	return out, nil
}

func u64(v uint64) string { return strconv.FormatUint(v, 10) }

// ensureCheckpointSQL creates the row of a projection that never ran.
const ensureCheckpointSQL = `INSERT INTO projection_checkpoints (projection) VALUES ($1) ON CONFLICT (projection) DO NOTHING`

// checkpointState is what a runner loads when it takes the lease.
type checkpointState struct {
	pos           event.Position
	generation    string
	parkedStreams int64
	status        State
}

// loadCheckpoint creates the projection's row if needed, marks it running
// and returns its position, generation and parked-stream count.
func loadCheckpoint(ctx context.Context, conn *pgx.Conn, name string) (checkpointState, error) {
	var st checkpointState
	if _, err := conn.Exec(ctx, ensureCheckpointSQL, name); err != nil {
		return st, fmt.Errorf("create checkpoint of %s: %w", name, err)
	}
	var major, minor string
	var status string
	err := conn.QueryRow(ctx, `UPDATE projection_checkpoints SET status = CASE WHEN status IN ('error', 'ahead_of_log', 'split') THEN status ELSE 'running' END, updated_at = now()
WHERE projection = $1 RETURNING pos_major::text, pos_minor::text, generation::text, parked_streams, status`, name).Scan(&major, &minor, &st.generation, &st.parkedStreams, &status)
	st.status = State(status)
	if err != nil {
		return st, fmt.Errorf("load checkpoint of %s: %w", name, err)
	}
	st.pos, err = event.ParseColumns(major, minor)
	return st, err
}

// advanceSQL moves the checkpoint from the position the runner read its
// batch after ($4, $5) to the batch's last event ($2, $3), in the batch's
// transaction, and counts the streams ($6) and dead letters ($7) the batch
// parks. The condition on the old position makes a second runner that
// wrongly believes it holds the lease (a lease lost between reading and
// committing) harmless: its UPDATE waits for the first runner's row lock,
// then finds the position moved and changes nothing, and the runner rolls
// back instead of applying the batch twice. A row split into partitions
// (StateSplit) refuses every move the same way: the partitions started
// where it stands. It is queued first, so such a
// runner waits before doing its writes rather than after.
//
// It returns the parked-stream count and whether a tool has asked the
// projection to pause (the pause lock, see lease.go, is held: the shared
// transaction-level try fails), so that a busy runner learns of a pause
// with no extra round trip.
const advanceSQL = `UPDATE projection_checkpoints
SET pos_major = $2::text::numeric, pos_minor = $3::text::numeric, status = 'running', last_error = NULL, error_at = NULL, updated_at = now(),
    parked_streams = parked_streams + $6::bigint, parked_letters = parked_letters + $7::bigint
WHERE projection = $1 AND pos_major = $4::text::numeric AND pos_minor = $5::text::numeric AND status <> 'split'
RETURNING parked_streams, NOT pg_try_advisory_xact_lock_shared($8::int, $9::int)`

// errCheckpointMoved: the checkpoint is not where this runner left it.
var errCheckpointMoved = errors.New("checkpoint moved by another runner")

// RecordCheckpointError marks the checkpoint named name failed, outside the
// failed transaction. The relay, whose checkpoint lives in the same table,
// uses it too.
func RecordCheckpointError(ctx context.Context, conn *pgx.Conn, name string, cause error) error {
	msg := cause.Error()
	if len(msg) > 2000 {
		msg = strings.ToValidUTF8(msg[:2000], "")
	}
	_, err := conn.Exec(ctx, `UPDATE projection_checkpoints SET status = 'error', last_error = $2, error_at = now(), updated_at = now()
WHERE projection = $1 AND status <> 'split'`, name, msg)
	return err
}

// RecordCheckpointStopped marks the checkpoint named name stopped on a
// graceful shutdown, unless it stopped on an error (which stays visible).
func RecordCheckpointStopped(ctx context.Context, conn *pgx.Conn, name string) error {
	_, err := conn.Exec(ctx, `UPDATE projection_checkpoints SET status = 'stopped', updated_at = now()
WHERE projection = $1 AND status = 'running'`, name)
	return err
}
