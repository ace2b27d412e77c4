package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
)

// partitionSQL builds the read of one partition: per bucket of it, an
// index range scan of events_partition_log (bucket, tx_id, position) after
// the cursor and below the horizon, limited, and a merge of those in log
// order. PostgreSQL 15 cannot keep an index's order across an IN list on
// its leading column, so the buckets are separate scans that a Merge
// Append combines: each reads at most limit rows (stream_bucket's COST
// keeps the planner from reading the whole log through events_log with the
// bucket as a filter instead; migration 018). The horizon is the
// statement's snapshot, one for every scan, as in readAllSQL.
func partitionSQL(p eventstore.Partition) string {
	var b strings.Builder
	b.WriteString(`SELECT ` + selectColumns + ` FROM (`)
	for i, bucket := range p.Buckets() {
		if i > 0 {
			b.WriteString(` UNION ALL `)
		}
		fmt.Fprintf(&b, `(SELECT * FROM events WHERE stream_bucket(tenant_id, stream_id) = %d
  AND (tx_id, position) > ($1::text::xid8, $2::bigint) AND tx_id < pg_snapshot_xmin(pg_current_snapshot())
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
	rows, err := s.projector.Query(ctx, sql.(string), strconv.FormatUint(after.Major, 10), int64(after.Minor), limit)
	if err != nil {
		return nil, translate("read partition "+p.String(), err)
	}
	recs, err := scanRecords(rows, limit)
	if err != nil {
		return nil, translate("read partition "+p.String(), err)
	}
	return recs, nil
}
