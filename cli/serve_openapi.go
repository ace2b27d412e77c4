package cli

import (
	"net/http"

	"github.com/gorilla/mux"
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

// testRouterHook, set by tests only, receives each serve's router once
// every role has mounted its routes, with the base URL it serves on: the
// routes-both-ways test walks exactly the router serve built.
var testRouterHook func(baseURL string, r *mux.Router)
