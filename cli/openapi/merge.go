package openapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"go.yaml.in/yaml/v3"
)

// Fragment is one module's part of the document: an OpenAPI 3.1 document
// in YAML or JSON holding only paths, components and tags. Its references
// point at its own components or at the engine's ("#/components/responses/
// NotFound", "#/components/schemas/Money"), never at another module's: a
// module's fragment must stand with the engine alone.
type Fragment struct {
	Module string // names the module in errors
	Doc    []byte
}

type node = map[string]any

// fragmentKeys are what a fragment may hold at its top level; servers,
// security and the rest are the engine's.
var fragmentKeys = []string{"openapi", "info", "paths", "components", "tags"}

// fragmentSections are the component sections a fragment may add to;
// securitySchemes are the engine's (it authenticates every module route).
var fragmentSections = []string{"schemas", "parameters", "responses", "headers", "requestBodies", "examples", "links", "callbacks", "pathItems"}

var pathVar = regexp.MustCompile(`\{[^{}]*\}`)

// Merge returns the engine's document with every fragment merged in, each
// route-kind operation given the engine's defaults (defaults.go), as
// indented JSON with sorted keys. It fails, naming the module, on a
// fragment that is not YAML or JSON, holds more than paths, components and
// tags, defines a path (or the same template with other variable names),
// an operation ID, a component or a tag the engine or an earlier fragment
// defines, refers to something that is in neither the engine's document nor
// its own, or makes the document invalid OpenAPI 3.1 (kin-openapi's
// validation, examples included).
func Merge(engine []byte, frags ...Fragment) ([]byte, error) {
	doc, err := decodeEngine(engine)
	if err != nil {
		return nil, err
	}
	own := newOwners()
	if err := own.claimAll(doc, "the engine"); err != nil {
		return nil, fmt.Errorf("the engine's document: %w", err)
	}
	engineComponents := componentSet(doc)
	var errs []error
	var routeOps []routeOp
	for _, f := range frags {
		who := "module " + f.Module
		fd, err := decodeFragment(f.Doc)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: the OpenAPI fragment: %w", who, err))
			continue
		}
		if err := checkFragment(fd, engineComponents); err != nil {
			errs = append(errs, fmt.Errorf("%s: the OpenAPI fragment: %w", who, err))
			continue
		}
		if err := own.claimAll(fd, who); err != nil {
			errs = append(errs, fmt.Errorf("%s: the OpenAPI fragment: %w", who, err))
			continue
		}
		ops, err := mergeInto(doc, fd)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: the OpenAPI fragment: %w", who, err))
			continue
		}
		routeOps = append(routeOps, ops...)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := applyDefaults(doc, routeOps); err != nil {
		return nil, err
	}
	out, err := encode(doc)
	if err != nil {
		return nil, err
	}
	if err := Validate(context.Background(), out); err != nil {
		return nil, err
	}
	return out, nil
}

// Validate loads doc with kin-openapi's loader and validates it as an
// OpenAPI document: references resolve, schemas are well formed, the
// version's keywords only, and every example matches its schema.
func Validate(ctx context.Context, doc []byte) error {
	_, err := Load(ctx, doc)
	return err
}

// Load is Validate returning the loaded document.
func Load(ctx context.Context, doc []byte) (*openapi3.T, error) {
	t, err := openapi3.NewLoader().LoadFromData(doc)
	if err != nil {
		return nil, fmt.Errorf("load the OpenAPI document: %w", err)
	}
	if err := t.Validate(ctx, openapi3.EnableExamplesValidation()); err != nil {
		return nil, fmt.Errorf("the OpenAPI document is invalid: %w", err)
	}
	return t, nil
}

func decodeEngine(b []byte) (node, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var doc node
	if err := d.Decode(&doc); err != nil {
		return nil, fmt.Errorf("the engine's OpenAPI document: %w", err)
	}
	return doc, nil
}

// decodeFragment reads YAML (JSON is YAML too) into the same tree
// encoding/json would make.
func decodeFragment(b []byte) (node, error) {
	var v any
	if err := yaml.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	m, ok := normalize(v).(node)
	if !ok {
		return nil, errors.New("not a mapping")
	}
	return m, nil
}

func normalize(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = normalize(e)
		}
		return v
	case map[any]any:
		m := make(node, len(v))
		for k, e := range v {
			m[fmt.Sprint(k)] = normalize(e)
		}
		return m
	case []any:
		for i, e := range v {
			v[i] = normalize(e)
		}
		return v
	}
	return v
}

