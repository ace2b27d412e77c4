package db

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// RoleEraser is the only role that may delete a tenant's rows from the
// tenant tables, the append-only log included (ARCHITECTURE decision 13).
// It cannot log in; the owner login is a member (bootstrap grants it, like
// the other roles) and takes it with SET LOCAL ROLE in the erasure
// workflow's transactions, which also set the tenant: its policies, like
// every tenant policy, match only the transaction's tenant, so the eraser
// cannot delete another tenant's rows even by a wrong WHERE clause.
const RoleEraser = "strata_eraser"

// EraserPolicySuffix ends the name of the eraser's policy on each table.
const EraserPolicySuffix = "_eraser"

// EnsureEraserGrants gives RoleEraser SELECT and DELETE, and a policy on
// the transaction's tenant, on every table of the schema that has a
// tenant_id column and lacks them: found from the catalog, so that a
// module's new table (or a rebuild's shadow table) is covered without a
// list to update. It runs at the end of every Up and before every erasure,
// as RoleOwner (the owner of the tables) on a connection that may become
// it. It returns the tables it covered.
func EnsureEraserGrants(ctx context.Context, q interface {
	Begin(context.Context) (pgx.Tx, error)
}) ([]string, error) {
	var tables []string
	err := pgx.BeginFunc(ctx, q, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+RoleOwner); err != nil {
			return fmt.Errorf("become %s: %w", RoleOwner, err)
		}
		rows, err := tx.Query(ctx, `
SELECT c.relname,
       EXISTS (SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid AND p.polname = left(c.relname, 63 - length($2)) || $2),
       has_table_privilege($3, c.oid, 'SELECT') AND has_table_privilege($3, c.oid, 'DELETE'),
       pg_get_userbyid(c.relowner) = $4
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p')
ORDER BY c.relname`, Schema, EraserPolicySuffix, RoleEraser, RoleOwner)
		if err != nil {
			return err
		}
		type tbl struct {
			name                   string
			policy, granted, owned bool
		}
		all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (tbl, error) {
			var t tbl
			return t, r.Scan(&t.name, &t.policy, &t.granted, &t.owned)
		})
		if err != nil {
			return err
		}
		for _, t := range all {
			tables = append(tables, t.name)
			if !t.owned {
				// Not strata's (the catalog test forbids it): listed all the
				// same, so that the erasure's count of it fails loudly
				// (permission denied) instead of passing it over.
				continue
			}
			ident := pgx.Identifier{Schema, t.name}.Sanitize()
			if !t.granted {
				if _, err := tx.Exec(ctx, "GRANT SELECT, DELETE ON "+ident+" TO "+RoleEraser); err != nil {
					return fmt.Errorf("grant %s on %s: %w", RoleEraser, t.name, err)
				}
			}
			if !t.policy {
				name := t.name
				if len(name) > 63-len(EraserPolicySuffix) {
					name = name[:63-len(EraserPolicySuffix)]
				}
				stmt := "CREATE POLICY " + pgx.Identifier{name + EraserPolicySuffix}.Sanitize() + " ON " + ident + " TO " + RoleEraser +
					" USING (tenant_id = current_setting('" + TenantSetting + "', true))" +
					" WITH CHECK (tenant_id = current_setting('" + TenantSetting + "', true))"
				if _, err := tx.Exec(ctx, stmt); err != nil {
					return fmt.Errorf("create the eraser's policy on %s: %w", t.name, err)
				}
			}
		}
		return nil
	})
	return tables, err
}
