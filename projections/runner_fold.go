package projections

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/internal/failpoint"
)

// FailpointFoldBeforeCommit names the failpoint between a fold's COPY (and
// ledger and checkpoint writes) and its commit.
const FailpointFoldBeforeCommit = "projector.fold-before-commit"

// Folded is what FoldOn did.
type Folded struct {
	// Events counts the log events the fold covered (0 when it did not
	// fold); Rows the rows it wrote.
	Events, Rows int64
	// Checkpoint is where the projection's checkpoint is after the fold.
	Checkpoint event.Position
	// NotFolded says why nothing was folded ("" when something was).
	NotFolded string
	// Took is the time of the whole fold; Write the part of it spent
	// writing (COPY, ledger, checkpoint, commit).
	Took, Write time.Duration
}

// FoldOn builds the projection's rows from the first event of the log in
// memory and writes them once, by COPY, in one transaction that also
// writes the ledger rows and moves the checkpoint (issue 35 §3), on the
// session of x (see CatchUpOn). It folds up to until (the head when zero)
// or until the fold holds more than maxRows rows, whichever comes first,
// at a read's boundary; CatchUpOn then applies the rest. It folds nothing
// (and says why in NotFolded) when the projection is no Folder, its
// checkpoint is not at the start, the runner reads one tenant or filters,
// or the fold cannot take an event: then the log is to be applied as
// usual, and every such event meets the runner's failure policy there.
//
// The tables must be empty and take COPY: a rebuild's fresh shadow tables,
// whose row-level security the rebuild enables after the fold (COPY FROM
// is refused on a table with row-level security).
func (r *Runner) FoldOn(ctx context.Context, x *Exclusive, until event.Position, maxRows int) (Folded, error) {
	if x == nil || x.key != r.key || x.conn == nil {
		return Folded{}, fmt.Errorf("projection %s: a fold needs the exclusive lease of %s", r.proj.Name(), r.key)
	}
	began := time.Now()
	conn := x.conn
	fp, ok := r.proj.(Folder)
	switch {
	case !ok:
		return Folded{NotFolded: "the projection does not fold (projections.Folder)"}, nil
	case r.cfg.Tenant != "" || r.cfg.Filter != nil || !r.cfg.Partition.IsZero():
		return Folded{NotFolded: "a fold reads the whole log"}, nil
	}
	if r.cfg.AsyncCommit {
		if _, err := conn.Exec(ctx, "SET synchronous_commit = off"); err != nil {
			return Folded{}, fmt.Errorf("projection %s: %w", r.proj.Name(), err)
		}
	}
	if err := r.begin(ctx, conn); err != nil {
		return Folded{}, err
	}
	defer r.setState(StateStopped)
	if !r.checkpoint.IsZero() {
		return Folded{Checkpoint: r.checkpoint, NotFolded: "the checkpoint is past the start (a resumed rebuild)"}, nil
	}
	if until.IsZero() {
		head, err := r.log.Head(ctx)
		if err != nil {
			return Folded{}, fmt.Errorf("projection %s: read the head: %w", r.proj.Name(), err)
		}
		until = head
	}
	r.setState(StateRunning)
	f := fp.NewFold()
	var (
		pos    event.Position
		events int64
		marks  []ledgerMark
	)
	for pos.Less(until) && f.Rows() <= maxRows {
		recs, decoded, err := r.readFold(ctx, pos, until)
		if err != nil {
			return Folded{}, err
		}
		if len(recs) == 0 {
			break
		}
		last, err := checkContiguous(ctx, r.locator, r.streams, recs)
		if err != nil {
			return Folded{}, fmt.Errorf("projection %s: %w", r.proj.Name(), err)
		}
		// In log order (no grouping by tenant, as prepare does for the
		// statements: a fold's rows are per tenant anyway).
		uses := make([]LedgerUse, len(recs))
		for i, rec := range recs {
			if !r.handles[rec.Type] {
				continue
			}
			payload, err := r.payload(i, rec, decoded)
			switch {
			case errors.Is(err, event.ErrUnknownType):
				return Folded{}, r.eventError(i, rec, err) // the process's fault, as in prepare
			case err != nil:
				return Folded{NotFolded: fmt.Sprintf("event %s cannot be decoded: %v", rec.ID, err)}, nil
			}
			if err := foldEvent(f, Event{Record: rec, Payload: payload}); err != nil {
				return Folded{NotFolded: fmt.Sprintf("the fold cannot take event %s: %v", rec.ID, err)}, nil
			}
			uses[i] = LedgerApplied
		}
		lbt := r.ledger.Count(recs, func(i int) LedgerUse { return uses[i] })
		for _, t := range lbt.tenants {
			if l := lbt.rows[t]; markDue(l, lbt.was[t]) {
				marks = append(marks, ledgerMark{t, l})
			}
		}
		r.ledger.Commit(lbt) // in memory; written below with the rows
		for k, v := range last {
			r.streams.put(k, v)
		}
		pos = recs[len(recs)-1].Position
		events += int64(len(recs))
		if r.cfg.OnBatch != nil {
			r.cfg.OnBatch(BatchInfo{Events: len(recs), Checkpoint: pos})
		}
	}
	if events == 0 {
		return Folded{NotFolded: "the log is empty"}, nil
	}
	wrote := time.Now()
	rows, err := r.writeFold(ctx, conn, f, pos, marks)
	var refused *foldRefusedError
	if errors.As(err, &refused) {
		r.logger.Warn("the folded rows were refused: the log is applied instead (the fold misses a constraint of the table)",
			"projection", r.proj.Name(), "error", refused.Error())
		return Folded{NotFolded: fmt.Sprintf("%s refused a folded row (the process's log has the database's error)", refused.table)}, nil
	}
	if err != nil {
		return Folded{}, err
	}
	r.checkpoint = pos
	r.mu.Lock()
	r.status.Checkpoint = pos
	r.mu.Unlock()
	return Folded{Events: events, Rows: rows, Checkpoint: pos, Took: time.Since(began), Write: time.Since(wrote)}, nil
}

