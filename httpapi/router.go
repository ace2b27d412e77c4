package httpapi

import (
	"net/http"
	"net/url"

	"github.com/gorilla/mux"
	"github.com/strata-es/strata/domain"
)

// NewRouter returns the router the APIs are mounted on. It matches routes on
// the escaped path: on the decoded one, "POST /v1/orders/a-1%2Fplace" is
// "/v1/orders/a-1/place" and places order a-1, so an escaped "/" in an ID
// would choose another route. Route variables therefore stay escaped;
// handlers read them with PathVar. It never redirects to a cleaned path: a
// path not in canonical form is a 400 (Canonical, misses.go). Unknown
// routes and methods answer in the error shape, a 405 with Allow
// (SetMisses).
func NewRouter() *mux.Router {
	r := mux.NewRouter().UseEncodedPath().SkipClean(true)
	r.Use(Canonical)
	SetMisses(r, nil)
	return r
}

// PathVar returns the route variable name of r decoded once, as the client
// meant it ("%61-1" is "a-1"; "a-1%2Fx" is "a-1/x", which no ID matches).
// Only routers from NewRouter leave variables escaped: on another router
// this would decode twice.
func PathVar(r *http.Request, name string) (string, error) {
	v, err := url.PathUnescape(mux.Vars(r)[name])
	if err != nil {
		return "", Errorf(http.StatusBadRequest, CodeInvalidRequest, "the path has a malformed percent-encoding")
	}
	return v, nil
}

// PathID returns the route variable name decoded once (PathVar) and checked
// as an entity ID; what names it in the error ("order id").
func PathID(r *http.Request, name, what string) (string, error) {
	id, err := PathVar(r, name)
	if err != nil {
		return "", err
	}
	if err := domain.ValidateEntityID(what, id); err != nil {
		return "", err
	}
	return id, nil
}
