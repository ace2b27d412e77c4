package tenancy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/internal/pgsession"
)

func nowUTC() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// suppress sets the tenant erasing and waits for every live serving
// process to acknowledge it (member.go).
func (e *Eraser) suppress(ctx context.Context, w *Erasure) error {
	if w.Barrier.Version == 0 {
		if err := e.cfg.Store.audit(ctx, Actor{Subject: w.RequestedBy}, "set_erasing", w.Tenant, map[string]any{"reason": w.Reason}); err != nil {
			return err
		}
		err := e.cfg.Store.ownerTx(ctx, func(tx pgx.Tx) error {
			cur, err := getTenant(ctx, tx, w.Tenant, true)
			if err != nil {
				return err
			}
			if cur.Status == StatusErasing || cur.Status == StatusErased {
				w.Barrier.Version = cur.Version
				return nil
			}
			return tx.QueryRow(ctx, `UPDATE tenants SET status = 'erasing', status_reason = $2 WHERE id = $1 RETURNING version`,
				w.Tenant, w.Reason).Scan(&w.Barrier.Version)
		})
		if err != nil {
			return fmt.Errorf("set the tenant erasing: %w", err)
		}
		if err := e.save(ctx, w, ""); err != nil {
			return err
		}
	}
	return e.barrier(ctx, w)
}

// barrier resends the barrier notification until every live member has
// acknowledged w.Barrier.Version, or the timeout.
func (e *Eraser) barrier(ctx context.Context, w *Erasure) error {
	b, err := e.cfg.Store.AwaitBarrier(ctx, BarrierConfig{Pool: e.cfg.Pool, Lease: e.cfg.Lease, Timeout: e.cfg.BarrierTimeout, Poll: e.cfg.PollInterval,
		OnWait: func(b BarrierState) {
			e.progress(Progress{Tenant: w.Tenant, Step: StepSuppress, Message: fmt.Sprintf("waiting for %d of %d serving processes to acknowledge", len(b.Waiting), b.MembersLive)})
		}}, w.Tenant, w.Barrier.Version)
	w.Barrier = b
	if errors.Is(err, ErrBarrierTimeout) {
		_ = e.save(ctx, w, "")
	}
	return err
}