// foldEvent adds ev to f; a panic in the module's code comes back as an
// error wrapping ErrPanicked.
func foldEvent(f Fold, ev Event) (err error) {
	defer recoverInto(&err, "fold")
	failpoint.PanicFor(FailpointApplyPanic, ev.Tenant)
	return f.Add(ev)
}

// readFold reads the next batch after pos, up to until, through the
// shared reads when the runner has them.
func (r *Runner) readFold(ctx context.Context, pos, until event.Position) ([]event.Record, *sharedBatch, error) {
	var recs []event.Record
	var decoded *sharedBatch
	var err error
	if sh := r.cfg.Shared; sh != nil {
		decoded, err = sh.read(ctx, r, pos, r.cfg.CatchUpBatch, true, time.Time{})
		if decoded != nil {
			recs = decoded.recs
		}
	} else {
		recs, err = r.log.ReadAll(ctx, pos, r.cfg.CatchUpBatch)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read log after %s: %w", pos, err)
	}
	k := len(recs)
	for k > 0 && until.Less(recs[k-1].Position) {
		k--
	}
	return recs[:k], decoded, nil // decoded's slices stay aligned: a prefix
}

// foldRefusedError: the table refused a folded row.
type foldRefusedError struct {
	table string
	err   error
}

func (e *foldRefusedError) Error() string {
	return fmt.Sprintf("%s refused a folded row: %v", e.table, e.err)
}

type ledgerMark struct {
	tenant string
	l      Ledger
}

// writeFold writes the fold's rows, the ledger rows and marks, and moves
// the checkpoint from the start to pos, in one transaction. The
// checkpoint's move goes first: a runner that lost its lease finds the
// position moved and writes nothing (advanceSQL).
func (r *Runner) writeFold(ctx context.Context, conn *pgx.Conn, f Fold, pos event.Position, marks []ledgerMark) (int64, error) {
	fail := func(err error) (int64, error) {
		return 0, fmt.Errorf("projection %s: write the folded rows: %w", r.proj.Name(), err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fail(err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx) // after a commit: pgx.ErrTxClosed, nothing done
	}()
	var parked int64
	var pause bool
	err = tx.QueryRow(ctx, advanceSQL, r.key, u64(pos.Major), u64(pos.Minor), "0", "0", int64(0), int64(0), pauseClass, leaseKey(r.key)).
		Scan(&parked, &pause)
	if errors.Is(err, pgx.ErrNoRows) {
		err = errCheckpointMoved
	}
	if err != nil {
		return fail(err)
	}
	var rows int64
	for _, t := range f.Tables() {
		n, err := tx.CopyFrom(ctx, pgx.Identifier{t.Table}, t.Columns, t.Rows)
		if err != nil {
			if c := db.SQLState(err); len(c) == 5 && (c[:2] == "22" || c[:2] == "23") {
				// A row the table refuses (a fold that missed one of its
				// constraints): not the rebuild's end, the log's way.
				return 0, &foldRefusedError{t.Table, err}
			}
			return fail(fmt.Errorf("COPY into %s: %w", t.Table, err))
		}
		rows += n
	}
	// Every tenant's ledger row, from nothing (the generation is new: a
	// row that exists fails the guard), and the marks a runner would have
	// written at the same reads.
	lbt := LedgerBatch{rows: r.ledger.rows, was: map[string]int64{}}
	for t := range r.ledger.rows {
		lbt.tenants = append(lbt.tenants, t)
	}
	slices.Sort(lbt.tenants)
	byTenant := map[string][]Ledger{}
	for _, m := range marks {
		byTenant[m.tenant] = append(byTenant[m.tenant], m.l)
	}
	b := &pgx.Batch{}
	for _, t := range lbt.tenants {
		b.Queue(db.SetTenantSQL, t)
		r.ledger.queueRow(b, lbt, t)
		for _, l := range byTenant[t] {
			r.ledger.queueMarkOf(b, l, t)
		}
	}
	GuardCallbacks(b)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fail(fmt.Errorf("ledger: %w", err))
	}
	failpoint.Hit(FailpointFoldBeforeCommit)
	if err := tx.Commit(ctx); err != nil {
		return fail(fmt.Errorf("commit: %w", err))
	}
	return rows, nil
}
