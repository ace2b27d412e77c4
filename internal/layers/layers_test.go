// Package layers holds one test: the dependency direction of the whole
// module, in one table, so that it stays visible and cannot drift package
// by package. It reads the import lines of every non-test Go file.
package layers

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/strata-es/strata/"

// The application's modules (ARCHITECTURE decisions 9 and 15) live in a
// tree each under examples/ (examples/orders/..., examples/inventory/...),
// outside the engine's folders: the layout is the boundary, and no list of
// modules or of engine packages is kept here. A new module is covered by
// being where modules live.
const moduleTree = "examples"

// isModule reports whether the module-relative package dir belongs to an
// application module.
func isModule(dir string) bool { return within(dir, moduleTree) }

// A module's packages say what they are by their name's suffix, as the
// examples do (order, ordercmd, orderview, orderquery, ordertest): the
// write side ends in "cmd", the projections in "view", the query side in
// "query", test kits in "test"; a package with none of these suffixes
// below a module's root is its domain. The module's root package
// (examples/<module>) wires its parts together.
type modulePart string

const (
	partRoot   modulePart = "root"
	partDomain modulePart = "domain"
	partCmd    modulePart = "cmd"
	partView   modulePart = "view"
	partQuery  modulePart = "query"
	partTest   modulePart = "test"
)

// partOf classifies a module package dir ("" for an engine package).
func partOf(dir string) modulePart {
	if !isModule(dir) {
		return ""
	}
	rest := strings.TrimPrefix(strings.TrimPrefix(dir, moduleTree), "/")
	if !strings.Contains(rest, "/") {
		return partRoot
	}
	for _, seg := range strings.Split(rest, "/")[1:] {
		for _, p := range []modulePart{partCmd, partView, partQuery, partTest} {
			if strings.HasSuffix(seg, string(p)) {
				return p
			}
		}
	}
	return partDomain
}

// adapters are the concrete event stores; only cmd/strata wires them,
// plus the tools that stand up a whole system themselves.
var adapters = []string{"eventstore/postgres", "eventstore/esdb"}

// rule: the packages at or below Under (or, with Part, the module packages
// of that part) may import nothing at or below any of Banned
// (module-relative), nor a module package of a part in BannedParts.
// StdlibOnly also bans every third-party module: only the standard library
// and the module's own packages that no Banned entry excludes.
type rule struct {
	Under       string
	Part        modulePart
	Banned      []string
	BannedParts []modulePart
	Except      []string // Under's packages the rule does not cover
	Allowed     []string // packages within Banned that Under may import nonetheless
	StdlibOnly  bool
	Why         string
}

// upper is every engine layer above the domain and the store port.
var upper = []string{"commands", "projections", "readmodels", "replay", "tenancy", "placement", "db", "httpapi", "auth", "telemetry", "internal", "cmd"}

var rules = []rule{
	{Under: "domain", StdlibOnly: true, Banned: append([]string{"eventstore", moduleTree}, upper...),
		Why: "the domain imports nothing of infrastructure: the standard library and the domain only"},
	{Under: "eventstore", Except: append([]string{"eventstore/storetest"}, adapters...), Banned: append([]string{moduleTree}, upper...),
		Why: "the store port depends on the domain only"},
	{Under: "commands", Except: []string{"commands/process"}, Banned: append([]string{"projections", "readmodels", "replay", "cmd", moduleTree}, adapters...),
		Why: "the write side knows the store port, not the read side or a concrete store"},
	{Under: "commands/process", Except: []string{"commands/process/processtest"}, Banned: append([]string{"readmodels", "replay", "cmd", moduleTree}, adapters...),
		Why: "the process-manager runtime consumes the log like a projection (checkpoints, leases, dead letters of projections) and issues commands; it never reaches into the query side or a concrete store"},
	{Under: "commands/process/processtest", Banned: []string{"readmodels", "replay", "cmd", moduleTree},
		Why: "the process test kit stands up a store and the real runtime (like storetest and projectiontest), never the query side"},
	{Under: "projections", Except: []string{"projections/projectiontest"}, Banned: append([]string{"commands", "readmodels", "replay", "cmd", moduleTree}, adapters...),
		Why: "projections read the log through the port and never reach into the write or query side"},
	{Under: "projections/projectiontest", Banned: []string{"commands", "readmodels", "cmd", moduleTree},
		Why: "the projection test kit stands up a store and a rebuild (like storetest), never the write or query side"},
	{Under: "readmodels", Banned: append([]string{"commands", "replay", "cmd", "eventstore", moduleTree}, adapters...),
		Why: "the query side reads its tables; it never calls the write side"},
	{Under: "readmodels", Except: []string{"readmodels/queryapi"}, Banned: []string{"projections"},
		Why: "readmodels reads tables; only the query API needs projections (lag and positions)"},
	{Under: "replay", Banned: append([]string{"commands", "readmodels", "cmd", moduleTree}, adapters...), Allowed: []string{"commands/process"},
		Why: "replay rebuilds through projections and the port (and retries process managers' parked instances through their runtime)"},
	{Under: "internal/console", StdlibOnly: true, Allowed: []string{"httpapi"},
		Banned: append([]string{"domain", "eventstore", moduleTree}, upper...),
		Why:    "the console is static files whose script speaks to the HTTP API: it knows the API's JSON, not the engine (only httpapi, for the one error shape)"},
	{Under: "internal", Banned: append([]string{"cmd", moduleTree}, adapters...),
		Why: "shared infrastructure does not wire concrete stores (the harnesses that stand up a whole system live under cmd/)"},
}

