package db

import (
	"strings"
	"testing"
)

// Classify refuses a declaration an erasure could not act on: a
// tenant-referencing table without an erase mode (or without its SQL), a
// global or kept table without its reason, a table declared twice, a
// module's anonymized table, a shadow table's name.
func TestClassifyRefusesBadDeclarations(t *testing.T) {
	t.Parallel()
	del := TableErase{Mode: EraseDelete, Count: `SELECT 0`, Delete: `DELETE FROM x WHERE $1 = $1 AND $2 > 0`}
	for _, c := range []struct {
		name   string
		tables []Table
		want   string
	}{
		{"no erase mode", []Table{{Name: "jobs", Class: ClassTenantReferencing}}, `table "jobs": a tenant-referencing table has no erase mode`},
		{"delete without its SQL", []Table{ReferencingTable("jobs", TableErase{Mode: EraseDelete, Count: `SELECT 0`}, "")}, `needs the Count and the Delete SQL`},
		{"unknown mode", []Table{ReferencingTable("jobs", TableErase{Mode: "shred"}, "")}, `unknown erase mode "shred"`},
		{"kept without a reason", []Table{ReferencingTable("jobs", TableErase{Mode: EraseKeep}, " ")}, `needs the reason it outlives`},
		{"global without a reason", []Table{GlobalTable("cfg", "")}, `a global table needs the reason`},
		{"global with an erase mode", []Table{{Name: "cfg", Class: ClassGlobal, Reason: "r", Erase: del}}, `a global table declares no erase mode`},
		{"scoped with an erase mode", []Table{{Name: "rows", Class: ClassTenantScoped, Erase: del}}, `declares no erase mode`},
		{"no class", []Table{{Name: "rows"}}, `unknown class ""`},
		{"module anonymizes", []Table{ReferencingTable("log", TableErase{Mode: EraseAnonymize}, "")}, `only the engine's audit trail is anonymized`},
		{"shadow name", []Table{TenantTable("rows__rebuild")}, `shadow table`},
		{"bad name", []Table{TenantTable("Rows")}, `not a table name`},
		{"declared twice", []Table{TenantTable("rows"), TenantTable("rows")}, `table rows is declared by line m and by line m`},
		{"the engine's table", []Table{TenantTable("events")}, `table events is declared by line strata and by line m`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Classify(Line{Name: "m", Tables: c.tables})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Classify: %v, want an error with %q", err, c.want)
			}
		})
	}
	if _, err := Classify(Line{Name: "m", Tables: []Table{TenantTable("rows"), ReferencingTable("jobs", del, "by tenant"),
		ReferencingTable("receipts", TableErase{Mode: EraseKeep}, "proof"), GlobalTable("cfg", "settings")}}); err != nil {
		t.Fatalf("valid declarations: %v", err)
	}
}

// A rebuild's shadow tables are in their live table's class when that is
// tenant-scoped, and in none otherwise.
func TestLookupClassifiesShadowTables(t *testing.T) {
	t.Parallel()
	c, err := Classify(Line{Name: "m", Tables: []Table{TenantTable("order_list"), GlobalTable("cfg", "settings")}})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{
		"order_list": true, "order_list__rebuild": true, "order_list__replaced": true, "order_list__rebuild_0123456789ab": true,
		"order_list__rebuild_0123": false, "order_list__rebuild_0123456789AB": false, "other__rebuild": false, "cfg__rebuild": false,
		"events__rebuild": true,
	} {
		got, ok := c.Lookup(name)
		if ok != want || ok && (got.Class != ClassTenantScoped || got.Name != name) {
			t.Errorf("Lookup(%s) = %+v, %v; want classified %v", name, got, ok, want)
		}
	}
}

// The engine's declarations are valid, and every one of its migrations'
// CREATE TABLE statements is declared (the catalog test checks the
// migrated schema itself, with every module's line).
func TestEngineDeclaresEveryTable(t *testing.T) {
	t.Parallel()
	c, err := Classify()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range Engine().Migrations() {
		for _, line := range strings.Split(m.Up, "\n") {
			f := strings.Fields(line)
			if len(f) < 3 || f[0] != "CREATE" || f[1] != "TABLE" {
				continue
			}
			name := strings.Trim(f[2], `"(`)
			if name == "relay_dead_letters" { // 003, dropped by 005
				continue
			}
			if _, ok := c.Lookup(name); !ok {
				t.Errorf("migration %s creates table %s, which the engine does not declare", m.ID(), name)
			}
		}
	}
}
