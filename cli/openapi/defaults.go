package openapi

import (
	"fmt"
	"strings"
)

// routeKey marks a fragment's operation as a route of the engine's
// command API (commandapi.Mount) or query API (queryapi.Route). Its value
// is the route kind; the engine then adds to the operation what every
// route of that kind answers, so that the fragment states only what is the
// module's own: the path, the operation ID, the body, the success answer
// and any error the module's rules add.
const routeKey = "x-strata-route"

const (
	kindCommand = "command"
	kindQuery   = "query"
)

// routeOp is a fragment's operation with a route kind.
type routeOp struct {
	path string
	item node // the path item: its parameters count as the operation's
	op   node
	kind string
}

// routeDefaults is what the engine adds to an operation of one kind.
type routeDefaults struct {
	tag string
	// params are parameter components every route of the kind reads.
	params []string
	// responses are status -> response component: the answers of the
	// engine's middleware and executor. NotFound is added besides when the
	// path has a variable (an entity that may not exist).
	responses map[string]string
	// headers are header components of every 2xx answer the fragment
	// writes inline; created adds Location to a 201.
	headers []string
	created bool
}

var defaults = map[string]routeDefaults{
	kindCommand: {
		tag:    "commands",
		params: []string{"IfMatch", "IdempotencyKey", "CorrelationID"},
		responses: map[string]string{"400": "BadRequest", "401": "Unauthenticated", "403": "TenantRefused", "408": "RequestTimeout",
			"409": "VersionConflict", "413": "PayloadTooLarge", "415": "UnsupportedMediaType", "422": "Unprocessable",
			"429": "RateLimited", "500": "Internal", "503": "Unavailable"},
		headers: []string{"ETag", "Idempotent-Replayed"},
		created: true,
	},
	kindQuery: {
		tag:    "queries",
		params: []string{"ConsistencyToken", "Wait"},
		responses: map[string]string{"400": "BadRequest", "401": "Unauthenticated", "403": "TenantRefused", "408": "RequestTimeout",
			"413": "PayloadTooLarge", "429": "RateLimited", "500": "Internal", "503": "Unavailable"},
		headers: []string{"X-Read-Source"},
	},
}

// everyOperation are the answers any operation may get from the server
// itself, whatever its route (httpapi.ServerAnswers rewrites net/http's
// plain-text ones into the error shape).
var everyOperation = map[string]string{"431": "HeadersTooLarge", "501": "NotImplemented"}

// roleOperation is the answer to an API route (under /v1/) from a process
// that does not run the role serving it: 405, Allow listing what it serves
// on the path (httpapi.Misses).
var roleOperation = map[string]string{"405": "MethodNotAllowed"}

// requestIDHeader is on every answer (httpapi.WithRequestID).
const requestIDHeader = "X-Request-Id"

// applyDefaults gives each route-kind operation its kind's defaults, every
// operation an entity-ID parameter for each path variable it does not
// declare and the server's own answers, and every response the request ID
// header.
func applyDefaults(doc node, ops []routeOp) error {
	for _, r := range ops {
		d := defaults[r.kind]
		if !hasTag(r.op, d.tag) {
			tags, _ := r.op["tags"].([]any)
			r.op["tags"] = append(tags, d.tag)
		}
		for _, p := range d.params {
			addParam(doc, r.item, r.op, node{"$ref": "#/components/parameters/" + p})
		}
		res := asNode(r.op["responses"])
		for code, name := range d.responses {
			if _, ok := res[code]; !ok {
				res[code] = ref("responses", name)
			}
		}
		if _, ok := res["404"]; !ok && pathVar.MatchString(r.path) {
			res["404"] = ref("responses", "NotFound")
		}
		for code, v := range res {
			resp, ok := v.(node)
			if !ok || !strings.HasPrefix(code, "2") || resp["$ref"] != nil {
				continue
			}
			hs := asNode(resp["headers"])
			names := d.headers
			if code == "201" && d.created {
				names = append(append([]string{}, names...), "Location")
			}
			for _, h := range names {
				if _, ok := hs[h]; !ok {
					hs[h] = ref("headers", h)
				}
			}
			resp["headers"] = hs
		}
		r.op["responses"] = res
	}
	paths := asNode(doc["paths"])
	for _, p := range sortedKeys(paths) {
		item := asNode(paths[p])
		for _, m := range sortedKeys(item) {
			op, ok := item[m].(node)
			if !ok || !isMethod(m) {
				continue
			}
			for _, v := range pathVar.FindAllString(p, -1) {
				name := strings.Trim(v, "{}")
				addParam(doc, item, op, node{"name": name, "in": "path", "required": true,
					"description": "an entity ID (domain.ValidateEntityID)", "schema": ref("schemas", "EntityID")})
			}
			res := asNode(op["responses"])
			add := everyOperation
			if strings.HasPrefix(p, "/v1/") {
				add = mergeMaps(everyOperation, roleOperation)
			}
			for code, name := range add {
				if _, ok := res[code]; !ok {
					res[code] = ref("responses", name)
				}
			}
			op["responses"] = res
			for _, code := range sortedKeys(res) {
				addRequestID(res[code])
			}
		}
	}
	for _, name := range sortedKeys(asNode(asNode(doc["components"])["responses"])) {
		addRequestID(asNode(asNode(doc["components"])["responses"])[name])
	}
	if _, ok := asNode(asNode(doc["components"])["headers"])[requestIDHeader]; !ok {
		return fmt.Errorf("the engine's document has no header component %s", requestIDHeader)
	}
	return nil
}

// addParam adds p to op unless op or its path item already has a
// parameter of the same name and location.
func addParam(doc, item, op node, p node) {
	name, in := paramKey(doc, p)
	for _, list := range []any{item["parameters"], op["parameters"]} {
		ps, _ := list.([]any)
		for _, q := range ps {
			if n, i := paramKey(doc, asNode(q)); strings.EqualFold(n, name) && i == in {
				return
			}
		}
	}
	ps, _ := op["parameters"].([]any)
	op["parameters"] = append(ps, p)
}

// paramKey returns a parameter's name and location, through its $ref.
func paramKey(doc, p node) (name, in string) {
	if r, ok := p["$ref"].(string); ok {
		p = asNode(asNode(asNode(doc["components"])["parameters"])[strings.TrimPrefix(r, "#/components/parameters/")])
	}
	name, _ = p["name"].(string)
	in, _ = p["in"].(string)
	return name, in
}

func addRequestID(v any) {
	resp, ok := v.(node)
	if !ok || resp["$ref"] != nil {
		return
	}
	hs := asNode(resp["headers"])
	for h := range hs {
		if strings.EqualFold(h, requestIDHeader) {
			return
		}
	}
	hs[requestIDHeader] = ref("headers", requestIDHeader)
	resp["headers"] = hs
}

func hasTag(op node, tag string) bool {
	tags, _ := op["tags"].([]any)
	for _, t := range tags {
		if t == tag {
			return true
		}
	}
	return false
}

func ref(section, name string) node { return node{"$ref": "#/components/" + section + "/" + name} }

func mergeMaps(a, b map[string]string) map[string]string {
	out := make(map[string]string, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}
