package process

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
)

// fire fires one due deadline in a transaction of its own on the lease's
// session: the deadline is marked fired and its Timeout decided for the
// instance (state, steps, deadlines, history) in that transaction, so the
// firing is exactly-once in effect. A crash before the commit leaves the
// deadline pending, fired again by the next leader; after it, the row says
// fired and nothing fires it again. A deadline moved or cancelled since it
// was read is left alone.
func (r *Runner) fire(ctx context.Context, conn *pgx.Conn, d dueDeadline) error {
	var fired time.Time
	done := false
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := probePause(ctx, tx, r.name); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, db.SetTenantSQL, d.tenant); err != nil {
			return err
		}
		inst, err := lockInstance(ctx, tx, r.name, d.tenant, d.instance)
		if err != nil {
			return err
		}
		now := r.cfg.Now()
		var due time.Time
		err = tx.QueryRow(ctx, `UPDATE process_deadlines SET status = 'fired', fired_at = $5
WHERE tenant_id = $1 AND process = $2 AND instance = $3 AND name = $4 AND status = 'pending' AND due_at <= $5
RETURNING due_at`, d.tenant, r.name, d.instance, d.name, now).Scan(&due)
		if errors.Is(err, pgx.ErrNoRows) || !inst.exists {
			return nil
		}
		if err != nil {
			return err
		}
		in := Input{Kind: InputTimeout, Instance: d.instance, Tenant: domain.TenantID(d.tenant), At: now, Timeout: &Timeout{Name: d.name, Due: due}}
		if err := r.decideOther(ctx, tx, &inst, in); err != nil {
			return err
		}
		if err := r.hook("fire"); err != nil {
			return err
		}
		fired, d.due, done = now, due, true
		return nil
	})
	if err != nil {
		return fmt.Errorf("fire deadline: %w", err)
	}
	if done && r.cfg.OnFire != nil {
		r.cfg.OnFire(FireReport{Process: r.name, Tenant: d.tenant, Instance: d.instance, Name: d.name, Due: d.due, Fired: fired, Lag: fired.Sub(d.due)})
	}
	return nil
}
