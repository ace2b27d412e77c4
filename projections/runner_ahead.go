package projections

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/internal/pgsession"
)

// A checkpoint beyond the end of the log means the read models are from a
// later point than the events: in a split deployment (events in
// EventStoreDB, read models in PostgreSQL) whose event store was restored
// from an earlier backup than the read models' database. Applying on from
// there would skip every event appended between the restored end of the
// log and the checkpoint, and keep read-model rows of events that no
// longer exist. The runner refuses: it records status ahead_of_log (which
// stays until a full rebuild's swap replaces the checkpoint, even once new
// appends carry the log past it, for those positions are other events) and
// applies nothing; queries over the projection answer 503
// (docs/operations.md, "Backup and restore").

// aheadOfLog returns why the checkpoint loaded by begin must not be
// applied from, or "".
func (r *Runner) aheadOfLog(ctx context.Context) (string, error) {
	if r.loadedStatus == StateAheadOfLog {
		return fmt.Sprintf("the checkpoint %s was found beyond the end of the event log before (status ahead_of_log): the read models are from a later point than the events; rebuild the projection (`strata replay rebuild %s`)",
			r.checkpoint.Token(), r.proj.Name()), nil
	}
	if r.checkpoint.IsZero() {
		return "", nil
	}
	end := r.cfg.LogEnd
	if end == nil {
		end = r.log.Head
	}
	head, err := end(ctx)
	if err != nil {
		return "", fmt.Errorf("read the end of the log: %w", err)
	}
	if !head.Less(r.checkpoint) {
		return "", nil
	}
	return fmt.Sprintf("the checkpoint %s is beyond the end of the event log %s: the read models are from a later point than the events (the event store restored from an earlier backup?); rebuild the projection (`strata replay rebuild %s`)",
		r.checkpoint.Token(), head.Token(), r.proj.Name()), nil
}

// refuseAhead records why and waits, holding the lease, until a tool (the
// rebuild that replaces the checkpoint) asks for the projection or ctx ends.
func (r *Runner) refuseAhead(ctx context.Context, conn *pgx.Conn, why string) error {
	now := time.Now()
	r.mu.Lock()
	r.status.State, r.status.Checkpoint, r.status.LastError, r.status.ErrorAt = StateAheadOfLog, r.checkpoint, why, now
	r.mu.Unlock()
	r.logger.Error("projection refuses to run: its checkpoint is beyond the end of the event log", "reason", why)
	if _, err := conn.Exec(ctx, `UPDATE projection_checkpoints SET status = 'ahead_of_log', last_error = $2, error_at = now(), updated_at = now()
WHERE projection = $1`, r.key, why); err != nil {
		return fmt.Errorf("record status ahead_of_log: %w", err)
	}
	return r.holdRefused(ctx, conn)
}

// refuseSplit keeps a runner of a checkpoint that was split into
// partitions (StateSplit) from applying anything: its partitions carry on
// from where it stands. It reports an error state and waits as
// refuseAhead does; the row is left as the split made it.
func (r *Runner) refuseSplit(ctx context.Context, conn *pgx.Conn) error {
	why := fmt.Sprintf("%s was split into partitions, which carry on from its checkpoint %s: run the projection with its partitions "+
		"(STRATA_PROJECTION_PARTITIONS), or rebuild it", r.key, r.checkpoint.Token())
	r.mu.Lock()
	r.status.State, r.status.Checkpoint, r.status.LastError, r.status.ErrorAt = StateError, r.checkpoint, why, time.Now()
	r.mu.Unlock()
	r.logger.Error("projection refuses to run", "reason", why)
	return r.holdRefused(ctx, conn)
}

// refuseLayout keeps a partition's runner whose rows cannot be made
// (ErrSplitParked, ErrMergePartitions) in an error state, holding its
// lease, and tries again every LeaseRetry: once an operator has retried or
// discarded the parked streams, it splits and runs.
func (r *Runner) refuseLayout(ctx context.Context, conn *pgx.Conn, cause error) error {
	r.mu.Lock()
	r.status.State, r.status.LastError, r.status.ErrorAt = StateError, cause.Error(), time.Now()
	r.mu.Unlock()
	r.logger.Error("projection partition cannot start", "reason", cause.Error())
	for {
		pgsession.Sleep(ctx, r.cfg.LeaseRetry)
		if ctx.Err() != nil {
			return nil
		}
		if paused, err := pauseRequested(ctx, conn, r.key); err != nil {
			return err
		} else if paused {
			return errYield
		}
		err := ensurePartition(ctx, conn, r.proj.Name(), r.cfg.Partition)
		switch {
		case err == nil:
			return r.lead(ctx, conn)
		case !errors.Is(err, ErrSplitParked) && !errors.Is(err, ErrMergePartitions):
			return err
		}
	}
}

// holdRefused holds the lease of a runner that refuses to run until a
// tool asks for the projection or ctx ends.
func (r *Runner) holdRefused(ctx context.Context, conn *pgx.Conn) error {
	for {
		pgsession.Sleep(ctx, r.cfg.LeaseRetry)
		if ctx.Err() != nil {
			return nil
		}
		paused, err := pauseRequested(ctx, conn, r.key)
		if err != nil {
			return err
		}
		if paused {
			return errYield
		}
	}
}
