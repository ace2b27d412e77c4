package cli

import (
	"net/http"

	"github.com/gorilla/mux"

	"github.com/strata-es/strata/internal/console"
)

// RouteConsole names the console's routes (docs/console.md): a static page
// and its assets, unauthenticated like /openapi.json (they hold no data
// and no token; the page's script calls the API with the operator's
// token). They are not API operations, so the OpenAPI document leaves
// them out and TestOpenAPIRoutesBothWays skips them by this name.
const RouteConsole = "console"

// mountConsole serves the operator's console at /console.
func mountConsole(r *mux.Router) {
	h := console.Handler()
	r.Handle(console.Prefix, h).Methods(http.MethodGet, http.MethodHead).Name(RouteConsole)
	r.PathPrefix(console.Prefix+"/").Handler(h).Methods(http.MethodGet, http.MethodHead).Name(RouteConsole)
}
