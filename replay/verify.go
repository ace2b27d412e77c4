package replay

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/projections"
)

// VerifyOptions select what Verify checks: every projection and tenant by
// default.
type VerifyOptions struct {
	Projections []string
	Tenant      string
}

// Verdict is Verify's finding for one projection and tenant.
type Verdict struct {
	Projection string `json:"projection"`
	Tenant     string `json:"tenant"`
	Complete   bool   `json:"complete"`
	// Checkpoint is the projection's position the store was counted up to.
	Checkpoint string `json:"checkpoint"`
	// StoreEvents counts the tenant's events in the store up to the
	// checkpoint (after Since, for a ledger begun by an upgrade), or up to
	// the problem when there is one;
	// LedgerEvents what the ledger counted, of which Applied, Parked and
	// Skipped (by type).
	StoreEvents  int64  `json:"store_events"`
	LedgerEvents int64  `json:"ledger_events"`
	Applied      int64  `json:"applied"`
	Parked       int64  `json:"parked"`
	Skipped      int64  `json:"skipped"`
	Since        string `json:"since,omitempty"`
	// Problem says what differs: "missing" (Event is in the store and the
	// ledger did not count it, nor the Missing-1 events of the tenant after
	// it), "extra" (the ledger counted events the store
	// does not have; Event, when set, is the last store event before them)
	// or "differs" (several events differ between After and Event).
	Problem string    `json:"problem,omitempty"`
	Event   *EventRef `json:"event,omitempty"`
	// Missing counts the consecutive events left out from Event on
	// (problem "missing").
	Missing int64  `json:"missing_events,omitempty"`
	After   string `json:"after,omitempty"`
}

// EventRef names one event of the log.
type EventRef struct {
	ID       string `json:"id"`
	Stream   string `json:"stream"`
	Version  int64  `json:"version"`
	Type     string `json:"type"`
	Position string `json:"position"`
}

func refOf(r event.Record) *EventRef {
	return &EventRef{ID: r.ID, Stream: r.Stream, Version: r.Version, Type: r.Type, Position: r.Position.String()}
}

// ledgerRow is a stored ledger row or mark.
type ledgerRow struct {
	projections.Ledger
}

// verifyPage is how many events Verify reads per round trip.
const verifyPage = 5000

