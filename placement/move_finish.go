package placement

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/internal/failpoint"
)

// PurgeReceipt is what a purge deleted from a placement and the check
// that nothing of the tenant is left there.
type PurgeReceipt struct {
	Placement string           `json:"placement"`
	Tenant    domain.TenantID  `json:"tenant"`
	Deleted   map[string]int64 `json:"deleted"`   // table -> rows
	Remaining map[string]int64 `json:"remaining"` // table -> rows left (all 0)
	At        time.Time        `json:"at"`
}

// Finish ends a switched move: once the source's runners have passed the
// tenant's last event there, every row of the tenant in the source's
// tenant tables (found from the catalog, as the erasure's are) and in the
// relay's copy of the log is deleted and counted again; the receipt is
// kept on the move. After it there is no going back.
func (m *Mover) Finish(ctx context.Context, tenant domain.TenantID) (Move, error) {
	mv, err := m.open(ctx, tenant)
	if err != nil {
		return mv, err
	}
	if mv.Phase != PhaseSwitched {
		return mv, fmt.Errorf("%w: the move of %s is %s; run it to the switch first (`tenants move %s --to %s`)", domain.ErrRejected, tenant, mv.Phase, tenant, mv.Target)
	}
	src, err := m.cfg.Open(ctx, mv.Source)
	if err != nil {
		return mv, m.fail(ctx, &mv, err)
	}
	receipt, err := m.purge(ctx, src, tenant)
	if err != nil {
		return mv, m.fail(ctx, &mv, err)
	}
	raw, _ := json.Marshal(receipt)
	mv.Receipt, mv.Phase, mv.LastError = raw, PhaseFinished, ""
	return mv, m.save(ctx, &mv)
}

// Back returns a move to its source before Finish: a switched move is
// run in reverse (the events the tenant appended in the target are copied
// back, behind a freeze on the target, verified and switched), then the
// target's copy is purged; a move not yet switched lifts its freeze and
// purges the partial copy. Nothing of the source was deleted, so nothing
// is lost.
func (m *Mover) Back(ctx context.Context, subject string, tenant domain.TenantID) (Move, error) {
	mv, err := m.open(ctx, tenant)
	if err != nil {
		return mv, err
	}
	src, err := m.cfg.Open(ctx, mv.Source)
	if err != nil {
		return mv, m.fail(ctx, &mv, err)
	}
	dst, err := m.cfg.Open(ctx, mv.Target)
	if err != nil {
		return mv, m.fail(ctx, &mv, err)
	}
	if mv.Phase == PhaseSwitched {
		// The reverse move: recorded first, so that a crash resumes it.
		mv.Phase, mv.LastError = PhaseRolledBack, ""
		var reverse Move
		err := m.control(ctx, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `UPDATE tenant_moves SET phase = 'rolled_back', finished_at = now(), updated_at = now() WHERE id = $1`, mv.ID); err != nil {
				return err
			}
			detail, _ := json.Marshal(map[string]any{"from": mv.Target, "to": mv.Source, "back_of": mv.ID})
			if _, err := tx.Exec(ctx, `INSERT INTO tenant_audit (subject, action, tenant, detail) VALUES ($1, 'move', $2, $3)`, subject, tenant, detail); err != nil {
				return err
			}
			var err error
			reverse, err = scanMove(tx.QueryRow(ctx, `INSERT INTO tenant_moves (tenant, source, target, requested_by) VALUES ($1, $2, $3, $4) RETURNING `+moveColumns,
				tenant, mv.Target, mv.Source, subject))
			return err
		})
		if err != nil {
			return mv, err
		}
		return m.completeBack(ctx, reverse, dst)
	}
	if mv.Phase == PhaseCopying || mv.Phase == PhaseFrozen {
		if err := unfreeze(ctx, src, tenant); err != nil {
			return mv, m.fail(ctx, &mv, err)
		}
		receipt, err := m.purge(ctx, dst, tenant)
		if err != nil {
			return mv, m.fail(ctx, &mv, err)
		}
		raw, _ := json.Marshal(receipt)
		mv.Receipt, mv.Phase, mv.LastError, mv.FrozenAt = raw, PhaseRolledBack, "", nil
		return mv, m.save(ctx, &mv)
	}
	return mv, fmt.Errorf("%w: the move of %s is %s", domain.ErrRejected, tenant, mv.Phase)
}

// completeBack runs a reverse move to its switch and purges the
// placement it left (abandoned), finishing it.
func (m *Mover) completeBack(ctx context.Context, reverse Move, abandoned Side) (Move, error) {
	reverse, err := m.Run(ctx, reverse)
	if err != nil {
		return reverse, err
	}
	failpoint.Hit("move.back-switched")
	receipt, err := m.purge(ctx, abandoned, reverse.Tenant)
	if err != nil {
		return reverse, m.fail(ctx, &reverse, err)
	}
	raw, _ := json.Marshal(receipt)
	reverse.Receipt, reverse.Phase = raw, PhaseFinished
	return reverse, m.save(ctx, &reverse)
}

