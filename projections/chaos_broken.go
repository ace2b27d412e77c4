//go:build chaos_broken

package projections

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain/event"
)

// A DELIBERATELY BROKEN build, for `make chaos-broken` only (docs/chaos.md):
// the checkpoint move commits in a transaction of its own, before the
// batch's read-model writes, instead of with them (ARCHITECTURE decision 2).
// A process killed between the two commits has advanced its checkpoint over
// events whose effects never committed: they are skipped for good, and the
// fault harness must notice that the read models differ from a rebuild.
// Never build a release with the chaos_broken tag.
func init() {
	commitCheckpointFirst = func(ctx context.Context, conn *pgx.Conn, name string, from, next event.Position) error {
		// Autocommit: this statement is its own transaction. Accept a
		// checkpoint already at next (the batch retried event by event).
		ct, err := conn.Exec(ctx, `UPDATE projection_checkpoints
SET pos_major = $2::text::numeric, pos_minor = $3::text::numeric, status = 'running', last_error = NULL, error_at = NULL, updated_at = now()
WHERE projection = $1 AND ((pos_major = $4::text::numeric AND pos_minor = $5::text::numeric)
   OR (pos_major = $2::text::numeric AND pos_minor = $3::text::numeric))`,
			name, u64(next.Major), u64(next.Minor), u64(from.Major), u64(from.Minor))
		if err != nil {
			return fmt.Errorf("projection %s: commit checkpoint (chaos_broken): %w", name, err)
		}
		if ct.RowsAffected() != 1 {
			return errCheckpointMoved
		}
		return nil
	}
}
