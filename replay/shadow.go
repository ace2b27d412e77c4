package replay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
)

// Shadow tables. A rebuild writes a projection into copies of its tables
// named <table>__rebuild, under a checkpoint row <name>__rebuild, and swaps
// them in by renaming; the replaced tables are renamed <table>__replaced
// and dropped right after. Constraints and indexes of a shadow table carry
// the suffix too and are renamed with it, so that after the swap every
// object has its original name.
//
// A tenant's rebuild has a slot of its own: <name>__rebuild_<h> and
// <table>__rebuild_<h>, h the first 12 hex digits of the tenant's hash
// (never its ID), so that one tenant's running or interrupted rebuild
// never blocks another tenant's or the operator's (issue 13). Its shadow
// is only copied from, never renamed into place.
const (
	rebuildSuffix  = "__rebuild"
	replacedSuffix = "__replaced"
	// tenantSlotLen is how much of a tenant's hash names its slot.
	tenantSlotLen = 12
)

// slotSuffix is the suffix of a rebuild's checkpoint key and shadow tables:
// rebuildSuffix for every tenant, rebuildSuffix_<hash> for one.
func slotSuffix(tenant string) string {
	if tenant == "" {
		return rebuildSuffix
	}
	return rebuildSuffix + "_" + tenantHash(tenant)[:tenantSlotLen]
}

// slotKey is the checkpoint key (and lease) of a rebuild of name.
func slotKey(name, tenant string) string { return name + slotSuffix(tenant) }

func ident(name string) string { return pgx.Identifier{db.Schema, name}.Sanitize() }
func quote(name string) string { return pgx.Identifier{name}.Sanitize() }

// tableInfo is what cloning needs to know of a live table.
type tableInfo struct {
	oid        uint32
	owner      string
	rls, force bool
	reloptions string
}

func inspectTable(ctx context.Context, tx pgx.Tx, name string) (tableInfo, error) {
	var t tableInfo
	var kind string
	err := tx.QueryRow(ctx, `SELECT c.oid, c.relkind::text, pg_get_userbyid(c.relowner), c.relrowsecurity, c.relforcerowsecurity,
       coalesce(array_to_string(c.reloptions, ', '), '')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2`, db.Schema, name).
		Scan(&t.oid, &kind, &t.owner, &t.rls, &t.force, &t.reloptions)
	if errors.Is(err, pgx.ErrNoRows) {
		return t, fmt.Errorf("%w: table %s does not exist: run `strata migrate up`", ErrInvalid, name)
	}
	if err != nil {
		return t, fmt.Errorf("inspect table %s: %w", name, err)
	}
	if kind != "r" {
		return t, fmt.Errorf("%w: %s is not a plain table (relkind %s): it cannot be rebuilt by swapping", ErrInvalid, name, kind)
	}
	if t.owner != db.RoleOwner {
		return t, fmt.Errorf("%w: table %s is owned by %s, not %s: fix its ownership before rebuilding", ErrInvalid, name, t.owner, db.RoleOwner)
	}
	var blockers []string
	rows, err := tx.Query(ctx, `SELECT 'foreign key ' || conname FROM pg_constraint WHERE contype = 'f' AND (conrelid = $1 OR confrelid = $1)
UNION ALL SELECT 'trigger ' || tgname FROM pg_trigger WHERE tgrelid = $1 AND NOT tgisinternal
UNION ALL SELECT 'inheritance' FROM pg_inherits WHERE inhrelid = $1 OR inhparent = $1`, t.oid)
	if err != nil {
		return t, fmt.Errorf("inspect table %s: %w", name, err)
	}
	if blockers, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return t, fmt.Errorf("inspect table %s: %w", name, err)
	}
	if len(blockers) > 0 {
		return t, fmt.Errorf("%w: table %s has %s: a swap by renaming would not carry it over", ErrInvalid, name, strings.Join(blockers, ", "))
	}
	return t, nil
}

