package db

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Table classification (ARCHITECTURE decision 13; docs/tenants.md,
// "Erasure").
//
// Every table of strata's schema is declared, with the migration line that
// creates it, in one of three classes: tenant-scoped (a tenant_id column
// under row-level security), tenant-referencing (names a tenant some other
// way, with how an erasure deals with its rows), or global (no tenant's
// data, with the reason). The erasure takes its inventory from these
// declarations. It used to take it from the catalog, as "every table with
// a tenant_id column", and so passed over every table that names a tenant
// otherwise: an export's archive stayed downloadable after a receipt that
// said every store was done (issue 29). The catalog is now a cross-check:
// a table of the schema that no line declares stops an erasure before it
// destroys anything, and fails the catalog test.

// TableClass says how a table relates to tenants.
type TableClass string

// Table classes.
const (
	// ClassTenantScoped: a tenant_id column, row-level security on the
	// transaction's tenant; an erasure deletes the tenant's rows as
	// RoleEraser under the tenant's setting.
	ClassTenantScoped TableClass = "tenant_scoped"
	// ClassTenantReferencing: names a tenant without a tenant_id column (a
	// column called tenant, a message's metadata, a parent row); an
	// erasure deals with its rows in the declared TableErase mode.
	ClassTenantReferencing TableClass = "tenant_referencing"
	// ClassGlobal: holds no tenant's data (Reason says why).
	ClassGlobal TableClass = "global"
)

// EraseMode is what an erasure does to a tenant-referencing table's rows
// of the tenant.
type EraseMode string

// Erase modes.
const (
	// EraseDelete: TableErase.Delete removes them in batches, as
	// RoleOwner; TableErase.Count returns 0 afterwards (the verification).
	EraseDelete EraseMode = "delete"
	// EraseAnonymize: the rows are kept with the tenant replaced by a
	// pseudonym of the erasure's receipt. The engine's audit trail
	// (tenant_audit) is the only such table: its procedure is the
	// erasure's own, since it depends on the receipt.
	EraseAnonymize EraseMode = "anonymize"
	// EraseKeep: the rows are kept as they are, for the Reason the
	// declaration gives (the erasure's own record and receipt, which must
	// outlive the data; the directory's tombstone). The receipt lists them.
	EraseKeep EraseMode = "keep"
)

// Table declares one table of a migration line.
type Table struct {
	// Name is the table's name in the schema.
	Name  string
	Class TableClass
	// Reason says why the table is in its class: required for
	// ClassGlobal and for EraseKeep, shown in the receipt for the latter.
	Reason string
	// Erase is how an erasure deals with the tenant's rows of a
	// ClassTenantReferencing table (zero for the other classes).
	Erase TableErase
}

// TableErase is the erasure of a tenant-referencing table.
type TableErase struct {
	Mode EraseMode
	// Count is SQL counting the tenant's rows the mode has not dealt with
	// yet; $1 is the tenant's ID. Required for EraseDelete. It is the
	// store's verification in the receipt.
	Count string
	// Delete is SQL deleting at most $2 of the tenant's rows ($1), run
	// until it deletes none (EraseDelete).
	Delete string
}

// TenantTable declares a tenant-scoped table.
func TenantTable(name string) Table { return Table{Name: name, Class: ClassTenantScoped} }

// GlobalTable declares a table that holds no tenant's data, and why.
func GlobalTable(name, reason string) Table {
	return Table{Name: name, Class: ClassGlobal, Reason: reason}
}

// ReferencingTable declares a tenant-referencing table and its erasure;
// reason says how it names the tenant (required for EraseKeep).
func ReferencingTable(name string, erase TableErase, reason string) Table {
	return Table{Name: name, Class: ClassTenantReferencing, Erase: erase, Reason: reason}
}

// LineOption configures a Line made by EmbeddedLine: an Adoption, or the
// declarations of the tables its migrations create (Declare, TenantTables).
type LineOption interface{ applyLine(*Line) }

func (a Adoption) applyLine(l *Line) { l.Adopts = append(l.Adopts, a) }

type declareOption []Table

func (d declareOption) applyLine(l *Line) { l.Tables = append(l.Tables, d...) }

// Declare declares tables the line's migrations create.
func Declare(tables ...Table) LineOption { return declareOption(tables) }

// TenantTables declares tenant-scoped tables the line's migrations create:
// what a module's read models are.
func TenantTables(names ...string) LineOption {
	out := make(declareOption, len(names))
	for i, n := range names {
		out[i] = TenantTable(n)
	}
	return out
}

// ErrUnclassified: the schema has a table that no migration line declares
// (or one whose declaration does not match it).
var ErrUnclassified = errors.New("the schema has tables in no classification")

// Shadow tables of a rebuild (package replay): <table>__rebuild,
// <table>__rebuild_<12 hex digits> (one tenant's rebuild) and
// <table>__replaced (a swap's old table, dropped right after). They are
// made at run time as copies of a live table, with its tenant_id column and
// policies, so they are in the live table's class.
var shadowName = regexp.MustCompile(`^(.+?)__(rebuild(_[0-9a-f]{12})?|replaced)$`)

// ShadowOf returns the live table a rebuild's shadow table copies.
func ShadowOf(name string) (live string, ok bool) {
	m := shadowName.FindStringSubmatch(name)
	if m == nil {
		return "", false
	}
	return m[1], true
}

var tableName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// declaredTable is a declaration and the line that made it.
type declaredTable struct {
	Table
	line string
}

// Classification is every table the engine's line and the given lines
// declare.
type Classification struct {
	tables map[string]declaredTable
	order  []string // the engine's first, each line's in declaration order
}

// Classify reads the declarations of the engine's line and of lines (a
// database's module lines). It fails on a table declared twice and on an
// invalid declaration: a global table or a kept one without a reason, a
// tenant-referencing table without an erase mode (or without its SQL), an
// anonymized table other than the engine's audit trail.
func Classify(lines ...Line) (*Classification, error) {
	all, err := withEngine(lines)
	if err != nil {
		return nil, err
	}
	c := &Classification{tables: map[string]declaredTable{}}
	var errs []error
	for _, l := range all {
		for _, t := range l.Tables {
			if err := validTable(l.Name, t); err != nil {
				errs = append(errs, err)
				continue
			}
			if prev, dup := c.tables[t.Name]; dup {
				errs = append(errs, fmt.Errorf("table %s is declared by line %s and by line %s", t.Name, prev.line, l.Name))
				continue
			}
			c.tables[t.Name] = declaredTable{Table: t, line: l.Name}
			c.order = append(c.order, t.Name)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("table classification: %w", err)
	}
	return c, nil
}

func validTable(line string, t Table) error {
	at := fmt.Sprintf("line %s, table %q", line, t.Name)
	if !tableName.MatchString(t.Name) {
		return fmt.Errorf("%s: not a table name", at)
	}
	if _, shadow := ShadowOf(t.Name); shadow {
		return fmt.Errorf("%s: the name of a rebuild's shadow table (classified as its live table's)", at)
	}
	switch t.Class {
	case ClassTenantScoped:
		if t.Erase != (TableErase{}) {
			return fmt.Errorf("%s: a tenant-scoped table is erased under row-level security, it declares no erase mode", at)
		}
	case ClassGlobal:
		if strings.TrimSpace(t.Reason) == "" {
			return fmt.Errorf("%s: a global table needs the reason it holds no tenant's data", at)
		}
		if t.Erase != (TableErase{}) {
			return fmt.Errorf("%s: a global table declares no erase mode", at)
		}
	case ClassTenantReferencing:
		switch t.Erase.Mode {
		case EraseDelete:
			if t.Erase.Count == "" || t.Erase.Delete == "" {
				return fmt.Errorf("%s: erase mode delete needs the Count and the Delete SQL", at)
			}
		case EraseAnonymize:
			if line != EngineLineName || t.Name != "tenant_audit" {
				return fmt.Errorf("%s: only the engine's audit trail is anonymized; a module's table is deleted or kept", at)
			}
		case EraseKeep:
			if strings.TrimSpace(t.Reason) == "" {
				return fmt.Errorf("%s: a kept tenant-referencing table needs the reason it outlives the tenant's data", at)
			}
		case "":
			return fmt.Errorf("%s: a tenant-referencing table has no erase mode (delete, anonymize or keep)", at)
		default:
			return fmt.Errorf("%s: unknown erase mode %q", at, t.Erase.Mode)
		}
	default:
		return fmt.Errorf("%s: unknown class %q (tenant_scoped, tenant_referencing or global)", at, t.Class)
	}
	return nil
}

// Lookup returns the declaration of table name; a rebuild's shadow table
// has its live table's when that is tenant-scoped. ok is false for a table
// no line declares.
func (c *Classification) Lookup(name string) (Table, bool) {
	if d, ok := c.tables[name]; ok {
		return d.Table, true
	}
	if live, ok := ShadowOf(name); ok {
		if d, ok := c.tables[live]; ok && d.Class == ClassTenantScoped {
			t := d.Table
			t.Name = name
			return t, true
		}
	}
	return Table{}, false
}

// Line returns the line that declares table name ("" when none does).
func (c *Classification) Line(name string) string { return c.tables[name].line }

// Tables returns every declaration: the engine's first, then each line's,
// in the order they were declared.
func (c *Classification) Tables() []Table {
	out := make([]Table, len(c.order))
	for i, n := range c.order {
		out[i] = c.tables[n].Table
	}
	return out
}

// CatalogReport is the schema compared with the classification.
type CatalogReport struct {
	// TenantScoped are the tables of the schema that are tenant-scoped
	// (declared so, and their rebuilds' shadow tables), sorted.
	TenantScoped []string
	// Present are all the tables of the schema, sorted.
	Present []string
	// Unclassified are tables of the schema that no line declares.
	Unclassified []string
	// Mismatched says, per table, where the schema contradicts its
	// declaration (a tenant-scoped table without tenant_id, a tenant_id
	// column in a table declared global or tenant-referencing).
	Mismatched []string
	// Absent are declared tables the schema does not have (a line not
	// migrated that far).
	Absent []string
}

// Err is ErrUnclassified naming every unclassified and mismatched table,
// or nil.
func (r CatalogReport) Err() error {
	var parts []string
	if len(r.Unclassified) > 0 {
		parts = append(parts, "declared by no migration line: "+strings.Join(r.Unclassified, ", "))
	}
	parts = append(parts, r.Mismatched...)
	if len(parts) == 0 {
		return nil
	}
	return fmt.Errorf("%w (%s): declare each table with its migration line (db.Declare, db.TenantTables) as tenant-scoped, tenant-referencing with its erase mode, or global with the reason",
		ErrUnclassified, strings.Join(parts, "; "))
}

// Inspect compares the tables of schema (ordinary and partitioned, read
// from pg_catalog, which every role may read) with the classification.
func (c *Classification) Inspect(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, schema string) (CatalogReport, error) {
	rows, err := q.Query(ctx, `
SELECT c.relname,
       EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p')
ORDER BY c.relname`, schema)
	if err != nil {
		return CatalogReport{}, fmt.Errorf("read the schema's tables: %w", err)
	}
	type rel struct {
		name      string
		hasTenant bool
	}
	rels, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (rel, error) {
		var x rel
		return x, r.Scan(&x.name, &x.hasTenant)
	})
	if err != nil {
		return CatalogReport{}, fmt.Errorf("read the schema's tables: %w", err)
	}
	var rep CatalogReport
	for _, r := range rels {
		rep.Present = append(rep.Present, r.name)
		t, ok := c.Lookup(r.name)
		switch {
		case !ok:
			rep.Unclassified = append(rep.Unclassified, r.name)
		case t.Class == ClassTenantScoped && !r.hasTenant:
			rep.Mismatched = append(rep.Mismatched, r.name+" is declared tenant-scoped but has no tenant_id column")
		case t.Class != ClassTenantScoped && r.hasTenant:
			rep.Mismatched = append(rep.Mismatched, fmt.Sprintf("%s has a tenant_id column but is declared %s (a table with tenant_id is tenant-scoped)", r.name, t.Class))
		case t.Class == ClassTenantScoped:
			rep.TenantScoped = append(rep.TenantScoped, r.name)
		}
	}
	for _, n := range c.order {
		if !slices.Contains(rep.Present, n) {
			rep.Absent = append(rep.Absent, n)
		}
	}
	sort.Strings(rep.Absent)
	return rep, nil
}
