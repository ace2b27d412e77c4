package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
)

// partitionSQL builds the read of one partition: per bucket of it, an
// index range scan of events_partition_log (bucket, tx_id, position) after
// the cursor and below the horizon, limited, and a merge of those in log
// order. PostgreSQL 15 cannot keep an index's order across an IN list on
// its leading column, so the buckets are separate scans that a Merge
// Append combines: each reads at most limit rows. tx_id >= the cursor's
// repeats the row comparison's first column as a plain bound, which the
// planner counts as one (measured at 500,000 events: without it, it
// prices each scan as the whole bucket and sorts the bucket's rows after
// the cursor instead). The horizon is the statement's snapshot, one for
// every scan, as in readAllSQL.
func partitionSQL(p eventstore.Partition) string {
	var b strings.Builder
	b.WriteString(`SELECT ` + selectColumns + ` FROM (`)
	for i, bucket := range p.Buckets() {
		if i > 0 {
			b.WriteString(` UNION ALL `)
		}
		fmt.Fprintf(&b, `(SELECT * FROM events WHERE bucket = %d
  AND tx_id >= $1::text::xid8 AND (tx_id, position) > ($1::text::xid8, $2::bigint) AND tx_id < pg_snapshot_xmin(pg_current_snapshot())
  ORDER BY tx_id, position LIMIT $3)`, bucket)
	}
	b.WriteString(`) events ORDER BY events.tx_id, events.position LIMIT $3`)
	return b.String()
}

var partitionSQLs sync.Map // eventstore.Partition -> string

// ReadPartition implements eventstore.PartitionLog.
func (s *Store) ReadPartition(ctx context.Context, p eventstore.Partition, after event.Position, limit int) ([]event.Record, error) {
	if s.projector == nil {
		return nil, errors.New("read partition: store opened without a projector pool")
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("read partition: %w", err)
	}
	if limit <= 0 {
		limit = 500
	}
	sql, ok := partitionSQLs.Load(p)
	if !ok {
		sql, _ = partitionSQLs.LoadOrStore(p, partitionSQL(p))
	}
	// One round trip: a read-only transaction with partitionPlanSQL's
	// settings, then the read.
	var recs []event.Record
	b := &pgx.Batch{}
	b.Queue("BEGIN READ ONLY")
	b.Queue(partitionPlanSQL)
	b.Queue(sql.(string), strconv.FormatUint(after.Major, 10), int64(after.Minor), limit).Query(func(rows pgx.Rows) error {
		var err error
		recs, err = scanRecords(rows, limit)
		return err
	})
	b.Queue("COMMIT")
	if err := s.projector.SendBatch(ctx, b).Close(); err != nil {
		if db.SQLState(err) == "42703" { // undefined column: events.bucket
			return nil, fmt.Errorf("read partition %s: the event log has no partition log: run `strata migrate partition-log`", p)
		}
		return nil, translate("read partition "+p.String(), err)
	}
	return recs, nil
}

// partitionPlanSQL sets, for the read's transaction, what makes the
// planner take events_partition_log. Priced with random_page_cost's
// default (4, a disk's seek), a partition's events, scattered over the
// heap, look dearer through their own index than through the log's
// (events_log, in heap order) with the bucket as a filter, which reads
// every partition's events: at 500,000 events 5.6 µs per event read that
// way, 3.1 through the partition's index (the log's recent end, which
// catch-up and live reads touch, is in memory: 1.1 is the usual setting
// for that, and for SSDs). Sorting plans (a bitmap scan, or a parallel
// one) read the whole bucket after the cursor to return its first rows:
// 20-38 µs per event read. A setting of the transaction ends with it.
const partitionPlanSQL = `SELECT set_config('random_page_cost', '1.1', true), set_config('enable_bitmapscan', 'off', true),
       set_config('max_parallel_workers_per_gather', '0', true)`
