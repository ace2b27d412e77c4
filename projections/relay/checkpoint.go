package relay

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/internal/pgsession"
	"github.com/strata-es/strata/projections"
)

// The relay keeps its checkpoint in projection_checkpoints, like a
// projection (projections.ReadCheckpoints and `strata replay status` show
// it), under the name relay_<topic>.

// execer is a connection or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// loadCheckpoint creates the relay's row if needed, marks it running and
// returns its position and generation (the key of its completeness
// ledger).
func loadCheckpoint(ctx context.Context, conn *pgx.Conn, name string) (event.Position, string, error) {
	if _, err := conn.Exec(ctx, `INSERT INTO projection_checkpoints (projection) VALUES ($1) ON CONFLICT (projection) DO NOTHING`, name); err != nil {
		return event.Position{}, "", fmt.Errorf("create checkpoint of %s: %w", name, err)
	}
	var major, minor, generation string
	err := conn.QueryRow(ctx, `UPDATE projection_checkpoints SET status = CASE WHEN status = 'error' THEN status ELSE 'running' END, updated_at = now()
WHERE projection = $1 RETURNING pos_major::text, pos_minor::text, generation::text`, name).Scan(&major, &minor, &generation)
	if err != nil {
		return event.Position{}, "", fmt.Errorf("load checkpoint of %s: %w", name, err)
	}
	p, err := event.ParseColumns(major, minor)
	if err != nil {
		return p, "", fmt.Errorf("checkpoint of %s: %w", name, err)
	}
	return p, generation, nil
}

// errCheckpointMoved: the checkpoint is not where this relay left it.
var errCheckpointMoved = errors.New("checkpoint moved by another relay")

// advance moves the checkpoint from where the batch was read after (from)
// to its last event (to), in tx, with the completeness ledger of recs
// (every event is published: the relay skips none). The condition on the
// old position makes a relay that wrongly believes it holds the lease
// harmless: it changes nothing and gives up its session. Commit the
// returned batch into the book once tx committed.
func advance(ctx context.Context, tx pgx.Tx, book *projections.LedgerBook, name string, recs []event.Record, uses []projections.LedgerUse,
	from, to event.Position) (projections.LedgerBatch, error) {
	b := &pgx.Batch{}
	counted := book.Queue(b, recs, func(i int) projections.LedgerUse { return uses[i] })
	b.Queue(`UPDATE projection_checkpoints
SET pos_major = $2::text::numeric, pos_minor = $3::text::numeric, status = 'running', last_error = NULL, error_at = NULL, updated_at = now()
WHERE projection = $1 AND pos_major = $4::text::numeric AND pos_minor = $5::text::numeric`,
		name, u64(to.Major), u64(to.Minor), u64(from.Major), u64(from.Minor)).Exec(func(ct pgconn.CommandTag) error {
		if ct.RowsAffected() != 1 {
			return errCheckpointMoved
		}
		return nil
	})
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		if errors.Is(err, errCheckpointMoved) {
			return counted, err
		}
		return counted, fmt.Errorf("advance checkpoint of %s: %w", name, err)
	}
	return counted, nil
}

// Leases are session-level advisory locks in the two-key form
// pg_try_advisory_lock(leaseClass, key(name)), held by the session that
// advances the checkpoint: losing the session loses the lease and the
// ability to advance. The class differs from the projection runners' so
// that the two key spaces never collide; it is declared in pgsession among
// every runner's (pgsession.RunnerLeases), so that a tenant's erasure
// waits for the relay as for any runner (issue 29).
const leaseClass = pgsession.RelayLeaseClass // "STRL"

// lease is the family of the relays' leases.
var lease = pgsession.RelayLease
