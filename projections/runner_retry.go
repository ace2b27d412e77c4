package projections

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
)

// loadRetries reads which parked streams are still to be retried
// automatically, tenant by tenant (the tenants come from the log).
func (r *Runner) loadRetries(ctx context.Context, conn *pgx.Conn) error {
	tenants, err := Tenants(ctx, conn)
	if err != nil {
		return err
	}
	for lo := 0; lo < len(tenants); lo += 200 {
		b := &pgx.Batch{}
		for _, t := range tenants[lo:min(lo+200, len(tenants))] {
			b.Queue(db.SetTenantSQL, t)
			b.Queue(`SELECT stream_id, next_attempt_at FROM parked_streams
WHERE tenant_id = $1 AND projection = $2 AND generation = $3::uuid AND next_attempt_at IS NOT NULL`, t, r.letters, r.generation).
				Query(func(rows pgx.Rows) error {
					for rows.Next() {
						var stream string
						var at time.Time
						if err := rows.Scan(&stream, &at); err != nil {
							return err
						}
						r.retries[streamKey{t, stream}] = at
					}
					return rows.Err()
				})
		}
		if err := conn.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("read parked streams: %w", err)
		}
	}
	return nil
}

// nextRetry returns how long until the next automatic retry is due.
func (r *Runner) nextRetry() (time.Duration, bool) {
	var next time.Time
	for _, at := range r.retries {
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return time.Until(next), !next.IsZero()
}

// retryLimit is how many parked streams to retry after a step that
// applied n events: one while the head moves, every one due otherwise.
func retryLimit(n int) int {
	if n > 0 {
		return 1
	}
	return 0
}

// retryDue retries the parked streams whose next attempt is due, each in
// a transaction of its own on the lease session (so nothing else applies
// the projection meanwhile), at most limit of them (0: every one due). It
// returns how many it tried, and an error only when the session is gone.
//
// While the head moves, the loops retry one stream per batch: the retries
// run on the session that applies the live events, and a tenant's poison
// (streams parked in every projection, big events retried five times each)
// kept every other tenant's events waiting behind them for more than half
// a second (chaos HOSTILE, reads with a consistency token).
func (r *Runner) retryDue(ctx context.Context, conn *pgx.Conn, limit int) (int, error) {
	if len(r.retries) == 0 {
		return 0, nil
	}
	now := time.Now()
	tried := 0
	for k, at := range r.retries {
		if at.After(now) {
			continue
		}
		if limit > 0 && tried == limit {
			break
		}
		tried++
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.FinishTimeout)
		out, err := retryStream(sctx, conn, r.proj, r.cfg.Registry, r.key, r.generation, k.tenant, k.stream, "runner", &r.cfg.Failures)
		cancel()
		log := r.logger.With("tenant", k.tenant, "stream", k.stream)
		switch {
		case errors.Is(err, ErrNotParked):
			delete(r.retries, k)
		case err != nil:
			if conn.IsClosed() || db.IsUnavailable(err) {
				return tried, err
			}
			r.retries[k] = now.Add(r.cfg.Failures.Delay(1))
			log.Warn("retry of a parked stream failed without an attempt counted; trying again later", "error", err.Error())
		case out.Unparked:
			delete(r.retries, k)
			r.parkedStreams = out.parkedStreams
			log.Info("parked stream applied on retry and unparked", "letters", len(out.Applied))
		default:
			r.parkedStreams = out.parkedStreams
			f := out.Failed
			if out.NextAttemptAt.IsZero() {
				delete(r.retries, k)
				log.Error("event parked for good after its last attempt; retry or discard it with `strata replay dlq`",
					"dead_letter", f.ID, "version", f.Event.Version, "attempts", f.Attempts, "error", f.Error)
			} else {
				r.retries[k] = out.NextAttemptAt
				log.Warn("retry of a parked stream failed", "dead_letter", f.ID, "version", f.Event.Version,
					"attempt", f.Attempts, "of", r.cfg.Failures.Attempts, "error", f.Error,
					"retry_in", time.Until(out.NextAttemptAt).Round(time.Millisecond).String())
			}
		}
	}
	return tried, nil
}
