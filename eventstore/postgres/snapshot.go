package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
)

var _ eventstore.SnapshotStore = (*Store)(nil)

// Snapshots live in aggregate_snapshots (migration 025), one per stream.

const readSnapshotSQL = `SELECT stream_version, tx_id::text, position, data FROM aggregate_snapshots
WHERE tenant_id = $1 AND stream_id = $2 AND schema = $3`

// readAfterSnapshotSQL reads the events after the snapshot of schema $3,
// or the whole stream without one. It names the version itself, in the
// transaction's one snapshot (REPEATABLE READ), so that it starts where
// readSnapshotSQL's row ends even when a newer snapshot is saved meanwhile.
// The version is an outer reference of a lateral read, not a subquery in
// the comparison: under row-level security a qual holding a subquery is
// not an index condition, and the stream was read whole and filtered (a
// join with the version as a column was planned the same way).
var readAfterSnapshotSQL = `WITH s AS MATERIALIZED (
    SELECT coalesce(max(stream_version), 0) AS v FROM aggregate_snapshots WHERE tenant_id = $1 AND stream_id = $2 AND schema = $3
)
SELECT e.* FROM s, LATERAL (
    SELECT ` + selectColumns + ` FROM events
    WHERE tenant_id = $1 AND stream_id = $2 AND version > s.v
    ORDER BY version
) AS e`

// ReadSnapshotted implements eventstore.SnapshotStore: the snapshot and
// the events after it in one round trip, one REPEATABLE READ transaction
// pipelined.
func (s *Store) ReadSnapshotted(ctx context.Context, tenant, stream, schema string) (eventstore.Snapshot, bool, []event.Record, error) {
	if tenant == "" {
		return eventstore.Snapshot{}, false, nil, eventstore.ErrNoTenant
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
	b.Queue(db.SetTenantSQL, tenant)
	b.Queue(readSnapshotSQL, tenant, stream, schema)
	b.Queue(readAfterSnapshotSQL, tenant, stream, schema)
	b.Queue("COMMIT")
	br := s.app.SendBatch(ctx, b)
	snap, found, tail, err := readSnapshotted(br, schema)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return eventstore.Snapshot{}, false, nil, translate("read "+stream+" from its snapshot", err)
	}
	return snap, found, tail, nil
}

func readSnapshotted(br pgx.BatchResults, schema string) (snap eventstore.Snapshot, found bool, tail []event.Record, err error) {
	for range 2 { // BEGIN, the tenant
		if _, err := br.Exec(); err != nil {
			return snap, false, nil, err
		}
	}
	var txText string
	var pos int64
	switch err := br.QueryRow().Scan(&snap.Version, &txText, &pos, &snap.Data); {
	case err == nil:
		major, err := strconv.ParseUint(txText, 10, 64)
		if err != nil {
			return snap, false, nil, fmt.Errorf("parse tx id %q: %w", txText, err)
		}
		snap.Schema, snap.Position, found = schema, event.Position{Major: major, Minor: uint64(pos)}, true
	case !errors.Is(err, pgx.ErrNoRows):
		return snap, false, nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return snap, false, nil, err
	}
	if tail, err = scanRecords(rows, 0); err != nil {
		return snap, false, nil, err
	}
	_, err = br.Exec() // COMMIT
	return snap, found, tail, err
}

// SaveSnapshot implements eventstore.SnapshotStore.
func (s *Store) SaveSnapshot(ctx context.Context, tenant, stream string, snap eventstore.Snapshot) error {
	if tenant == "" {
		return eventstore.ErrNoTenant
	}
	if snap.Version < 1 || snap.Schema == "" || snap.Position.Minor > 1<<63-1 {
		return fmt.Errorf("%w: snapshot of %s at version %d, schema %q", ErrInvalidAppend, stream, snap.Version, snap.Schema)
	}
	b := &pgx.Batch{}
	b.Queue(db.SetTenantSQL, tenant)
	b.Queue(`INSERT INTO aggregate_snapshots (tenant_id, stream_id, schema, stream_version, tx_id, position, data)
VALUES ($1, $2, $3, $4, $5::xid8, $6, $7)
ON CONFLICT (tenant_id, stream_id) DO UPDATE
SET schema = excluded.schema, stream_version = excluded.stream_version, tx_id = excluded.tx_id,
    position = excluded.position, data = excluded.data, taken_at = now()
WHERE aggregate_snapshots.schema <> excluded.schema OR aggregate_snapshots.stream_version < excluded.stream_version`,
		tenant, stream, snap.Schema, snap.Version, strconv.FormatUint(snap.Position.Major, 10), int64(snap.Position.Minor), snap.Data)
	if err := s.app.SendBatch(ctx, b).Close(); err != nil {
		return translate("save the snapshot of "+stream, err)
	}
	return nil
}
