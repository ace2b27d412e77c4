package replay_test

import (
	"go/parser"
	gotoken "go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports keeps the dependency direction: the replay library and its
// admin API never import the write side (commands) nor the query side
// (readmodels); the composition root wires them together.
func TestImports(t *testing.T) {
	t.Parallel()
	const module = "github.com/strata-es/strata/"
	for _, dir := range []string{".", "adminapi"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(gotoken.NewFileSet(), name, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				for _, banned := range []string{"commands", "readmodels"} {
					if path == module+banned || strings.HasPrefix(path, module+banned+"/") {
						t.Errorf("%s imports %s", name, path)
					}
				}
			}
		}
	}
}