// checkFragment reports what a fragment may not hold, and every reference
// that resolves to neither its own components nor the engine's.
func checkFragment(f node, engine map[string]bool) error {
	var errs []error
	for k := range f {
		if !slices.Contains(fragmentKeys, k) {
			errs = append(errs, fmt.Errorf("%q: a fragment holds only %s (the rest is the engine's)", k, strings.Join(fragmentKeys, ", ")))
		}
	}
	if v, ok := f["openapi"]; ok && !strings.HasPrefix(fmt.Sprint(v), "3.1") {
		errs = append(errs, fmt.Errorf("openapi %v: the engine's document is 3.1", v))
	}
	if _, ok := f["paths"].(node); !ok && f["paths"] != nil {
		errs = append(errs, errors.New("paths: not a mapping"))
	}
	comps, _ := f["components"].(node)
	for s := range comps {
		if !slices.Contains(fragmentSections, s) {
			errs = append(errs, fmt.Errorf("components.%s: a fragment adds only %s", s, strings.Join(fragmentSections, ", ")))
		}
	}
	for p, item := range asNode(f["paths"]) {
		for m, op := range asNode(item) {
			if o, ok := op.(node); ok && isMethod(m) {
				if _, ok := o["security"]; ok {
					errs = append(errs, fmt.Errorf("%s %s: security: the engine authenticates every module route", strings.ToUpper(m), p))
				}
			}
		}
	}
	own := componentSet(f)
	walk(f, "", func(at, ref string) {
		name, ok := strings.CutPrefix(ref, "#/components/")
		if !ok {
			errs = append(errs, fmt.Errorf("%s: $ref %q: a fragment refers only to components (its own or the engine's)", at, ref))
			return
		}
		section, rest, _ := strings.Cut(name, "/")
		key := section + "/" + strings.SplitN(rest, "/", 2)[0]
		if !own[key] && !engine[key] {
			errs = append(errs, fmt.Errorf("%s: $ref %q: no such component in the fragment or the engine's document", at, ref))
		}
	})
	return errors.Join(errs...)
}

// walk calls fn with every $ref of v and where it is.
func walk(v any, at string, fn func(at, ref string)) {
	switch v := v.(type) {
	case node:
		for _, k := range sortedKeys(v) {
			if r, ok := v[k].(string); ok && k == "$ref" {
				fn(at, r)
				continue
			}
			walk(v[k], at+"/"+k, fn)
		}
	case []any:
		for i, e := range v {
			walk(e, fmt.Sprintf("%s/%d", at, i), fn)
		}
	}
}

// componentSet returns "section/name" of every component of doc.
func componentSet(doc node) map[string]bool {
	out := map[string]bool{}
	for s, names := range asNode(doc["components"]) {
		for n := range asNode(names) {
			out[s+"/"+n] = true
		}
	}
	return out
}

// owners remember who defined each path template, operation ID, component
// and tag, so that a second definition names the first.
type owners struct {
	paths, ops, comps, tags map[string]string
}

func newOwners() *owners {
	return &owners{paths: map[string]string{}, ops: map[string]string{}, comps: map[string]string{}, tags: map[string]string{}}
}

func (o *owners) claimAll(d node, who string) error {
	var errs []error
	claim := func(set map[string]string, key, what string) {
		if by, ok := set[key]; ok {
			errs = append(errs, fmt.Errorf("%s is already defined by %s", what, by))
			return
		}
		set[key] = who
	}
	for _, p := range sortedKeys(asNode(d["paths"])) {
		claim(o.paths, pathVar.ReplaceAllString(p, "{}"), "path "+p)
		for _, m := range sortedKeys(asNode(asNode(d["paths"])[p])) {
			op, ok := asNode(asNode(d["paths"])[p])[m].(node)
			if !ok || !isMethod(m) {
				continue
			}
			id, _ := op["operationId"].(string)
			if id == "" {
				errs = append(errs, fmt.Errorf("%s %s: no operationId (the route's name in the router)", strings.ToUpper(m), p))
				continue
			}
			claim(o.ops, id, "operationId "+id)
		}
	}
	for _, s := range sortedKeys(asNode(d["components"])) {
		for _, n := range sortedKeys(asNode(asNode(d["components"])[s])) {
			claim(o.comps, s+"/"+n, "component "+s+"/"+n)
		}
	}
	tags, _ := d["tags"].([]any)
	for _, t := range tags {
		if name, _ := asNode(t)["name"].(string); name != "" {
			claim(o.tags, name, "tag "+name)
		}
	}
	return errors.Join(errs...)
}

// mergeInto adds f's paths, components and tags to doc and returns the
// operations that asked for a route kind's defaults.
func mergeInto(doc, f node) ([]routeOp, error) {
	var ops []routeOp
	paths := asNode(doc["paths"])
	for _, p := range sortedKeys(asNode(f["paths"])) {
		item := asNode(asNode(f["paths"])[p])
		for _, m := range sortedKeys(item) {
			op, ok := item[m].(node)
			if !ok || !isMethod(m) {
				continue
			}
			kind, has := op[routeKey]
			if !has {
				continue
			}
			k, _ := kind.(string)
			if k != kindCommand && k != kindQuery {
				return nil, fmt.Errorf("%s %s: %s %v: want %s or %s", strings.ToUpper(m), p, routeKey, kind, kindCommand, kindQuery)
			}
			ops = append(ops, routeOp{path: p, item: item, op: op, kind: k})
		}
		paths[p] = item
	}
	doc["paths"] = paths
	comps := asNode(doc["components"])
	for s, names := range asNode(f["components"]) {
		section := asNode(comps[s])
		for n, v := range asNode(names) {
			section[n] = v
		}
		comps[s] = section
	}
	doc["components"] = comps
	if tags, ok := f["tags"].([]any); ok {
		old, _ := doc["tags"].([]any)
		doc["tags"] = append(old, tags...)
	}
	return ops, nil
}

func encode(doc node) ([]byte, error) {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	e.SetIndent("", "  ")
	if err := e.Encode(doc); err != nil {
		return nil, fmt.Errorf("encode the OpenAPI document: %w", err)
	}
	return b.Bytes(), nil
}

// asNode returns v as a mapping, or an empty one.
func asNode(v any) node {
	if m, ok := v.(node); ok {
		return m
	}
	return node{}
}

func sortedKeys(m node) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

var methods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

func isMethod(m string) bool { return slices.Contains(methods, m) }
