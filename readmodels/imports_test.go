package readmodels_test

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports keeps the dependency direction: the query side never imports
// the write side (commands); readmodels itself does not need projections.
func TestImports(t *testing.T) {
	t.Parallel()
	const module = "github.com/strata-es/strata/"
	for dir, banned := range map[string][]string{
		".":        {"commands", "projections"},
		"queryapi": {"commands"},
	} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				for _, b := range banned {
					if path == module+b || strings.HasPrefix(path, module+b+"/") {
						t.Errorf("%s imports %s", name, path)
					}
				}
			}
		}
	}
}
