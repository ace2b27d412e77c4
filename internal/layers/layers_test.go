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
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/strata-es/strata/"

// rule: the packages at or below Under may import nothing at or below any
// of Banned (module-relative). StdlibOnly also bans every third-party
// module: only the standard library and the module's own packages that no
// Banned entry excludes. EngineOnly leaves the application's modules out of
// the rule; BanModules bans importing any module package.
type rule struct {
	Under      string
	Banned     []string
	Except     []string // Under's packages the rule does not cover
	Allowed    []string // packages within Banned that Under may import nonetheless
	StdlibOnly bool
	EngineOnly bool
	BanModules bool
	Why        string
}

// The application's modules (ARCHITECTURE decision 9) live beside the
// engine under its top-level names: every package below domain/,
// commands/, projections/ or readmodels/ that is not one of the engine's
// own subpackages is a module's (domain/order, commands/orders,
// projections/orders/ordertest, ...). No list of modules to keep: a new
// module is covered by being where modules live.
var (
	moduleRoots = []string{"domain", "commands", "projections", "readmodels"}
	engineSubs  = []string{"domain/event", "commands/commandapi", "commands/commandtest", "commands/process",
		"projections/relay", "projections/projectiontest", "readmodels/queryapi"}
)

// isModule reports whether the module-relative package dir belongs to an
// application module.
func isModule(dir string) bool {
	for _, root := range moduleRoots {
		if strings.HasPrefix(dir, root+"/") && !slicesAny(engineSubs, func(e string) bool { return within(dir, e) }) {
			return true
		}
	}
	return false
}

// adapters are the concrete event stores; only cmd/strata wires them,
// plus the tools that stand up a whole system themselves.
var adapters = []string{"eventstore/postgres", "eventstore/esdb"}

var rules = []rule{
	{Under: "domain", StdlibOnly: true,
		Banned: []string{"eventstore", "commands", "projections", "readmodels", "replay", "internal", "cmd"},
		Why:    "the domain imports nothing of infrastructure: the standard library and the domain only"},
	{Under: "eventstore", Except: append([]string{"eventstore/storetest"}, adapters...),
		Banned: []string{"commands", "projections", "readmodels", "replay", "internal", "cmd"},
		Why:    "the store port depends on the domain only"},
	{Under: "commands", Except: []string{"commands/process"}, Banned: append([]string{"projections", "readmodels", "replay", "cmd"}, adapters...),
		Why: "the write side knows the store port, not the read side or a concrete store"},
	{Under: "commands/process", Banned: append([]string{"readmodels", "replay", "cmd"}, adapters...),
		Why: "the process-manager runtime consumes the log like a projection (checkpoints, leases, dead letters of projections) and issues commands; it never reaches into the query side or a concrete store"},
	{Under: "projections", Except: []string{"projections/projectiontest"}, Banned: append([]string{"commands", "readmodels", "replay", "cmd"}, adapters...),
		Why: "projections read the log through the port and never reach into the write or query side"},
	{Under: "projections/projectiontest", Banned: []string{"commands", "readmodels", "cmd"},
		Why: "the projection test kit stands up a store and a rebuild (like storetest), never the write or query side"},
	{Under: "readmodels", Banned: append([]string{"commands", "replay", "cmd", "eventstore"}, adapters...),
		Why: "the query side reads its tables; it never calls the write side"},
	{Under: "readmodels", Except: []string{"readmodels/queryapi"}, EngineOnly: true, Banned: []string{"projections"},
		Why: "readmodels reads tables; only the query API needs projections (lag and positions)"},
	{Under: "replay", Banned: append([]string{"commands", "readmodels", "cmd"}, adapters...), Allowed: []string{"commands/process"},
		Why: "replay rebuilds through projections and the port (and retries process managers' parked instances through their runtime)"},
	{Under: "internal/console", StdlibOnly: true, Allowed: []string{"internal/httpapi"},
		Banned: []string{"domain", "eventstore", "commands", "projections", "readmodels", "replay", "internal", "cmd"},
		Why:    "the console is static files whose script speaks to the HTTP API: it knows the API's JSON, not the engine (only httpapi, for the one error shape)"},
	{Under: "internal", Banned: append([]string{"cmd"}, adapters...),
		Why: "shared infrastructure does not wire concrete stores (the harnesses that stand up a whole system live under cmd/)"},
}

// engineRules hold for every engine package: the engine knows no domain.
var engineRules = func() []rule {
	var out []rule
	for _, under := range []string{"domain", "commands", "projections", "readmodels", "replay", "eventstore", "internal"} {
		out = append(out, rule{Under: under, EngineOnly: true, BanModules: true,
			Why: "the engine knows no domain (ARCHITECTURE decision 9): modules are wired in cmd/strata only"})
	}
	return out
}()

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
	for _, v := range violations(imports, append(rules, engineRules...)) {
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
			if !within(dir, r.Under) || slicesAny(r.Except, func(e string) bool { return within(dir, e) }) || r.EngineOnly && isModule(dir) {
				continue
			}
			covered++
			for _, fi := range imps {
				file, p, _ := strings.Cut(fi, "\x00")
				own, isOwn := strings.CutPrefix(p, module)
				switch {
				case isOwn && slicesAny(r.Banned, func(b string) bool { return within(own, b) }) &&
					!slicesAny(r.Allowed, func(a string) bool { return within(own, a) }):
				case isOwn && r.BanModules && isModule(own):
				case !isOwn && r.StdlibOnly && (p == "C" || strings.Contains(strings.Split(p, "/")[0], ".")):
				default:
					continue
				}
				out = append(out, fmt.Sprintf("%s/%s imports %s: %s", dir, file, p, r.Why))
			}
		}
		if covered == 0 {
			out = append(out, fmt.Sprintf("rule for %s covers no package: a package moved; update the table", r.Under))
		}
	}
	sort.Strings(out)
	return out
}

// TestEngineRuleBites: the rules catch an engine package that imports a
// module (the runner reaching for domain/order, the query plumbing for a
// module's reader) and leave a module importing the engine alone.
func TestEngineRuleBites(t *testing.T) {
	imports := map[string][]string{
		"projections":              {"runner.go\x00" + module + "domain/order"},
		"readmodels/queryapi":      {"api.go\x00" + module + "readmodels/orders"},
		"commands":                 {"handler.go\x00" + module + "domain/event"},
		"projections/orders":       {"order_list.go\x00" + module + "projections"},
		"domain":                   nil,
		"eventstore":               nil,
		"replay":                   nil,
		"internal/db":              nil,
		"readmodels":               nil,
		"projections/orders/extra": {"x.go\x00" + module + "domain/order"},
	}
	got := violations(imports, engineRules)
	want := []string{
		"projections/runner.go imports " + module + "domain/order: the engine knows no domain",
		"readmodels/queryapi/api.go imports " + module + "readmodels/orders: the engine knows no domain",
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
