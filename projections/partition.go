package projections

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
)

// Partitionable is implemented by projections that may be split into
// partitions (RunnerConfig.Partition): every row they write follows one
// stream's events only, or several streams' through changes that commute
// (sums, counts), so partitions applying their streams in any interleaving
// give the rows of applying the log in order. A projection that keeps
// "the last order of a customer" across streams is not partitionable.
type Partitionable interface {
	Projection
	// Partitionable marks the projection; it is never called.
	Partitionable()
}

// StateSplit is the status of a checkpoint row whose projection was split
// into partitions: the row stays as the split left it (its position is
// where every partition started) and no runner applies it again.
const StateSplit State = "split"

// PartitionKey returns the checkpoint key of a projection's partition:
// <name>__part_<index>_of_<count>.
func PartitionKey(name string, p eventstore.Partition) string {
	return fmt.Sprintf("%s__part_%d_of_%d", name, p.Index, p.Count)
}

// PartitionInfo is what a partition's checkpoint row says of it
// (projection_checkpoints.partition).
type PartitionInfo struct {
	Projection string `json:"projection"`
	Index      int    `json:"index"`
	Count      int    `json:"count"`
	// From is the checkpoint key of the row the partition was split off
	// (the projection's own row, or a partition of a smaller layout), and
	// At the position every partition of the layout started from; empty
	// for a projection that was partitioned from its first event.
	From string `json:"from,omitempty"`
	At   string `json:"at,omitempty"`
}

// ErrMergePartitions: the projection runs in more partitions than a runner
// was configured with; going back to fewer would merge partitions that
// stand at different positions, which only a rebuild can do.
var ErrMergePartitions = errors.New("the projection runs in more partitions than configured")

// ErrSplitParked: a partition cannot be split off a row with parked
// streams (their dead letters belong to that row's generation).
var ErrSplitParked = errors.New("cannot split a projection with parked streams")

// splitRow is a row a layout can start from.
type splitRow struct {
	key         string
	major, minr string
	count       int // of its layout: 1 for the projection's own row
	status      State
	parked      int64
}

// ensurePartition creates the rows of every partition of p's layout if
// they do not exist yet, in one transaction: each starts where the row it
// is split off stands (the projection's own row, or the partition of the
// largest smaller layout holding its streams), and those rows are marked
// split, so that no runner of the old layout applies another batch
// (advanceSQL refuses a split row). The rows of the old layout are locked
// first: a batch of theirs in flight commits before, and the split starts
// after it. A projection without rows starts every partition from the
// beginning of the log.
func ensurePartition(ctx context.Context, conn *pgx.Conn, name string, p eventstore.Partition) error {
	key := PartitionKey(name, p)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM projection_checkpoints WHERE projection = $1)`, key).Scan(&exists); err != nil {
		return fmt.Errorf("partition %s: %w", key, err)
	}
	if exists {
		return nil
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("partition %s: %w", key, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op once committed
	rows, err := tx.Query(ctx, `SELECT projection, pos_major::text, pos_minor::text, coalesce((partition->>'count')::int, 1), status, parked_streams
