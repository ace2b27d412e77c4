package order

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The domain depends on nothing but the standard library and the rest of
// the domain: no infrastructure, no third-party modules.
func TestImportsOnlyStdlibAndDomain(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	const domainPath = "github.com/strata-es/strata/domain"
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				t.Fatal(err)
			}
			first, _, _ := strings.Cut(path, "/")
			stdlib := !strings.Contains(first, ".")
			if path == "C" || (!stdlib && path != domainPath && !strings.HasPrefix(path, domainPath+"/")) {
				t.Errorf("%s imports %q: the domain may import only the standard library and %s/...", name, path, domainPath)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no non-test Go files found")
	}
}
