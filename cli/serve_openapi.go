package cli

import (
	"net/http"

	"github.com/gorilla/mux"

	"github.com/strata-es/strata/cli/openapi"
)

// mountOpenAPI serves the API's OpenAPI document at /openapi.json,
// unauthenticated like /livez: it describes every route of every role,
// whichever roles this process runs, and holds nothing secret.
func mountOpenAPI(r *mux.Router) {
	r.HandleFunc("/openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Write(openapi.OpenAPI) //nolint:errcheck
	}).Methods(http.MethodGet).Name("openapi")
}

// testRouterHook, set by tests only, receives each serve's router once
// every role has mounted its routes, with the base URL it serves on: the
// routes-both-ways test walks exactly the router serve built.
var testRouterHook func(baseURL string, r *mux.Router)
