package projectiontest

import (
	"context"
	"fmt"
	"regexp"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
)

// The structural half of CheckTenantTables: the catalog's rules for
// tenant tables (ARCHITECTURE decisions 3 and 13), read from pg_catalog.
// It moved here from the engine's catalog test so that every module's
// tables are held to them by the module's own tests.

// crossTenantPolicies are the policies allowed not to filter by tenant:
// the projector's read of the whole log (read-only, projector only).
var crossTenantPolicies = map[string]struct{ table, cmd, role string }{
	"events_projector_read_all": {"events", "r", db.RoleProjector},
}

// tenantExpr is the only tenant condition a policy may use.
var tenantExpr = regexp.MustCompile(`^\(tenant_id = current_setting\('app\.tenant_id'::text, true\)\)$`)

// catalogProblems inspects schema in pg_catalog and lists every table in
// no classification of cls or contradicting its declaration (ARCHITECTURE
// decision 13), every breach of decision 3 for every table that has a
// tenant_id column (so tables added later are covered without touching
// this test), plus the rules on ownership, roles, functions and views.
func catalogProblems(ctx context.Context, conn *pgx.Conn, schema string, cls *db.Classification) ([]string, error) {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	rep, err := cls.Inspect(ctx, conn, schema)
	if err != nil {
		return nil, err
	}
	for _, name := range rep.Unclassified {
		add("%s is in no classification: declare it with its migration line (tenant-scoped, tenant-referencing with its erase mode, or global with the reason)", name)
	}
	for _, m := range rep.Mismatched {
		add("%s", m)
	}

	type table struct {
		oid                     uint32
		name                    string
		rls, force              bool
		tenantAttnum            int16
		tenantNotNull, hasCheck bool
	}
	rows, err := conn.Query(ctx, `
SELECT c.oid, c.relname, c.relrowsecurity, c.relforcerowsecurity,
       coalesce(a.attnum, 0), coalesce(a.attnotnull, false),
       EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conrelid = c.oid AND k.contype = 'c' AND a.attnum = ANY (k.conkey))
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p')
ORDER BY c.relname`, schema)
	if err != nil {
		return nil, err
	}
	tables, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (table, error) {
		var t table
		err := r.Scan(&t.oid, &t.name, &t.rls, &t.force, &t.tenantAttnum, &t.tenantNotNull, &t.hasCheck)
		return t, err
	})
	if err != nil {
		return nil, err
	}
	if len(tables) == 0 {
		add("schema %s has no tables", schema)
	}
	for _, t := range tables {
		if t.tenantAttnum == 0 {
			continue // classified above: a tenant-scoped one without tenant_id is a mismatch
		}
		if !t.tenantNotNull {
			add("%s.tenant_id is nullable", t.name)
		}
		if !t.hasCheck {
			add("%s.tenant_id has no CHECK constraint", t.name)
		}
		if !t.rls {
			add("%s: row-level security is not enabled", t.name)
		}
		if !t.force {
			add("%s: row-level security is not FORCE'd (the owner would bypass it)", t.name)
		}

		prows, err := conn.Query(ctx, `
SELECT p.polname, p.polcmd::text, p.polpermissive,
       ARRAY(SELECT CASE WHEN r = 0 THEN 'public' ELSE pg_get_userbyid(r) END FROM unnest(p.polroles) r ORDER BY 1),
       coalesce(pg_get_expr(p.polqual, p.polrelid), ''), coalesce(pg_get_expr(p.polwithcheck, p.polrelid), '')
FROM pg_policy p WHERE p.polrelid = $1 ORDER BY p.polname`, t.oid)
		if err != nil {
			return nil, err
		}
		fullPolicy := false
		for prows.Next() {
			var name, cmd, using, check string
			var permissive bool
			var roles []string
			if err := prows.Scan(&name, &cmd, &permissive, &roles, &using, &check); err != nil {
				prows.Close()
				return nil, err
			}
			for _, r := range roles {
				if r != db.RoleApp && r != db.RoleProjector && r != db.RoleEraser {
					add("%s: policy %s applies to role %s (only %s, %s and %s may have policies)", t.name, name, r, db.RoleApp, db.RoleProjector, db.RoleEraser)
				}
			}
			if x, ok := crossTenantPolicies[name]; ok {
				if x.table != t.name || cmd != x.cmd || !slices.Equal(roles, []string{x.role}) || check != "" {
					add("%s: cross-tenant policy %s is not the read-only %s policy it is allowed to be", t.name, name, x.role)
				}
				continue
			}
			if !tenantExpr.MatchString(using) {
				add("%s: policy %s USING %q does not restrict to the transaction's tenant", t.name, name, using)
			}
			if check != "" && !tenantExpr.MatchString(check) {
				add("%s: policy %s WITH CHECK %q does not restrict to the transaction's tenant", t.name, name, check)
			}
			if using != "" && check != "" && tenantExpr.MatchString(using) && tenantExpr.MatchString(check) {
				fullPolicy = true
			}
		}
		prows.Close()
		if err := prows.Err(); err != nil {
			return nil, err
		}
		if !fullPolicy {
			add("%s has no policy with both USING and WITH CHECK on the tenant", t.name)
		}

		irows, err := conn.Query(ctx, `
SELECT c.relname, $2::int2 = ANY (i.indkey::int2[])
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = $1 AND i.indisunique`, t.oid, t.tenantAttnum)
		if err != nil {
			return nil, err
		}
		for irows.Next() {
			var index string
			var hasTenant bool
			if err := irows.Scan(&index, &hasTenant); err != nil {
				irows.Close()
				return nil, err
			}
			if !hasTenant {
				add("%s: unique index %s does not include tenant_id (an existence oracle across tenants)", t.name, index)
			}
		}
		irows.Close()
		if err := irows.Err(); err != nil {
			return nil, err
		}

		for _, role := range []string{db.RoleApp, db.RoleProjector} {
			var truncate bool
			if err := conn.QueryRow(ctx, `SELECT has_table_privilege($1, $2::oid, 'TRUNCATE')`, role, t.oid).Scan(&truncate); err != nil {
				return nil, err
			}
			if truncate {
				add("%s: %s may TRUNCATE it (TRUNCATE ignores row-level security)", t.name, role)
			}
		}
	}

	// Nothing in the schema belongs to the roles the code runs as.
	orows, err := conn.Query(ctx, `
SELECT c.relname, pg_get_userbyid(c.relowner) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND pg_get_userbyid(c.relowner) = ANY ($2)
UNION ALL
SELECT p.proname, pg_get_userbyid(p.proowner) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = $1 AND pg_get_userbyid(p.proowner) = ANY ($2)`, schema, []string{db.RoleApp, db.RoleProjector})
	if err != nil {
		return nil, err
	}
	for orows.Next() {
		var name, owner string
		if err := orows.Scan(&name, &owner); err != nil {
			orows.Close()
			return nil, err
		}
		add("%s is owned by %s (owners bypass row-level security)", name, owner)
	}
	orows.Close()

	// The roles themselves.
	for _, role := range []string{db.RoleApp, db.RoleProjector} {
		var super, bypass, member bool
		err := conn.QueryRow(ctx, `SELECT rolsuper, rolbypassrls, pg_has_role(oid, $2, 'MEMBER') FROM pg_roles WHERE rolname = $1`,
			role, db.RoleOwner).Scan(&super, &bypass, &member)
		if err != nil {
			return nil, fmt.Errorf("role %s: %w", role, err)
		}
		if super {
			add("role %s is a superuser", role)
		}
		if bypass {
			add("role %s has BYPASSRLS", role)
		}
		if member {
			add("role %s is a member of %s", role, db.RoleOwner)
		}
	}

	// SECURITY DEFINER functions run with their owner's rights.
	frows, err := conn.Query(ctx, `SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = $1 AND p.prosecdef`, schema)
	if err != nil {
		return nil, err
	}
	for frows.Next() {
		var name string
		if err := frows.Scan(&name); err != nil {
			frows.Close()
			return nil, err
		}
		add("function %s is SECURITY DEFINER", name)
	}
	frows.Close()

	// Views see tables with their owner's rights unless security_invoker;
	// materialized views copy rows out of reach of row-level security.
	vrows, err := conn.Query(ctx, `SELECT c.relname, c.relkind::text, coalesce(c.reloptions, '{}') FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind IN ('v', 'm')`, schema)
	if err != nil {
		return nil, err
	}
	for vrows.Next() {
		var name, kind string
		var opts []string
		if err := vrows.Scan(&name, &kind, &opts); err != nil {
			vrows.Close()
			return nil, err
		}
		switch {
		case kind == "m":
			add("materialized view %s copies rows out of row-level security", name)
		case !slices.Contains(opts, "security_invoker=true") && !slices.Contains(opts, "security_invoker=on"):
			add("view %s is not security_invoker", name)
		}
	}
	vrows.Close()
	return problems, nil
}
