package cli

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/gorilla/mux"

	"github.com/strata-es/strata/cli/openapi"
)

// mountOpenAPI serves the API's OpenAPI document (the engine's merged with
// every module's fragment, built once at start) at /openapi.json,
// unauthenticated like /livez: it describes every route of every role,
// whichever roles this process runs, and holds nothing secret.
func mountOpenAPI(r *mux.Router, doc []byte) {
	r.HandleFunc("/openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Write(doc) //nolint:errcheck
	}).Methods(http.MethodGet).Name("openapi")
}

// documentedPaths returns whether a request's path is one of doc's,
// whatever its method: it matches the path's template and every path
// variable (decoded once) matches the pattern its operation documents, so
// that /v1/admin/dead-letters/1%2Fdiscard is not the dead letter
// "1/discard" of the document.
func documentedPaths(doc []byte) (func(*http.Request) bool, error) {
	d, err := openapi.Load(context.Background(), doc)
	if err != nil {
		return nil, err
	}
	type route struct {
		r    *mux.Router
		vars map[string]*regexp.Regexp
	}
	var routes []route
	for path, item := range d.Paths.Map() {
		for _, op := range item.Operations() {
			rt := route{r: mux.NewRouter().UseEncodedPath().SkipClean(true), vars: map[string]*regexp.Regexp{}}
			rt.r.NewRoute().Path(path)
			for _, p := range append(append(openapi3.Parameters{}, item.Parameters...), op.Parameters...) {
				if p.Value == nil || p.Value.In != openapi3.ParameterInPath || p.Value.Schema == nil || p.Value.Schema.Value == nil || p.Value.Schema.Value.Pattern == "" {
					continue
				}
				re, err := regexp.Compile(p.Value.Schema.Value.Pattern)
				if err != nil {
					return nil, fmt.Errorf("the OpenAPI document: %s %s: parameter %s: %w", op.OperationID, path, p.Value.Name, err)
				}
				rt.vars[p.Value.Name] = re
			}
			routes = append(routes, rt)
		}
	}
	return func(req *http.Request) bool {
	next:
		for _, rt := range routes {
			var m mux.RouteMatch
			if !rt.r.Match(req, &m) || m.MatchErr != nil {
				continue
			}
			for name, re := range rt.vars {
				v, err := url.PathUnescape(m.Vars[name])
				if err != nil || !re.MatchString(v) {
					continue next
				}
			}
			return true
		}
		return false
	}, nil
}

// testRouterHook, set by tests only, receives each serve's router once
// every role has mounted its routes, with the base URL it serves on: the
// routes-both-ways test walks exactly the router serve built.
var testRouterHook func(baseURL string, r *mux.Router)
