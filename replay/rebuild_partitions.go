package replay

import (
	"context"
	"fmt"
	"strconv"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/projections"
)

// livePartition is a partition of the live projection that a rebuild has
// paused (its lease held by x) for the swap.
type livePartition struct {
	key  string
	x    *projections.Exclusive
	part eventstore.Partition
}

// inPartitionSQL selects a partition's streams: $n partitions, index $i.
const inPartitionSQL = `stream_bucket(tenant_id, stream_id) % $5::int = $6::int`

// swapTenantPartitions is swapTenant's bookkeeping for a partitioned
// projection, in the swap's transaction (as the projector, under the
// tenant's setting), after the tenant's rows were replaced. Every
// partition stands at the swap's position (the rebuild brought each there
// under its lease), as the shadow does. For each partition:
//
//   - the tenant's dead letters of the replaced rows move to a generation
//     of their own, the parked ones superseded, and its parked streams go;
//   - the shadow's letters and parked streams of the partition's streams
//     become the partition's (its key, its generation), with its counters;
//   - the tenant's ledger is counted again from the log over the
//     partition's streams, from where the partition's ledger starts (its
//     split) to the swap's position: the shadow's ledger covers the
//     tenant's whole log in one order, which the partitions cannot take.
func swapTenantPartitions(ctx context.Context, tx pgx.Tx, p projections.Projection, key, tenant, actor string, parts []livePartition, out *swapped) error {
	var shadowGen string
	if err := tx.QueryRow(ctx, `SELECT generation::text FROM projection_checkpoints WHERE projection = $1`, key).Scan(&shadowGen); err != nil {
		return fmt.Errorf("read the rebuild's checkpoint: %w", err)
	}
	handles := map[string]bool{}
	for _, t := range p.EventTypes() {
		handles[t] = true
	}
	for _, lp := range parts {
		var gen, major, minor string
		if err := tx.QueryRow(ctx, `SELECT generation::text, pos_major::text, pos_minor::text FROM projection_checkpoints WHERE projection = $1 FOR UPDATE`, lp.key).
			Scan(&gen, &major, &minor); err != nil {
			return fmt.Errorf("read the checkpoint of %s: %w", lp.key, err)
		}
		pos, err := event.ParseColumns(major, minor)
		if err != nil {
			return err
		}
		out.pos = pos
		n, i := lp.part.Count, lp.part.Index

		// The replaced rows' letters and parked streams.
		var oldLetters int64
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM dead_letters WHERE tenant_id = $1 AND projection = $2 AND generation = $3::uuid AND status = 'parked'`,
			tenant, lp.key, gen).Scan(&oldLetters); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, supersedeTenantLettersSQL, tenant, lp.key, gen, uuid.NewString(), actor); err != nil {
			return fmt.Errorf("supersede the dead letters of %s: %w", lp.key, err)
		}
		ct, err := tx.Exec(ctx, `DELETE FROM parked_streams WHERE tenant_id = $1 AND projection = $2 AND generation = $3::uuid`, tenant, lp.key, gen)
		if err != nil {
			return err
		}
		oldStreams := ct.RowsAffected()

		// The shadow's, for this partition's streams.
		var newLetters int64
		if err := tx.QueryRow(ctx, `WITH moved AS (
    UPDATE dead_letters SET projection = $2, generation = $3::uuid
    WHERE tenant_id = $1 AND projection = $4 AND generation = $7::uuid AND `+inPartitionSQL+`
    RETURNING status)
SELECT count(*) FILTER (WHERE status = 'parked') FROM moved`, tenant, lp.key, gen, p.Name(), n, i, shadowGen).Scan(&newLetters); err != nil {
			return fmt.Errorf("move the rebuild's dead letters into %s: %w", lp.key, err)
		}
		ct, err = tx.Exec(ctx, `UPDATE parked_streams SET projection = $2, generation = $3::uuid
WHERE tenant_id = $1 AND projection = $4 AND generation = $7::uuid AND `+inPartitionSQL, tenant, lp.key, gen, p.Name(), n, i, shadowGen)
		if err != nil {
			return fmt.Errorf("move the rebuild's parked streams into %s: %w", lp.key, err)
		}
		newStreams := ct.RowsAffected()
		var parked int64
		if err := tx.QueryRow(ctx, `UPDATE projection_checkpoints SET parked_streams = parked_streams - $2 + $3, parked_letters = parked_letters - $4 + $5, updated_at = now()
WHERE projection = $1 RETURNING parked_streams`, lp.key, oldStreams, newStreams, oldLetters, newLetters).Scan(&parked); err != nil {
			return err
		}
		out.parkedStreams += parked

		if err := recountPartitionLedger(ctx, tx, p.Name(), tenant, gen, lp.part, pos, handles, newLetters); err != nil {
			return fmt.Errorf("the ledger of %s: %w", lp.key, err)
		}
	}
	// The shadow's ledger of the tenant is not carried (above).
	for _, t := range []string{"projection_ledger_marks", "projection_ledger"} {
		if _, err := tx.Exec(ctx, `DELETE FROM `+t+` WHERE tenant_id = $1 AND generation = $2::uuid`, tenant, shadowGen); err != nil {
			return fmt.Errorf("drop the rebuild's %s: %w", t, err)
		}
	}
	return nil
}

// recountPartitionLedger replaces the tenant's ledger row of a partition's
// generation with the count of the tenant's events of the partition's
// streams, from where the generation's ledger starts to pos (skipped: not
// of the projection's types; parked: the letters the swap gave it).
func recountPartitionLedger(ctx context.Context, tx pgx.Tx, name, tenant, gen string, part eventstore.Partition, pos event.Position,
	handles map[string]bool, parked int64) error {
	for _, t := range []string{"projection_ledger_marks", "projection_ledger"} {
		if _, err := tx.Exec(ctx, `DELETE FROM `+t+` WHERE tenant_id = $1 AND generation = $2::uuid`, tenant, gen); err != nil {
			return err
		}
	}
	since := event.Position{}
	var sMajor, sMinor string
	err := tx.QueryRow(ctx, `SELECT pos_major::text, pos_minor::text FROM projection_ledger_since WHERE generation = $1::uuid`, gen).Scan(&sMajor, &sMinor)
	switch {
	case err == pgx.ErrNoRows:
	case err != nil:
		return err
	default:
		if since, err = event.ParseColumns(sMajor, sMinor); err != nil {
			return err
		}
	}
	// tx_id::text is named tx_text: a bare tx_id in ORDER BY would name
	// the text column and order "1002" before "771".
	rows, err := tx.Query(ctx, `SELECT event_id::text, event_type, tx_id::text AS tx_text, position FROM events
WHERE tenant_id = $1 AND bucket % $2::int = $3::int
  AND (tx_id, position) > ($4::text::xid8, $5::bigint) AND (tx_id, position) <= ($6::text::xid8, $7::bigint)
ORDER BY tx_id, position`, tenant, part.Count, part.Index,
		strconv.FormatUint(since.Major, 10), int64(since.Minor), strconv.FormatUint(pos.Major, 10), int64(pos.Minor))
	if err != nil {
		return err
	}
	var l projections.Ledger
	for rows.Next() {
		var id, typ, txText string
		var position int64
		if err := rows.Scan(&id, &typ, &txText, &position); err != nil {
			rows.Close()
			return err
		}
		major, err := strconv.ParseUint(txText, 10, 64)
		if err != nil {
			rows.Close()
			return err
		}
		l.CountStored(event.Record{ID: id, Position: event.Position{Major: major, Minor: uint64(position)}})
		if !handles[typ] {
			l.Skipped++
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if l.Events == 0 {
		return nil
	}
	l.Parked = min(parked, l.Events-l.Skipped)
	l.Applied = l.Events - l.Skipped - l.Parked
	_, err = tx.Exec(ctx, `INSERT INTO projection_ledger (projection, generation, tenant_id, events, applied, parked, skipped, hash, pos_major, pos_minor)
VALUES ($1, $2::uuid, $3, $4, $5, $6, $7, $8, $9::text::numeric, $10::text::numeric)`,
		name, gen, tenant, l.Events, l.Applied, l.Parked, l.Skipped, l.Hash[:], strconv.FormatUint(l.Last.Major, 10), strconv.FormatUint(l.Last.Minor, 10))
	return err
}
