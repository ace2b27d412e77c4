package projections

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
)

// stepTenant is step for a runner confined to one tenant (Config.Tenant)
// on a log that reads one tenant's events (stepConfined).
func (r *Runner) stepTenant(ctx context.Context, conn *pgx.Conn, tl eventstore.TenantLog) (int, error) {
	return r.stepConfined(ctx, conn, "tenant "+r.cfg.Tenant, func(ctx context.Context, after event.Position, limit int) ([]event.Record, error) {
		return tl.ReadTenant(ctx, r.cfg.Tenant, after, limit)
	})
}

// stepConfined is step for a runner that reads part of the log through an
// index (one tenant, one partition): it applies the part's next events,
// and when there are none it moves the checkpoint to the log's head
// without reading the others' events. The head is read before the part's
// events: every event at or before it is visible to that read, so an empty
// read proves the part has nothing up to it.
func (r *Runner) stepConfined(ctx context.Context, conn *pgx.Conn, part string, read func(ctx context.Context, after event.Position, limit int) ([]event.Record, error)) (int, error) {
	began := time.Now()
	head, err := r.log.Head(ctx)
	if err != nil {
		return 0, fmt.Errorf("read the log's head: %w", err)
	}
	if !r.until.IsZero() && r.until.Less(head) {
		head = r.until
	}
	recs, err := read(ctx, r.checkpoint, r.readSize())
	if err != nil {
		r.catchingUp = false
		return 0, fmt.Errorf("read %s after %s: %w", part, r.checkpoint, err)
	}
	r.catchingUp = len(recs) == r.readSize()
	if !r.until.IsZero() {
		k := len(recs)
		for k > 0 && r.until.Less(recs[k-1].Position) {
			k--
		}
		recs = recs[:k]
	}
	if len(recs) > 0 {
		ctx, span := startBatchSpan(ctx, r.key, recs)
		n, err := r.applyRead(ctx, conn, recs, nil, began)
		endBatchSpan(span, err)
		if err != nil {
			r.catchingUp = false
		}
		return n, err
	}
	if !r.checkpoint.Less(head) {
		return 0, nil
	}
	return 0, r.skipTo(ctx, conn, head)
}

// skipTo moves the checkpoint to pos, past events that are none of the
// runner's (another tenant's), in a transaction of its own guarded like a
// batch's (advanceSQL). It counts no event: the ledger is per tenant, and
// the skipped events are other tenants'.
func (r *Runner) skipTo(ctx context.Context, conn *pgx.Conn, pos event.Position) error {
	from := r.checkpoint
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("projection %s: begin: %w", r.proj.Name(), err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op once committed
	var parked int64
	var pause bool
	err = tx.QueryRow(ctx, advanceSQL, r.key, u64(pos.Major), u64(pos.Minor), u64(from.Major), u64(from.Minor), int64(0), int64(0),
		pauseClass, leaseKey(r.key)).Scan(&parked, &pause)
	if errors.Is(err, pgx.ErrNoRows) {
		return errCheckpointMoved
	}
	if err != nil {
		return fmt.Errorf("projection %s: move the checkpoint to %s: %w", r.proj.Name(), pos, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("projection %s: commit the checkpoint at %s: %w", r.proj.Name(), pos, err)
	}
	r.checkpoint = pos
	r.parkedStreams, r.pauseSeen = parked, pause
	r.mu.Lock()
	r.status.Checkpoint = pos
	r.mu.Unlock()
	if r.cfg.Progress != nil {
		r.cfg.Progress.advance(r.key, pos)
	}
	return nil
}