// cloneTable creates shadow as a copy of live's shape, from the catalog:
// columns (types, collations, defaults, NOT NULL, CHECK constraints,
// identity, generated columns, storage), storage parameters, primary and
// unique keys, row-level security (ENABLE and FORCE), the same policies and
// the same grants (table and column level). Plain indexes are returned as
// statements instead of created when defer is set: a rebuild builds them
// once, after loading the rows, which is much cheaper than maintaining them
// row by row. Keys and indexes are named with suffix appended (names of
// indexes are unique in the schema, so every slot needs its own). It runs
// as the owner, in the caller's transaction. With deferRLS, enabling (and
// forcing) row-level security is returned as statements too, first: a
// rebuild that writes its rows by COPY (projections.Folder) must enable it
// after, since COPY FROM is refused on a table under row-level security.
// Policies and grants are created either way.
func cloneTable(ctx context.Context, tx pgx.Tx, live, shadow, suffix string, deferIndexes, deferRLS bool) (deferred []string, err error) {
	t, err := inspectTable(ctx, tx, live)
	if err != nil {
		return nil, err
	}
	exec := func(sql string) error {
		if _, err := tx.Exec(ctx, sql); err != nil {
			return fmt.Errorf("create shadow table %s: %s: %w", shadow, sql, err)
		}
		return nil
	}
	if err := exec(fmt.Sprintf(`CREATE TABLE %s (LIKE %s INCLUDING ALL EXCLUDING INDEXES)`, ident(shadow), ident(live))); err != nil {
		return nil, err
	}
	if t.reloptions != "" {
		if err := exec(fmt.Sprintf(`ALTER TABLE %s SET (%s)`, ident(shadow), t.reloptions)); err != nil {
			return nil, err
		}
	}
	// Keys (and exclusion constraints), named <name><suffix>.
	rows, err := tx.Query(ctx, `SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = $1 AND contype IN ('p', 'u', 'x') ORDER BY conname`, t.oid)
	if err != nil {
		return nil, fmt.Errorf("read keys of %s: %w", live, err)
	}
	type def struct{ name, sql string }
	keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (def, error) {
		var d def
		return d, r.Scan(&d.name, &d.sql)
	})
	if err != nil {
		return nil, fmt.Errorf("read keys of %s: %w", live, err)
	}
	for _, k := range keys {
		if err := checkNameLen(k.name + suffix); err != nil {
			return nil, err
		}
		if err := exec(fmt.Sprintf(`ALTER TABLE %s ADD CONSTRAINT %s %s`, ident(shadow), quote(k.name+suffix), k.sql)); err != nil {
			return nil, err
		}
	}
	// Other indexes: pg_get_indexdef gives "CREATE [UNIQUE] INDEX name ON
	// [ONLY] schema.table USING ...": keep what follows USING.
	rows, err = tx.Query(ctx, `SELECT c.relname, pg_get_indexdef(i.indexrelid), i.indisunique FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = $1 AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid) ORDER BY c.relname`, t.oid)
	if err != nil {
		return nil, fmt.Errorf("read indexes of %s: %w", live, err)
	}
	type index struct {
		name, sql string
		unique    bool
	}
	indexes, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (index, error) {
		var x index
		return x, r.Scan(&x.name, &x.sql, &x.unique)
	})
	if err != nil {
		return nil, fmt.Errorf("read indexes of %s: %w", live, err)
	}
	for _, x := range indexes {
		at := strings.Index(x.sql, " USING ")
		if at < 0 {
			return nil, fmt.Errorf("index %s of %s: unexpected definition %q", x.name, live, x.sql)
		}
		if err := checkNameLen(x.name + suffix); err != nil {
			return nil, err
		}
		unique := ""
		if x.unique {
			unique = "UNIQUE "
		}
		stmt := fmt.Sprintf(`CREATE %sINDEX %s ON %s%s`, unique, quote(x.name+suffix), ident(shadow), x.sql[at:])
		if deferIndexes && !x.unique { // unique indexes enforce what the rows must satisfy: build them now
			deferred = append(deferred, stmt)
			continue
		}
		if err := exec(stmt); err != nil {
			return nil, err
		}
	}
	var security []string
	if t.rls {
		security = append(security, fmt.Sprintf(`ALTER TABLE %s ENABLE ROW LEVEL SECURITY`, ident(shadow)))
	}
	if t.force {
		security = append(security, fmt.Sprintf(`ALTER TABLE %s FORCE ROW LEVEL SECURITY`, ident(shadow)))
	}
	if deferRLS {
		deferred = append(security, deferred...)
	} else {
		for _, stmt := range security {
			if err := exec(stmt); err != nil {
				return nil, err
			}
		}
	}
	// Policies, with the same names (they are per table).
	rows, err = tx.Query(ctx, `SELECT polname, polpermissive, polcmd::text,
       ARRAY(SELECT CASE WHEN r = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(r)) END FROM unnest(polroles) r ORDER BY 1),
       coalesce(pg_get_expr(polqual, polrelid), ''), coalesce(pg_get_expr(polwithcheck, polrelid), '')
FROM pg_policy WHERE polrelid = $1 ORDER BY polname`, t.oid)
	if err != nil {
		return nil, fmt.Errorf("read policies of %s: %w", live, err)
	}
	type policy struct {
		name, cmd, using, check string
		permissive              bool
		roles                   []string
	}
	policies, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (policy, error) {
		var p policy
		return p, r.Scan(&p.name, &p.permissive, &p.cmd, &p.roles, &p.using, &p.check)
	})
	if err != nil {
		return nil, fmt.Errorf("read policies of %s: %w", live, err)
	}
	commands := map[string]string{"r": "SELECT", "a": "INSERT", "w": "UPDATE", "d": "DELETE", "*": "ALL"}
	for _, p := range policies {
		kind := "PERMISSIVE"
		if !p.permissive {
			kind = "RESTRICTIVE"
		}
		stmt := fmt.Sprintf(`CREATE POLICY %s ON %s AS %s FOR %s TO %s`, quote(p.name), ident(shadow), kind, commands[p.cmd], strings.Join(p.roles, ", "))
		if p.using != "" {
			stmt += " USING (" + p.using + ")"
		}
		if p.check != "" {
			stmt += " WITH CHECK (" + p.check + ")"
		}
		if err := exec(stmt); err != nil {
			return nil, err
		}
	}
	// Grants: the table's and its columns' ACLs, except the owner's own.
	rows, err = tx.Query(ctx, `SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END, a.privilege_type, ''
FROM pg_class c, aclexplode(c.relacl) a WHERE c.oid = $1 AND a.grantee <> c.relowner
UNION ALL
SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END, a.privilege_type, quote_ident(t.attname)
FROM pg_attribute t, aclexplode(t.attacl) a WHERE t.attrelid = $1 AND t.attacl IS NOT NULL AND NOT t.attisdropped
ORDER BY 1, 2, 3`, t.oid)
	if err != nil {
		return nil, fmt.Errorf("read grants of %s: %w", live, err)
	}
	type grant struct{ role, priv, column string }
	grants, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (grant, error) {
		var g grant
		return g, r.Scan(&g.role, &g.priv, &g.column)
	})
	if err != nil {
		return nil, fmt.Errorf("read grants of %s: %w", live, err)
	}
	for _, g := range grants {
		priv := g.priv
		if g.column != "" {
			priv += " (" + g.column + ")"
		}
		if err := exec(fmt.Sprintf(`GRANT %s ON %s TO %s`, priv, ident(shadow), g.role)); err != nil {
			return nil, err
		}
	}
	return deferred, nil
}