FROM projection_checkpoints WHERE projection = $1 OR partition->>'projection' = $1
ORDER BY projection FOR UPDATE`, name)
	if err != nil {
		return fmt.Errorf("partition %s: %w", key, err)
	}
	byCount := map[int][]splitRow{}
	for rows.Next() {
		var r splitRow
		var status string
		if err := rows.Scan(&r.key, &r.major, &r.minr, &r.count, &status, &r.parked); err != nil {
			rows.Close()
			return fmt.Errorf("partition %s: %w", key, err)
		}
		r.status = State(status)
		byCount[r.count] = append(byCount[r.count], r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("partition %s: %w", key, err)
	}
	if len(byCount[p.Count]) > 0 {
		return nil // another runner of the layout created them meanwhile
	}
	for c, rs := range byCount {
		if c > p.Count && live(rs) {
			return fmt.Errorf("projection %s: %w (%d, configured %d): run it in %d partitions, or rebuild it", name, ErrMergePartitions, c, p.Count, c)
		}
	}
	// The layout to split: the largest smaller one still running.
	from := 0
	for c, rs := range byCount {
		if c < p.Count && live(rs) && c > from {
			from = c
		}
	}
	parents := map[int]splitRow{} // by partition index of the old layout
	for _, r := range byCount[from] {
		if r.parked > 0 {
			return fmt.Errorf("projection %s: %w: %s has %d; retry or discard them first", name, ErrSplitParked, r.key, r.parked)
		}
		idx := 0
		if from > 1 {
			if _, err := fmt.Sscanf(strings.TrimPrefix(r.key, name+"__part_"), "%d_of_", &idx); err != nil {
				return fmt.Errorf("partition %s: the key %s: %w", key, r.key, err)
			}
		}
		parents[idx] = r
	}
	for i := range p.Count {
		part := eventstore.Partition{Index: i, Count: p.Count}
		info := PartitionInfo{Projection: name, Index: i, Count: p.Count}
		major, minr := "0", "0"
		if from > 0 {
			parent, ok := parents[i%from]
			if !ok {
				return fmt.Errorf("projection %s: partition %d of %d has no row to split off", name, i%from, from)
			}
			pos, err := event.ParseColumns(parent.major, parent.minr)
			if err != nil {
				return fmt.Errorf("partition %s: %w", key, err)
			}
			info.From, info.At, major, minr = parent.key, pos.Token(), parent.major, parent.minr
		}
		raw, err := json.Marshal(info)
		if err != nil {
			return err
		}
		var generation string
		err = tx.QueryRow(ctx, `INSERT INTO projection_checkpoints (projection, pos_major, pos_minor, partition)
VALUES ($1, $2::text::numeric, $3::text::numeric, $4) ON CONFLICT (projection) DO NOTHING RETURNING generation::text`,
			PartitionKey(name, part), major, minr, raw).Scan(&generation)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // created by another runner of the layout meanwhile (a projection without rows to lock)
		}
		if err != nil {
			return fmt.Errorf("partition %s: create: %w", key, err)
		}
		if from > 0 {
			// Its ledger counts from the split; the parent's covers before.
			if _, err := tx.Exec(ctx, `INSERT INTO projection_ledger_since (generation, pos_major, pos_minor) VALUES ($1::uuid, $2::text::numeric, $3::text::numeric)`,
				generation, major, minr); err != nil {
				return fmt.Errorf("partition %s: record where its ledger starts: %w", key, err)
			}
		}
	}
	if from > 0 {
		keys := make([]string, 0, len(parents))
		for _, r := range parents {
			keys = append(keys, r.key)
		}
		if _, err := tx.Exec(ctx, `UPDATE projection_checkpoints SET status = 'split', updated_at = now() WHERE projection = ANY($1)`, keys); err != nil {
			return fmt.Errorf("partition %s: mark %v split: %w", key, keys, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("partition %s: %w", key, err)
	}
	return nil
}

// live reports whether a layout's rows still run (not split off).
func live(rs []splitRow) bool {
	for _, r := range rs {
		if r.status != StateSplit {
			return true
		}
	}
	return false
}

// stepPartition is step for a partition's runner: the partition's events
// only, through the log's index by partition (stepConfined).
func (r *Runner) stepPartition(ctx context.Context, conn *pgx.Conn, pl eventstore.PartitionLog) (int, error) {
	return r.stepConfined(ctx, conn, "partition "+r.cfg.Partition.String(), func(ctx context.Context, after event.Position, limit int) ([]event.Record, error) {
		return pl.ReadPartition(ctx, r.cfg.Partition, after, limit)
	})
}

// LiveKeys returns the checkpoint keys that names run under now, given
// every checkpoint row: a partitioned projection's name is replaced by the
// keys of its running layout's partitions, in partition order; any other
// name stays.
func LiveKeys(cps map[string]Checkpoint, names []string) []string {
	parts := map[string][]string{}
	for key, cp := range cps {
		if cp.Partition != nil && cp.Status != StateSplit {
			parts[cp.Partition.Projection] = append(parts[cp.Partition.Projection], key)
		}
	}
	out := make([]string, 0, len(names))
	for _, name := range names {
		keys := parts[name]
		if len(keys) == 0 {
			out = append(out, name)
			continue
		}
		slices.SortFunc(keys, func(a, b string) int { return cmp.Compare(cps[a].Partition.Index, cps[b].Partition.Index) })
		out = append(out, keys...)
	}
	return out
}