// quiesce waits until no other work on the tenant is going (busy: a
// running export, an import, an open move), then until the appends in
// progress when it looks have ended (one of them may hold events of the
// tenant from before it was erasing; every later append of the tenant is
// refused by the log), then until every live runner, of whatever kind, has
// passed the tenant's last event. Transactions elsewhere (another
// database of the cluster, readers) are not waited for.
//
// The relay publishes a batch before it moves its checkpoint past it (or,
// on watermill-sql, in the transaction that moves it): a relay checkpoint
// past the tenant's last event means every event of the tenant is on the
// broker, so the broker's store, erased after this step, is erased after
// the last publication of the tenant. Hence the relay must be among the
// runners waited for whenever it is live (RunnerLiveFunc knows every lease
// family).
func (e *Eraser) quiesce(ctx context.Context, w *Erasure) error {
	start := time.Now()
	deadline := start.Add(e.cfg.QuiesceTimeout)
	q := QuiesceState{RunnersWaitedOn: []string{}}
	for {
		busy, err := e.busy(ctx, w.Tenant)
		if err != nil {
			return err
		}
		q.Busy = busy
		if len(busy) == 0 {
			break
		}
		if time.Now().After(deadline) {
			q.WaitedMS = time.Since(start).Milliseconds()
			w.Quiesce = q
			_ = e.save(ctx, w, "")
			return fmt.Errorf("%w: still going on the tenant: %s", ErrQuiesceTimeout, strings.Join(busy, ", "))
		}
		e.progress(Progress{Tenant: w.Tenant, Step: StepQuiesce, Message: "waiting for " + strings.Join(busy, ", ")})
		if !pgsession.Sleep(ctx, e.cfg.PollInterval) {
			return ctx.Err()
		}
	}
	// The transactions that have written into the log and are still open
	// hold a RowExclusiveLock on it until they end (pg_locks, readable by
	// every role): those open now, and only those, are waited for.
	var writers []string
	if err := e.cfg.Pool.QueryRow(ctx, `SELECT coalesce(array_agg(DISTINCT virtualtransaction), '{}') FROM pg_locks
		WHERE relation = 'strata.events'::regclass AND mode = 'RowExclusiveLock' AND granted AND pid <> pg_backend_pid()`).Scan(&writers); err != nil {
		return fmt.Errorf("find appends in progress: %w", err)
	}
	for {
		var open int
		if err := e.cfg.Pool.QueryRow(ctx, `SELECT count(DISTINCT virtualtransaction) FROM pg_locks
			WHERE relation = 'strata.events'::regclass AND virtualtransaction = ANY ($1)`, writers).Scan(&open); err != nil {
			return fmt.Errorf("wait for appends in progress: %w", err)
		}
		q.OpenXacts = open
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			q.WaitedMS = time.Since(start).Milliseconds()
			w.Quiesce = q
			_ = e.save(ctx, w, "")
			return fmt.Errorf("%w: %d transactions that were in progress when the tenant became erasing are still open", ErrQuiesceTimeout, open)
		}
		e.progress(Progress{Tenant: w.Tenant, Step: StepQuiesce, Message: fmt.Sprintf("waiting for %d transactions that were open when the tenant became erasing", open)})
		if !pgsession.Sleep(ctx, e.cfg.PollInterval) {
			return ctx.Err()
		}
	}
	var txID, pos string
	err := e.eraserTx(ctx, w.Tenant, func(tx pgx.Tx) error {
		// The texts under other names: ORDER BY tx_id, position would
		// otherwise name the output columns and sort text ("9" after "25").
		return tx.QueryRow(ctx, `SELECT tx_id::text AS tx_text, position::text AS pos_text FROM events ORDER BY tx_id DESC, position DESC LIMIT 1`).Scan(&txID, &pos)
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		q.WaitedMS = time.Since(start).Milliseconds()
		w.Quiesce = q
		return nil // no event: nothing to wait for
	case err != nil:
		return fmt.Errorf("find the tenant's last event: %w", err)
	}
	q.LastEvent = txID + "/" + pos
	for {
		type cp struct {
			name, status string
			passed       bool
		}
		var cps []cp
		err := e.cfg.Store.ownerTx(ctx, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `SELECT projection, status, (pos_major, pos_minor) >= ($1::numeric, $2::numeric)
				FROM projection_checkpoints ORDER BY projection`, txID, pos)
			if err != nil {
				return err
			}
			cps, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (cp, error) {
				var c cp
				return c, r.Scan(&c.name, &c.status, &c.passed)
			})
			return err
		})
		if err != nil {
			return fmt.Errorf("read projection_checkpoints: %w", err)
		}
		q.RunnersWaitedOn, q.Lagging = []string{}, nil
		for _, c := range cps {
			live := c.status == "running" || c.status == "error"
			if e.cfg.RunnerLiveFunc != nil {
				if live, err = e.cfg.RunnerLiveFunc(ctx, c.name); err != nil {
					return err
				}
			}
			if !live {
				continue
			}
			q.RunnersWaitedOn = append(q.RunnersWaitedOn, c.name)
			if !c.passed {
				q.Lagging = append(q.Lagging, c.name)
			}
		}
		q.WaitedMS = time.Since(start).Milliseconds()
		w.Quiesce = q
		if len(q.Lagging) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			_ = e.save(ctx, w, "")
			return fmt.Errorf("%w (waited %s; lagging: %s)", ErrQuiesceTimeout, e.cfg.QuiesceTimeout, strings.Join(q.Lagging, ", "))
		}
		e.progress(Progress{Tenant: w.Tenant, Step: StepQuiesce, Message: "waiting for " + strings.Join(q.Lagging, ", ")})
		if !pgsession.Sleep(ctx, e.cfg.PollInterval) {
			return ctx.Err()
		}
	}
}

// erase erases every store not done yet, recording each.
func (e *Eraser) erase(ctx context.Context, w *Erasure) error {
	if err := e.addNewTables(ctx, w); err != nil {
		return err
	}
	if err := e.save(ctx, w, ""); err != nil {
		return err
	}
	for i := range w.Stores {
		if w.Stores[i].State == StateDone {
			continue
		}
		if err := e.eraseStore(ctx, w, i); err != nil {
			return err
		}
		if err := e.save(ctx, w, ""); err != nil {
			return err
		}
		if err := e.point(ctx, w.Tenant, "after-store"); err != nil {
			return err
		}
	}
	return nil
}

// verify counts every store again (and any table created since): a store
// with something of the tenant left is erased once more, and unknown if
// it still is.
func (e *Eraser) verify(ctx context.Context, w *Erasure) error {
	if err := e.addNewTables(ctx, w); err != nil {
		return err
	}
	var unknown []string
	for i := range w.Stores {
		if err := e.check(ctx, w, i); err != nil {
			return err
		}
		if w.Stores[i].State != StateDone {
			if err := e.eraseStore(ctx, w, i); err != nil {
				return err
			}
		}
		if w.Stores[i].State != StateDone {
			unknown = append(unknown, w.Stores[i].Name)
		}
	}
	if len(unknown) > 0 {
		_ = e.save(ctx, w, "")
		return fmt.Errorf("%w: %s", ErrUnknownStores, strings.Join(unknown, ", "))
	}
	return nil
}

