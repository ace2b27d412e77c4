package main

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// A part of what apidiff -m said about the layout move of issue 34
// (7049fdd..1a058c2), with a root-package line and one outside the
// module added: every shape of item it writes.
const layoutMove = `Incompatible changes:
- ./cmd/strata/modules.Module.Migrations: changed from *github.com/strata-es/strata/internal/db.Line to *github.com/strata-es/strata/db.Line
- package github.com/strata-es/strata/domain/order: removed
- ./projections/projectiontest.Config.Lines: changed from []github.com/strata-es/strata/internal/db.Line to []github.com/strata-es/strata/db.Line
- Main: changed from func(context.Context, []string) int to func(context.Context, []string, ...Module) int
Compatible changes:
- package github.com/strata-es/strata/db: added
- ./projections/projectiontest.(*Kit).Close: added
- github.com/other/lib.T.F: added
`

const mod = "github.com/strata-es/strata"

func TestParse(t *testing.T) {
	t.Parallel()
	got := parse(layoutMove, mod)
	want := []change{
		{pkg: mod + "/cmd/strata/modules", what: "Module.Migrations: changed from *github.com/strata-es/strata/internal/db.Line to *github.com/strata-es/strata/db.Line"},
		{pkg: mod + "/domain/order", what: "package removed"},
		{pkg: mod + "/projections/projectiontest", what: "Config.Lines: changed from []github.com/strata-es/strata/internal/db.Line to []github.com/strata-es/strata/db.Line"},
		{pkg: mod, what: "Main: changed from func(context.Context, []string) int to func(context.Context, []string, ...Module) int"},
		{pkg: mod + "/db", what: "package added", compatible: true},
		{pkg: mod + "/projections/projectiontest", what: "(*Kit).Close: added", compatible: true},
		{pkg: "github.com/other/lib", what: "T.F: added", compatible: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parse:\n got %+v\nwant %+v", got, want)
	}
}

// A line apidiff writes outside its two lists is kept, not dropped.
func TestParseKeepsStrayLines(t *testing.T) {
	t.Parallel()
	got := parse("! second, different message for obj x\nIncompatible changes:\n- ./a.F: removed\n", "m")
	want := []change{{what: "! second, different message for obj x"}, {pkg: "m/a", what: "F: removed"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parse = %+v, want %+v", got, want)
	}
}

// Per package, the packages with a break first, each break before the
// compatible changes; a package added or removed on one line.
func TestRender(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	n := render(&out, parse(layoutMove, mod), mod)
	want := `github.com/strata-es/strata (the root package)
  INCOMPATIBLE  Main: changed from func(context.Context, []string) int to func(context.Context, []string, ...Module) int
github.com/strata-es/strata/cmd/strata/modules
  INCOMPATIBLE  Module.Migrations: changed from *github.com/strata-es/strata/internal/db.Line to *github.com/strata-es/strata/db.Line
github.com/strata-es/strata/domain/order: package removed (INCOMPATIBLE)
github.com/strata-es/strata/projections/projectiontest
  INCOMPATIBLE  Config.Lines: changed from []github.com/strata-es/strata/internal/db.Line to []github.com/strata-es/strata/db.Line
  compatible    (*Kit).Close: added
github.com/other/lib
  compatible    T.F: added
github.com/strata-es/strata/db: package added
apidiff: 4 incompatible and 3 compatible change(s) in 6 package(s)
`
	if out.String() != want {
		t.Fatalf("render:\n%s\nwant:\n%s", out.String(), want)
	}
	if n != 4 {
		t.Fatalf("render counted %d incompatible changes, want 4", n)
	}
}

func TestRenderNoChange(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if n := render(&out, parse("", mod), mod); n != 0 || !strings.Contains(out.String(), "no change to the exported API") {
		t.Fatalf("render of nothing = %d, %q", n, out.String())
	}
}