// engineRules hold for every engine package, found from the layout: every
// top-level folder but examples/ and cmd/ is the engine, and the engine
// knows no domain (ARCHITECTURE decision 9).
func engineRules(imports map[string][]string) []rule {
	tops := map[string]bool{}
	for dir := range imports {
		top, _, _ := strings.Cut(dir, "/")
		if top != moduleTree && top != "cmd" {
			tops[top] = true
		}
	}
	var out []rule
	for top := range tops {
		out = append(out, rule{Under: top, Banned: []string{moduleTree},
			Why: "the engine knows no domain (ARCHITECTURE decision 9): modules live under examples/ and are wired in cmd/strata"})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Under < out[j].Under })
	return out
}

// moduleRules hold within the modules: the same direction as the engine's
// layers, read from each package's part.
var moduleRules = []rule{
	{Part: partDomain, StdlibOnly: true, Banned: append([]string{"eventstore"}, upper...), BannedParts: []modulePart{partRoot, partCmd, partView, partQuery, partTest},
		Why: "a module's domain imports the standard library, the engine's domain and other modules' domains only"},
	{Part: partCmd, Banned: append([]string{"projections", "readmodels", "replay", "cmd"}, adapters...), BannedParts: []modulePart{partRoot, partView, partQuery, partTest},
		Why: "a module's write side knows the engine's write side and the domains, never a read side"},
	{Part: partView, Banned: append([]string{"commands", "readmodels", "replay", "cmd"}, adapters...), BannedParts: []modulePart{partRoot, partCmd, partQuery, partTest},
		Why: "a module's projections read the log, never the write or query side"},
	{Part: partQuery, Banned: append([]string{"commands", "replay", "cmd", "eventstore"}, adapters...), BannedParts: []modulePart{partRoot, partCmd, partTest},
		Why: "a module's query side reads its tables, never the write side"},
}

func TestDependencyDirection(t *testing.T) {
	root := moduleRoot(t)
	imports := map[string][]string{} // package dir (module-relative) -> "file: import"
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin") {
				return filepath.SkipDir
			}
			// A module in a Go module of its own (examples/loyalty) is an
			// outside team's code: it imports strata as a user does.
			if _, err := os.Stat(filepath.Join(path, "go.mod")); path != root && err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		files++
		rel, _ := filepath.Rel(root, path)
		dir := filepath.ToSlash(filepath.Dir(rel))
		for _, imp := range f.Imports {
			p, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return err
			}
			imports[dir] = append(imports[dir], filepath.Base(rel)+"\x00"+p)
		}
		if _, ok := imports[dir]; !ok {
			imports[dir] = nil
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("read only %d Go files under %s: is this the module root?", files, root)
	}
	all := append(append(append([]rule{}, rules...), engineRules(imports)...), moduleRules...)
	for _, v := range violations(imports, all) {
		t.Error(v)
	}
}

