package main

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// change is one line of apidiff's report, attributed to its package.
type change struct {
	pkg        string // import path; "" for a line apidiff wrote outside its lists
	what       string // the object and what happened to it, without the package
	compatible bool
}

// parse reads apidiff -m's text: an "Incompatible changes:" list then a
// "Compatible changes:" list, each line "- OBJECT: MESSAGE" where OBJECT is
// "package PATH" for a package added or removed, "./REL.Name..." for a name
// in a package below the module's root, "Name..." for one in the root
// package itself and "PATH.Name..." for one outside the module.
func parse(text, module string) []change {
	var out []change
	compatible := false
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "Incompatible changes:":
			compatible = false
			continue
		case line == "Compatible changes:":
			compatible = true
			continue
		case strings.TrimSpace(line) == "":
			continue
		}
		item, ok := strings.CutPrefix(line, "- ")
		if !ok {
			out = append(out, change{what: line, compatible: compatible})
			continue
		}
		pkg, what := attribute(item, module)
		out = append(out, change{pkg: pkg, what: what, compatible: compatible})
	}
	return out
}

// attribute splits one item into its package's import path and the rest.
func attribute(item, module string) (pkg, what string) {
	if rest, ok := strings.CutPrefix(item, "package "); ok {
		if path, verdict, ok := strings.Cut(rest, ": "); ok {
			return path, "package " + verdict
		}
	}
	// The object's name ends at the first space: a message follows it.
	name, _, _ := strings.Cut(item, " ")
	rel, inModule := strings.CutPrefix(name, "./")
	if !inModule && !strings.Contains(name, "/") {
		return module, item
	}
	slash := strings.LastIndex(rel, "/")
	dot := strings.Index(rel[slash+1:], ".")
	if dot < 0 {
		return module, item
	}
	path := rel[:slash+1+dot]
	what = strings.TrimPrefix(item, name[:len(name)-len(rel)]+path+".")
	if inModule {
		path = module + "/" + path
	}
	return path, what
}

// render prints the changes per package, packages with an incompatible
// change first, and returns how many changes are incompatible.
func render(w io.Writer, changes []change, module string) (incompatible int) {
	if len(changes) == 0 {
		fmt.Fprintln(w, "apidiff: no change to the exported API")
		return 0
	}
	byPkg := map[string][]change{}
	broken := map[string]bool{}
	compatible := 0
	for _, ch := range changes {
		byPkg[ch.pkg] = append(byPkg[ch.pkg], ch)
		if ch.compatible {
			compatible++
		} else {
			broken[ch.pkg] = true
			incompatible++
		}
	}
	pkgs := slices.Collect(maps.Keys(byPkg))
	slices.SortFunc(pkgs, func(a, b string) int {
		if broken[a] != broken[b] {
			if broken[a] {
				return -1
			}
			return 1
		}
		return cmp.Compare(a, b)
	})
	for _, p := range pkgs {
		name := p
		switch {
		case p == "":
			name = "(apidiff also said)"
		case p == module:
			name = module + " (the root package)"
		}
		list := byPkg[p]
		if len(list) == 1 && strings.HasPrefix(list[0].what, "package ") {
			fmt.Fprintf(w, "%s: %s%s\n", name, list[0].what, verdict(list[0]))
			continue
		}
		fmt.Fprintln(w, name)
		slices.SortStableFunc(list, func(a, b change) int {
			if a.compatible != b.compatible {
				if b.compatible {
					return -1
				}
				return 1
			}
			return 0
		})
		for _, ch := range list {
			label := "compatible  "
			if !ch.compatible {
				label = "INCOMPATIBLE"
			}
			fmt.Fprintf(w, "  %s  %s\n", label, ch.what)
		}
	}
	fmt.Fprintf(w, "apidiff: %d incompatible and %d compatible change(s) in %d package(s)\n", incompatible, compatible, len(pkgs))
	return incompatible
}

func verdict(ch change) string {
	if ch.compatible {
		return ""
	}
	return " (INCOMPATIBLE)"
}