// Resume goes on with the tenant's unfinished move, whatever phase it
// stopped in: a reverse move is finished too (its purge of the placement
// it left).
func (m *Mover) Resume(ctx context.Context, tenant domain.TenantID) (Move, error) {
	mv, err := m.open(ctx, tenant)
	if err != nil {
		return mv, err
	}
	back, err := m.isBack(ctx, mv)
	if err != nil {
		return mv, err
	}
	if !back {
		return m.Run(ctx, mv)
	}
	abandoned, err := m.cfg.Open(ctx, mv.Source)
	if err != nil {
		return mv, err
	}
	return m.completeBack(ctx, mv, abandoned)
}

// isBack reports whether mv is the reverse of a rolled-back move.
func (m *Mover) isBack(ctx context.Context, mv Move) (bool, error) {
	var back bool
	err := m.control(ctx, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tenant_moves WHERE tenant = $1 AND id < $2 AND phase = 'rolled_back'
			AND source = $3 AND target = $4 AND id = (SELECT max(id) FROM tenant_moves WHERE tenant = $1 AND id < $2))`,
			mv.Tenant, mv.ID, mv.Target, mv.Source).Scan(&back)
	})
	return back, err
}

// purge deletes every row of the tenant from the side: after its runners
// have passed the tenant's last event there (so none writes a read-model
// row of it afterwards), the tenant tables as strata_eraser under the
// tenant's setting, the log last but one, the relay's copy last; then
// counts again.
func (m *Mover) purge(ctx context.Context, s Side, tenant domain.TenantID) (PurgeReceipt, error) {
	if err := m.caughtUp(ctx, s, m.cfg.CatchUpTimeout); err != nil {
		return PurgeReceipt{Placement: s.Name, Tenant: tenant}, fmt.Errorf("before purging %s: %w", s.Name, err)
	}
	return PurgeTenant(ctx, s, tenant)
}

// PurgeTenant deletes every row of the tenant from the side's tenant
// tables (found from the catalog: every table with a tenant_id column),
// as strata_eraser under the tenant's setting, the log last but one and
// the relay's copy of the log last, except the tables in keep; then counts
// again and fails naming what is left. The caller makes sure that nothing
// writes the tenant's rows any more (a move's runners have passed its last
// event; an archive's fence has held it still).
func PurgeTenant(ctx context.Context, s Side, tenant domain.TenantID, keep ...string) (PurgeReceipt, error) {
	r := PurgeReceipt{Placement: s.Name, Tenant: tenant, Deleted: map[string]int64{}, Remaining: map[string]int64{}}
	all, err := db.EnsureEraserGrants(ctx, s.Owner)
	if err != nil {
		return r, err
	}
	tables := slices.DeleteFunc(all, func(t string) bool { return slices.Contains(keep, t) })
	sort.SliceStable(tables, func(i, j int) bool { return tables[i] != "events" && tables[j] == "events" })
	eraserTx := func(fn func(pgx.Tx) error) error {
		return pgx.BeginFunc(ctx, s.Owner, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+db.RoleEraser); err != nil {
				return fmt.Errorf("become %s on %s: %w", db.RoleEraser, s.Name, err)
			}
			if err := db.SetTenant(ctx, tx, string(tenant)); err != nil {
				return err
			}
			return fn(tx)
		})
	}
	for _, table := range tables {
		name := pgx.Identifier{db.Schema, table}.Sanitize()
		err := eraserTx(func(tx pgx.Tx) error {
			if table == "events" {
				if err := db.RaiseLogWatermark(ctx, tx); err != nil {
					return fmt.Errorf("raise the log's watermark: %w", err)
				}
			}
			tag, err := tx.Exec(ctx, `DELETE FROM `+name+` WHERE tenant_id = $1`, tenant)
			r.Deleted[table] = tag.RowsAffected()
			if err != nil {
				return err
			}
			return tx.QueryRow(ctx, `SELECT count(*) FROM `+name+` WHERE tenant_id = $1`, tenant).Scan(new(int64))
		})
		if err != nil {
			return r, fmt.Errorf("purge %s of %s: %w", table, s.Name, err)
		}
	}
	relay := pgx.Identifier{db.Schema, "watermill_strata_events"}.Sanitize()
	if err := eraserTx(func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM `+relay+` WHERE metadata::jsonb->>'tenant' = $1`, tenant)
		r.Deleted["watermill_strata_events"] = tag.RowsAffected()
		return err
	}); err != nil && db.SQLState(err) != "42P01" {
		return r, fmt.Errorf("purge the relay's copy of %s: %w", s.Name, err)
	}
	var left []string
	for _, table := range tables {
		var n int64
		name := pgx.Identifier{db.Schema, table}.Sanitize()
		if err := eraserTx(func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, `SELECT count(*) FROM `+name+` WHERE tenant_id = $1`, tenant).Scan(&n)
		}); err != nil {
			return r, err
		}
		r.Remaining[table] = n
		if n > 0 {
			left = append(left, fmt.Sprintf("%s %d", table, n))
		}
	}
	if len(left) > 0 {
		return r, fmt.Errorf("rows of %s left in %s after the purge: %s", tenant, s.Name, strings.Join(left, ", "))
	}
	r.At = time.Now().UTC()
	return r, nil
}
