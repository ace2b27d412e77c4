package placement

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain"
)

// The process managers' state moves with the tenant (ARCHITECTURE decision
// 10: a process manager's effects are exactly once per decision). The copy
// of the tenant's events in the target is history the source's process
// managers have already decided: tenant_arrivals (migration 015) tells the
// target's runners to pass it over, and their instances, outbox, deadlines
// and history are copied in the freeze, once the source's runners have
// decided the tenant's last event. The source's runners leave a frozen
// tenant's outbox and deadlines alone, and its freeze stays after the
// switch, so only one placement ever works them.

// processTables are the process managers' tenant tables, in the order they
// are copied, with their conflict keys (process_history has none: its rows
// are appended under the target's own ids, each once).
var processTables = []struct{ name, key string }{
	{"process_instances", "tenant_id, process, instance"},
	{"process_steps", "tenant_id, process, instance, step"},
	{"process_deadlines", "tenant_id, process, instance, name"},
	{"process_history", ""},
}

// arriving records on the target, before the first event is copied, that
// every event of the tenant there is a copy (a resumed copy, or a move
// back to where the tenant was, starts over the same way).
func arriving(ctx context.Context, s Side, tenant domain.TenantID, source string) error {
	err := ownerTx(ctx, s, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO tenant_arrivals (tenant, source) VALUES ($1, $2)
			ON CONFLICT (tenant) DO UPDATE SET source = EXCLUDED.source, through_tx = NULL, through_pos = NULL, arrived_at = now()`, tenant, source)
		return err
	})
	if err != nil {
		return fmt.Errorf("record the tenant's arrival in %s: %w", s.Name, err)
	}
	return nil
}

// arrived ends the copies on the target at the tenant's last event there
// (in the freeze: no event of the tenant comes after it but its own, once
// the directory names the target).
func arrived(ctx context.Context, s Side, tenant domain.TenantID) error {
	txText, pos := "0", int64(0) // a tenant without events: nothing here is a copy
	err := tenantTx(ctx, s, tenant, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `SELECT tx_id::text AS tx_text, position FROM events ORDER BY tx_id DESC, position DESC LIMIT 1`).Scan(&txText, &pos)
		if err == pgx.ErrNoRows {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("find the tenant's last copied event in %s: %w", s.Name, err)
	}
	err = ownerTx(ctx, s, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE tenant_arrivals SET through_tx = $2::text::xid8, through_pos = $3 WHERE tenant = $1`, tenant, txText, pos)
		return err
	})
	if err != nil {
		return fmt.Errorf("record the end of the tenant's copies in %s: %w", s.Name, err)
	}
	return nil
}

// copyProcessState copies the tenant's process-manager rows from src to
// dst in one transaction of the target, as the projector login under the
// tenant's setting (the tables' own policies confine both sides to the
// tenant): instances, steps and deadlines replace the target's rows of the
// same keys (a move back finds its old ones there), history rows the
// target lacks are appended. A rerun after a crash copies the same again.
func copyProcessState(ctx context.Context, src, dst Side, tenant domain.TenantID) error {
	rows := make([]string, len(processTables))
	err := projectorTx(ctx, src, tenant, func(tx pgx.Tx) error {
		for i, t := range processTables {
			order := t.key
			if order == "" {
				order = "id"
			}
			if err := tx.QueryRow(ctx, `SELECT coalesce(json_agg(t ORDER BY `+order+`), '[]')::text FROM `+t.name+` t`).Scan(&rows[i]); err != nil {
				return fmt.Errorf("read %s: %w", t.name, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read the tenant's process state from %s: %w", src.Name, err)
	}
	if !slices.ContainsFunc(rows, func(r string) bool { return r != "[]" }) {
		return nil // no process state: nothing to write (the freeze is short)
	}
	err = projectorTx(ctx, dst, tenant, func(tx pgx.Tx) error {
		for i, t := range processTables {
			cols, err := writableColumns(ctx, tx, t.name)
			if err != nil {
				return err
			}
			list := strings.Join(cols, ", ")
			var q string
			if t.key != "" {
				var set []string
				for _, c := range cols {
					if !strings.Contains(", "+t.key+",", ", "+c+",") {
						set = append(set, c+" = EXCLUDED."+c)
					}
				}
				q = `INSERT INTO ` + t.name + ` (` + list + `) SELECT ` + list + ` FROM json_populate_recordset(NULL::` + t.name + `, $1::json)
					ON CONFLICT (` + t.key + `) DO UPDATE SET ` + strings.Join(set, ", ")
			} else {
				// Appended in the source's order, each row once: a row the
				// target has (same instance, kind, time and content) is not
				// added again.
				q = `INSERT INTO ` + t.name + ` (` + list + `) SELECT ` + list + ` FROM json_populate_recordset(NULL::` + t.name + `, $1::json) AS r
					WHERE NOT EXISTS (SELECT FROM ` + t.name + ` h WHERE h.process = r.process AND h.instance = r.instance AND h.kind = r.kind
						AND h.at = r.at AND h.summary = r.summary AND h.status_after = r.status_after)
					ORDER BY r.id`
			}
			if _, err := tx.Exec(ctx, q, rows[i]); err != nil {
				return fmt.Errorf("write %s: %w", t.name, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("write the tenant's process state to %s: %w", dst.Name, err)
	}
	return nil
}

// writableColumns lists a table's columns but generated and identity ones.
func writableColumns(ctx context.Context, tx pgx.Tx, table string) ([]string, error) {
	// pg_attribute, not information_schema.columns: this runs in the
	// freeze, and the view costs tens of milliseconds a query.
	rows, err := tx.Query(ctx, `SELECT quote_ident(attname) FROM pg_attribute
		WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped AND attidentity = '' AND attgenerated = ''
		ORDER BY attnum`, table)
	if err != nil {
		return nil, err
	}
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	if len(cols) == 0 {
		return nil, fmt.Errorf("no columns of %s visible", table)
	}
	return cols, nil
}