// violations checks imports (package dir -> "file\x00import path") against
// rules and returns one line per breach, plus one per rule covering no
// package (a package moved and the table did not follow).
func violations(imports map[string][]string, rules []rule) []string {
	var out []string
	for _, r := range rules {
		covered := 0
		for dir, imps := range imports {
			switch {
			case r.Part != "" && partOf(dir) != r.Part:
				continue
			case r.Part == "" && (!within(dir, r.Under) || slicesAny(r.Except, func(e string) bool { return within(dir, e) })):
				continue
			}
			covered++
			for _, fi := range imps {
				file, p, _ := strings.Cut(fi, "\x00")
				own, isOwn := strings.CutPrefix(p, module)
				switch {
				case isOwn && slicesAny(r.Banned, func(b string) bool { return within(own, b) }) &&
					!slicesAny(r.Allowed, func(a string) bool { return within(own, a) }):
				case isOwn && slices.Contains(r.BannedParts, partOf(own)):
				case !isOwn && r.StdlibOnly && (p == "C" || strings.Contains(strings.Split(p, "/")[0], ".")):
				default:
					continue
				}
				out = append(out, fmt.Sprintf("%s/%s imports %s: %s", dir, file, p, r.Why))
			}
		}
		if covered == 0 {
			what := r.Under
			if r.Part != "" {
				what = "module part " + string(r.Part)
			}
			out = append(out, fmt.Sprintf("rule for %s covers no package: a package moved; update the table", what))
		}
	}
	sort.Strings(out)
	return out
}

// TestEngineRuleBites: the rules catch an engine package that imports a
// module (the runner reaching for a module's domain, the query plumbing for
// a module's reader, a new engine folder doing the same) and a module part
// crossing its module's layers (a projection calling the write side, a
// domain importing a driver), and leave a module importing the engine
// alone.
func TestEngineRuleBites(t *testing.T) {
	imports := map[string][]string{
		"projections":                  {"runner.go\x00" + module + "examples/orders/order"},
		"readmodels/queryapi":          {"api.go\x00" + module + "examples/orders/orderquery"},
		"commands":                     {"handler.go\x00" + module + "domain/event"},
		"newsubsystem":                 {"x.go\x00" + module + "examples/inventory/stock"},
		"examples/orders/orderview":    {"order_list.go\x00" + module + "projections", "bad.go\x00" + module + "examples/orders/ordercmd"},
		"examples/orders/order":        {"order.go\x00" + module + "domain/event", "pg.go\x00github.com/jackc/pgx/v5"},
		"examples/orders/ordercmd":     {"routes.go\x00" + module + "commands/commandapi"},
		"examples/orders/orderquery":   {"reader.go\x00" + module + "readmodels"},
		"examples/orders":              {"module.go\x00" + module + "examples/orders/orderview"},
		"examples/orders/ordertest":    nil,
		"domain":                       nil,
		"eventstore":                   nil,
		"replay":                       nil,
		"db":                           nil,
		"readmodels":                   nil,
		"examples/orders/orderview/x2": {"x.go\x00" + module + "examples/orders/order"},
	}
	got := violations(imports, append(engineRules(imports), moduleRules...))
	want := []string{
		"examples/orders/order/pg.go imports github.com/jackc/pgx/v5: a module's domain imports",
		"examples/orders/orderview/bad.go imports " + module + "examples/orders/ordercmd: a module's projections read the log",
		"newsubsystem/x.go imports " + module + "examples/inventory/stock: the engine knows no domain",
		"projections/runner.go imports " + module + "examples/orders/order: the engine knows no domain",
		"readmodels/queryapi/api.go imports " + module + "examples/orders/orderquery: the engine knows no domain",
	}
	if len(got) != len(want) {
		t.Fatalf("violations:\n%s\nwant %d", strings.Join(got, "\n"), len(want))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("violation %d: %s, want %s...", i, got[i], want[i])
		}
	}
}

// within reports whether the module-relative package dir is pkg or below it.
func within(dir, pkg string) bool { return dir == pkg || strings.HasPrefix(dir, pkg+"/") }

func slicesAny(s []string, f func(string) bool) bool {
	for _, v := range s {
		if f(v) {
			return true
		}
	}
	return false
}

func moduleRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.Contains(string(b), "module "+strings.TrimSuffix(module, "/")+"\n") {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod of " + module + " above the test's directory")
		}
		dir = parent
	}
}