// Verify recomputes each projection's (and the relay's and process
// managers': every checkpoint's but rebuilds') completeness ledger from the store,
// up to its checkpoint, and compares it with the ledger the runner kept in
// the checkpoint's transactions (docs/guarantees.md, "Completeness"). It
// reads the log once, whatever the number of projections; the cost is one
// SHA-256 per event and projection.
func (s *Service) Verify(ctx context.Context, o VerifyOptions) ([]Verdict, error) {
	// Projections, and the other readers that keep a ledger with their
	// checkpoint (the relay, process managers).
	others, err := s.OtherCheckpoints(ctx)
	if err != nil {
		return nil, err
	}
	other := map[string]bool{}
	for _, cp := range others {
		other[cp.Projection] = true
	}
	names := o.Projections
	if len(names) == 0 {
		names = s.Names()
		for _, cp := range others {
			names = append(names, cp.Projection)
		}
	}
	for _, n := range names {
		if other[n] {
			continue
		}
		if _, err := s.projection(n); err != nil {
			return nil, err
		}
	}
	if o.Tenant != "" {
		if _, err := domain.ParseTenantID(o.Tenant); err != nil {
			return nil, fmt.Errorf("%w: tenant %q: %v", ErrInvalid, o.Tenant, err)
		}
	}
	// The checkpoints and the ledger rows are read in one snapshot: a
	// runner writes both in one transaction, and a ledger row read after
	// its checkpoint would count events past it (seen as "extra").
	snap, err := s.cfg.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("begin the ledger's snapshot: %w", err)
	}
	defer snap.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read only
	cps, err := projections.ReadCheckpoints(ctx, snap)
	if err != nil {
		return nil, err
	}
	// A partitioned projection's partitions are verified as checkpoints of
	// their own, each over its partition's streams (and the row they were
	// split off, up to the split, as itself).
	names, parts := withPartitions(names, cps)
	tenants := []string{o.Tenant}
	if o.Tenant == "" {
		if tenants, err = projections.Tenants(ctx, s.cfg.Pool); err != nil {
			return nil, err
		}
	}

	type key struct{ proj, tenant string }
	type track struct {
		cp      event.Position
		since   event.Position
		ledger  projections.Ledger // the stored row
		marks   []projections.Ledger
		run     projections.Ledger // recomputed from the store
		good    projections.Ledger // run at the last mark that agreed
		window  []event.Record     // store events since good
		verdict *Verdict
	}
	tracks := map[key]*track{}
	var until event.Position
	var order []key
	type verified struct {
		name  string
		cp    projections.Checkpoint
		since event.Position
	}
	var checked []verified
	for _, n := range names {
		cp, ok := cps[n]
		if !ok || cp.Position.IsZero() {
			continue // never ran: nothing to verify
		}
		since, err := ledgerSince(ctx, snap, cp.Generation)
		if err != nil {
			return nil, err
		}
		checked = append(checked, verified{n, cp, since})
		if until.Less(cp.Position) {
			until = cp.Position
		}
	}
	want := map[string]bool{}
	// addTenant reads a tenant's ledger rows and marks of every checkpoint.
	addTenant := func(t string) error {
		want[t] = true
		for _, c := range checked {
			rows, marks, err := readLedger(ctx, snap, c.cp.Generation, t)
			if err != nil {
				return err
			}
			k := key{c.name, t}
			tr := &track{cp: c.cp.Position, since: c.since, marks: marks, verdict: &Verdict{Projection: c.name, Tenant: t, Checkpoint: c.cp.Position.String()}}
			if rows != nil {
				tr.ledger = rows.Ledger
			}
			if !c.since.IsZero() {
				tr.verdict.Since = c.since.String()
			}
			tracks[k] = tr
			order = append(order, k)
		}
		return nil
	}
	for _, t := range tenants {
		if err := addTenant(t); err != nil {
			return nil, err
		}
	}

	// One pass over the log up to the furthest checkpoint: for one tenant,
	// over that tenant's events alone when the log can read them so.
	read := s.cfg.Log.ReadAll
	if tl, ok := s.cfg.Log.(eventstore.TenantLog); ok && o.Tenant != "" {
		read = func(ctx context.Context, after event.Position, limit int) ([]event.Record, error) {
			return tl.ReadTenant(ctx, o.Tenant, after, limit)
		}
	}
	var after event.Position
	for after.Less(until) {
		recs, err := read(ctx, after, verifyPage)
		if err != nil {
			return nil, fmt.Errorf("read the log after %s: %w", after, err)
		}
		if len(recs) == 0 {
			break
		}
		for _, rec := range recs {
			if until.Less(rec.Position) {
				break
			}
			if !want[rec.Tenant] {
				// Every tenant: one the list above lacks (the log is not
				// in PostgreSQL, whose events table listed them) is
				// verified from its first event met here.
				if o.Tenant != "" {
					continue
				}
				if err := addTenant(rec.Tenant); err != nil {
					return nil, err
				}
			}
			for _, n := range names {
				if part, ok := parts[n]; ok && !part.Holds(rec.Tenant, rec.Stream) {
					continue
				}
				tr := tracks[key{n, rec.Tenant}]
				if tr == nil || tr.cp.Less(rec.Position) || !tr.since.Less(rec.Position) || tr.verdict.Problem != "" {
					continue
				}
				// A mark the store has no event at: the ledger counted
				// something that is not there.
				for len(tr.marks) > 0 && tr.marks[0].Last.Less(rec.Position) {
					locate(tr.verdict, tr.good, tr.window, tr.marks[0])
					tr.marks = nil
				}
				if tr.verdict.Problem != "" {
					continue
				}
				tr.run.CountStored(rec)
				tr.window = append(tr.window, rec)
				if len(tr.marks) > 0 && tr.marks[0].Last == rec.Position {
					m := tr.marks[0]
					tr.marks = tr.marks[1:]
					if m.Events != tr.run.Events || m.Hash != tr.run.Hash {
						locate(tr.verdict, tr.good, tr.window, m)
						continue
					}
					tr.good, tr.window = tr.run, tr.window[:0]
				}
			}
		}
		after = recs[len(recs)-1].Position
	}

	out := make([]Verdict, 0, len(order))
	for _, k := range order {
		tr := tracks[k]
		v := tr.verdict
		v.StoreEvents, v.LedgerEvents = tr.run.Events, tr.ledger.Events
		v.Applied, v.Parked, v.Skipped = tr.ledger.Applied, tr.ledger.Parked, tr.ledger.Skipped
		if v.Problem == "" && (tr.run.Events != tr.ledger.Events || tr.run.Hash != tr.ledger.Hash) {
			locate(v, tr.good, tr.window, tr.ledger)
		}
		if v.StoreEvents == 0 && v.LedgerEvents == 0 {
			continue // the tenant has no events up to this checkpoint
		}
		v.Complete = v.Problem == ""
		out = append(out, *v)
	}
	return out, nil
}