// checkSecurity refuses a swap of shadow tables whose row-level security
// is not the live tables': a fold's shadow gets it only after its rows are
// written (cloneTable's deferRLS), and must not go live without.
func (s *Service) checkSecurity(ctx context.Context, m *rebuildMeta) error {
	for live, shadow := range m.Tables {
		var same bool
		if err := s.cfg.Pool.QueryRow(ctx, `SELECT l.relrowsecurity = s.relrowsecurity AND l.relforcerowsecurity = s.relforcerowsecurity
FROM pg_class l, pg_class s WHERE l.oid = $1::regclass AND s.oid = $2::regclass`, ident(live), ident(shadow)).Scan(&same); err != nil {
			return fmt.Errorf("read the row-level security of %s and %s: %w", live, shadow, err)
		}
		if !same {
			return fmt.Errorf("shadow table %s does not have the row-level security of %s: nothing was swapped", shadow, live)
		}
	}
	return nil
}

func checkNameLen(name string) error {
	if len(name) > 63 {
		return fmt.Errorf("%w: %s is longer than PostgreSQL's 63-byte names: shorten the live name to rebuild it", ErrInvalid, name)
	}
	return nil
}

// swapTables renames each live table (and its keys and indexes) to
// <table>__replaced and its shadow (and its keys and indexes) to the live
// names, in the caller's transaction, as the owner. It takes every table's
// ACCESS EXCLUSIVE lock first, with a lock timeout shorter than the
// deadlock timeout, so that a query holding one of the tables while
// waiting for another never loses to the swap: the swap gives up instead
// and is retried. Queries arriving meanwhile wait, then read the new
// tables (PostgreSQL looks a table name up again after waiting for its
// lock); prepared statements are planned again against the new tables.
func swapTables(ctx context.Context, tx pgx.Tx, tables map[string]string, order []string) (lostIndexes []string, err error) {
	if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '200ms'`); err != nil {
		return nil, err
	}
	var all []string
	for _, live := range order {
		all = append(all, ident(live), ident(tables[live]))
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE `+strings.Join(all, ", ")+` IN ACCESS EXCLUSIVE MODE`); err != nil {
		return nil, err
	}
	for _, live := range order {
		shadow := tables[live]
		objects := func(table string) (map[string]bool, map[string]bool, error) {
			cons, idx := map[string]bool{}, map[string]bool{}
			rows, err := tx.Query(ctx, `SELECT c.relname, EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid AND k.conrelid = i.indrelid)
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = $1::regclass`, ident(table))
			if err != nil {
				return nil, nil, err
			}
			defer rows.Close()
			for rows.Next() {
				var name string
				var constraint bool
				if err := rows.Scan(&name, &constraint); err != nil {
					return nil, nil, err
				}
				if constraint {
					cons[name] = true
				} else {
					idx[name] = true
				}
			}
			return cons, idx, rows.Err()
		}
		liveCons, liveIdx, err := objects(live)
		if err != nil {
			return nil, fmt.Errorf("read indexes of %s: %w", live, err)
		}
		shadowCons, shadowIdx, err := objects(shadow)
		if err != nil {
			return nil, fmt.Errorf("read indexes of %s: %w", shadow, err)
		}
		var stmts []string
		rename := func(name string, constraint bool, table, to string) {
			if constraint {
				stmts = append(stmts, fmt.Sprintf(`ALTER TABLE %s RENAME CONSTRAINT %s TO %s`, ident(table), quote(name), quote(to)))
			} else {
				stmts = append(stmts, fmt.Sprintf(`ALTER INDEX %s RENAME TO %s`, ident(name), quote(to)))
			}
		}
		for _, set := range []struct {
			names      map[string]bool
			constraint bool
		}{{liveCons, true}, {liveIdx, false}} {
			for name := range set.names {
				if !shadowCons[name+rebuildSuffix] && !shadowIdx[name+rebuildSuffix] {
					lostIndexes = append(lostIndexes, live+"."+name)
				}
				if len(name+replacedSuffix) > 63 {
					rename(name, set.constraint, live, name[:63-len(replacedSuffix)]+replacedSuffix)
				} else {
					rename(name, set.constraint, live, name+replacedSuffix)
				}
			}
		}
		stmts = append(stmts, fmt.Sprintf(`ALTER TABLE %s RENAME TO %s`, ident(live), quote(live+replacedSuffix)))
		for _, set := range []struct {
			names      map[string]bool
			constraint bool
		}{{shadowCons, true}, {shadowIdx, false}} {
			for name := range set.names {
				if base, ok := strings.CutSuffix(name, rebuildSuffix); ok {
					rename(name, set.constraint, shadow, base)
				}
			}
		}
		stmts = append(stmts, fmt.Sprintf(`ALTER TABLE %s RENAME TO %s`, ident(shadow), quote(live)))
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s); err != nil {
				return nil, fmt.Errorf("swap %s: %s: %w", live, s, err)
			}
		}
	}
	return lostIndexes, nil
}

// dropTables drops tables (if they exist), each in a transaction of its
// own as the owner, waiting at most a few seconds for queries that still
// read them.
func (s *Service) dropTables(ctx context.Context, names ...string) error {
	var errs []error
	for _, name := range names {
		var err error
		for attempt := 0; attempt < 5; attempt++ {
			err = s.ownerTx(ctx, s.cfg.Owner, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '2s'`); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `DROP TABLE IF EXISTS `+ident(name))
				return err
			})
			if err == nil || db.SQLState(err) != "55P03" {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("drop %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}