// Receipt is the erasure's proof, kept after the data is gone.
type Receipt struct {
	ReceiptID   string          `json:"receipt_id"`
	Tenant      domain.TenantID `json:"tenant"`
	Reason      string          `json:"reason"`
	RequestedBy string          `json:"requested_by"`
	StartedAt   time.Time       `json:"started_at"`
	FinishedAt  time.Time       `json:"finished_at"`
	Barrier     BarrierState    `json:"barrier"`
	Quiesce     QuiesceState    `json:"quiesce"`
	Stores      []ReceiptStore  `json:"stores"`
	// Kept are the tables that name the tenant and are kept by their
	// declaration, with the reason (absent from receipts written before
	// the declarations, whose hashes stay the same).
	Kept []KeptTable `json:"kept,omitempty"`
	// ContentHash is the SHA-256 (hex) of the receipt's JSON encoding
	// (encoding/json of this struct: fields in this order, no whitespace)
	// with ContentHash empty.
	ContentHash string `json:"content_hash"`
}

// ReceiptStore is one store in the receipt.
type ReceiptStore struct {
	Name         string    `json:"name"`
	Kind         StoreKind `json:"kind"`
	Mode         Mode      `json:"mode"`
	State        string    `json:"state"`
	Before       int64     `json:"count_before"`
	After        int64     `json:"count_after"`
	Verification string    `json:"verification_query"`
	Result       int64     `json:"verification_result"`
	VerifiedAt   time.Time `json:"verified_at"`
	Note         string    `json:"note,omitempty"`
}

// Hash computes the receipt's content hash.
func (r Receipt) Hash() string {
	r.ContentHash = ""
	raw, _ := json.Marshal(r)
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])
}

// Verify reports whether the receipt's content hash matches its content.
func (r Receipt) Verify() bool { return r.ContentHash != "" && r.ContentHash == r.Hash() }

// Counts is store name -> count before, the numbers a rerun must repeat.
func (r Receipt) Counts() map[string]int64 {
	out := map[string]int64{}
	for _, s := range r.Stores {
		out[s.Name] = s.Before
	}
	return out
}

// receipt writes the receipt and turns the tenant's row into an erased
// tombstone (its display name removed).
func (e *Eraser) receipt(ctx context.Context, w *Erasure) error {
	finished := nowUTC()
	r := Receipt{ReceiptID: w.ReceiptID, Tenant: w.Tenant, Reason: w.Reason, RequestedBy: w.RequestedBy,
		StartedAt: w.StartedAt.UTC(), FinishedAt: finished, Barrier: w.Barrier, Quiesce: w.Quiesce, Kept: e.kept()}
	for _, s := range w.Stores {
		if s.State != StateDone || s.After == nil || s.VerifiedAt == nil {
			return fmt.Errorf("%w: %s is %s", ErrUnknownStores, s.Name, s.State)
		}
		r.Stores = append(r.Stores, ReceiptStore{Name: s.Name, Kind: s.Kind, Mode: s.Mode, State: s.State, Before: s.Before,
			After: *s.After, Verification: s.Verification, Result: *s.After, VerifiedAt: s.VerifiedAt.UTC(), Note: s.Note})
	}
	r.ContentHash = r.Hash()
	w.Receipt, w.FinishedAt = &r, &finished
	err := e.cfg.Store.ownerTx(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE tenants SET status = 'erased', name = '' WHERE id = $1 AND status <> 'erased'`, w.Tenant)
		return err
	})
	if err != nil {
		return fmt.Errorf("mark the tenant erased: %w", err)
	}
	return nil
}

// busy lists the work on the tenant, other than appends and runners, that
// can still write or keep its data: export jobs running (a heartbeat
// within ExportStaleAfter: an abandoned job writes nothing more), an
// import (its session holds the advisory lock db.ImportLockClass keyed by
// the tenant's hashtext, for as long as it writes), a move copying or
// frozen (it copies the tenant to another placement).
func (e *Eraser) busy(ctx context.Context, tenant domain.TenantID) ([]string, error) {
	var out []string
	err := e.cfg.Store.ownerTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
SELECT 'export ' || id::text FROM tenant_exports
WHERE tenant = $1 AND status = 'running' AND heartbeat_at > now() - $2 * interval '1 millisecond'
UNION ALL
SELECT 'move ' || id::text || ' (' || phase || ')' FROM tenant_moves
WHERE tenant = $1 AND phase IN ('copying', 'frozen')
UNION ALL
SELECT 'import (session ' || pid::text || ')' FROM pg_locks
WHERE locktype = 'advisory' AND granted AND objsubid = 2 AND classid::bigint = $3
  AND objid::bigint = hashtext($1)::bigint & 4294967295
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
ORDER BY 1`, tenant, e.cfg.ExportStaleAfter.Milliseconds(), int64(db.ImportLockClass))
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("find exports, imports and moves of the tenant: %w", err)
	}
	return out, nil
}