// withPartitions returns names with the checkpoint keys of each named
// projection's partitions (of every layout) after it, and those keys'
// partitions.
func withPartitions(names []string, cps map[string]projections.Checkpoint) ([]string, map[string]eventstore.Partition) {
	byProjection := map[string][]string{}
	parts := map[string]eventstore.Partition{}
	for key, cp := range cps {
		if cp.Partition != nil {
			byProjection[cp.Partition.Projection] = append(byProjection[cp.Partition.Projection], key)
			parts[key] = eventstore.Partition{Index: cp.Partition.Index, Count: cp.Partition.Count}
		}
	}
	out := make([]string, 0, len(names))
	for _, n := range names {
		out = append(out, n)
		keys := byProjection[n]
		slices.Sort(keys)
		out = append(out, keys...)
	}
	return out, parts
}

// locate explains why the ledger's figures want (at a mark or its row)
// differ from the store's events window counted after good. It looks for
// one run of consecutive events the ledger left out (a reader that lost an
// event, a batch whose checkpoint moved without it, the ledger stopping
// short) and names its first event; otherwise the ledger counted events
// the store does not have (extra), or several differences lie between good
// and the window's end (differs).
func locate(v *Verdict, good projections.Ledger, window []event.Record, want projections.Ledger) {
	v.After = good.Last.String()
	n := int64(len(window))
	c := want.Events - good.Events
	switch {
	case c < n:
		k := n - c // events left out
		prefix := good.Hash
		for j := int64(0); j <= c; j++ {
			h := prefix
			for _, r := range window[j+k:] {
				h = h.Fold(r.ID)
			}
			if h == want.Hash {
				v.Problem, v.Event, v.Missing = "missing", refOf(window[j]), k
				return
			}
			if j < c {
				prefix = prefix.Fold(window[j].ID)
			}
		}
	case c > n:
		v.Problem = "extra"
		if n > 0 {
			v.Event = refOf(window[n-1])
		}
		return
	}
	v.Problem = "differs"
	if n > 0 {
		v.Event = refOf(window[n-1])
	}
}

// ledgerSince reads where the generation's ledger starts counting (zero:
// at the first event), in snap.
func ledgerSince(ctx context.Context, snap pgx.Tx, generation string) (event.Position, error) {
	var major, minor string
	err := snap.QueryRow(ctx, `SELECT pos_major::text, pos_minor::text FROM projection_ledger_since WHERE generation = $1::uuid`, generation).
		Scan(&major, &minor)
	if err == pgx.ErrNoRows {
		return event.Position{}, nil
	}
	if err != nil {
		return event.Position{}, fmt.Errorf("read the ledger's start: %w", err)
	}
	return event.ParseColumns(major, minor)
}

// readLedger reads a tenant's ledger row (nil: none) and its marks in
// order, under the tenant's setting, in snap.
func readLedger(ctx context.Context, snap pgx.Tx, generation, tenant string) (*ledgerRow, []projections.Ledger, error) {
	var row *ledgerRow
	var marks []projections.Ledger
	scanHash := func(raw []byte, h *projections.LedgerHash) error {
		if len(raw) != len(h) {
			return fmt.Errorf("ledger hash of %d bytes", len(raw))
		}
		copy(h[:], raw)
		return nil
	}
	err := pgx.BeginFunc(ctx, snap, func(tx pgx.Tx) error { // a savepoint
		if _, err := tx.Exec(ctx, db.SetTenantSQL, tenant); err != nil {
			return err
		}
		var l projections.Ledger
		var raw []byte
		var major, minor string
		err := tx.QueryRow(ctx, `SELECT events, applied, parked, skipped, hash, pos_major::text, pos_minor::text
FROM projection_ledger WHERE generation = $1::uuid AND tenant_id = $2`, generation, tenant).
			Scan(&l.Events, &l.Applied, &l.Parked, &l.Skipped, &raw, &major, &minor)
		switch {
		case err == pgx.ErrNoRows:
		case err != nil:
			return err
		default:
			if err := scanHash(raw, &l.Hash); err != nil {
				return err
			}
			if l.Last, err = event.ParseColumns(major, minor); err != nil {
				return err
			}
			row = &ledgerRow{l}
		}
		rows, err := tx.Query(ctx, `SELECT events, hash, pos_major::text, pos_minor::text FROM projection_ledger_marks
WHERE generation = $1::uuid AND tenant_id = $2 ORDER BY events`, generation, tenant)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var m projections.Ledger
			if err := rows.Scan(&m.Events, &raw, &major, &minor); err != nil {
				return err
			}
			if err := scanHash(raw, &m.Hash); err != nil {
				return err
			}
			if m.Last, err = event.ParseColumns(major, minor); err != nil {
				return err
			}
			marks = append(marks, m)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read the ledger of tenant %s: %w", tenant, err)
	}
	slices.SortFunc(marks, func(a, b projections.Ledger) int { return a.Last.Compare(b.Last) })
	return row, marks, nil
}
