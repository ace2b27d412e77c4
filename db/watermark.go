package db

import (
	"context"

	"github.com/jackc/pgx/v5/pgconn"
)

// RaiseLogWatermark records, in log_watermark (migration 014), the newest
// position among the events q can see, if it is beyond the mark there. A
// purge of a tenant's events calls it first, in its transaction as
// strata_eraser under the tenant's setting, so that the end of the log
// (eventstore/postgres Store.LogEnd: the greater of the newest event and
// the mark) never moves back below the runners' checkpoints.
func RaiseLogWatermark(ctx context.Context, q interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}) error {
	_, err := q.Exec(ctx, `INSERT INTO log_watermark (pos_major, pos_minor)
		SELECT tx_id::text::numeric, position FROM events ORDER BY tx_id DESC, position DESC LIMIT 1
		ON CONFLICT (id) DO UPDATE SET pos_major = EXCLUDED.pos_major, pos_minor = EXCLUDED.pos_minor, set_at = now()
		WHERE (log_watermark.pos_major, log_watermark.pos_minor) < (EXCLUDED.pos_major, EXCLUDED.pos_minor)`)
	return err
}
