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

	"github.com/strata-es/strata/domain"
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
	b, err := e.fence.Barrier(ctx, w.Tenant, w.Barrier.Version, func(msg string) {
		e.progress(Progress{Tenant: w.Tenant, Step: StepSuppress, Message: msg})
	})
	w.Barrier = b
	if errors.Is(err, ErrBarrierTimeout) {
		_ = e.save(ctx, w, "")
	}
	return err
}

// quiesce waits for the work on the tenant to end (Fence.Quiesce).
func (e *Eraser) quiesce(ctx context.Context, w *Erasure) error {
	q, err := e.fence.Quiesce(ctx, w.Tenant, "erasing", func(msg string) {
		e.progress(Progress{Tenant: w.Tenant, Step: StepQuiesce, Message: msg})
	})
	w.Quiesce = q
	if errors.Is(err, ErrQuiesceTimeout) {
		_ = e.save(ctx, w, "")
	}
	return err
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
