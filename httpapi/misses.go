package httpapi

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/gorilla/mux"
)

// The router's own answers — to a path it does not clean, a method it does
// not serve, a path no route has — in the error shape, like every other.
//
// gorilla/mux by default "cleans" a path (/v1//orders, /v1/inventory/../receive)
// by redirecting with an empty-bodied 301 to the cleaned one: a POST that
// follows it becomes a GET of another route, and the client never learns
// why. A path is the API's contract, not a file name: one that is not in
// canonical form is refused with 400, whichever route it would have
// reached.

// allowMethods are the methods an Allow header may list.
var allowMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}

// SetMisses gives r its answers to a request none of its routes takes:
// 400 for a path not in canonical form (an empty, "." or ".." segment,
// escaped or not); 405 with Allow listing the methods r serves on the path
// when it serves the path with other methods, or when api says the path is
// the API's (a process that does not run the role serving it: its Allow
// lists what it serves there, possibly nothing); 404 otherwise. api may be
// nil. NewRouter calls it with nil; serve calls it again with the
// document's paths once every role has mounted its routes, so that a
// command route answers the same on every process without the command role.
func SetMisses(r *mux.Router, api func(*http.Request) bool) {
	miss := func(w http.ResponseWriter, req *http.Request) {
		if !canonicalPath(req.URL) {
			notCanonical(w, req)
			return
		}
		allow := allowed(r, req)
		if len(allow) == 0 && (api == nil || !api(req)) {
			WriteError(w, req, Errorf(http.StatusNotFound, CodeNotFound, "no such route"))
			return
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		msg := req.Method + " is not allowed on this path: Allow lists the methods this process serves on it"
		if len(allow) == 0 {
			msg = "this process does not serve this path (it does not run the role that does): send it to one that does"
		}
		WriteError(w, req, Errorf(http.StatusMethodNotAllowed, CodeMethodNotAllowed, msg))
	}
	r.NotFoundHandler = http.HandlerFunc(miss)
	r.MethodNotAllowedHandler = http.HandlerFunc(miss)
}

// allowed returns the methods r serves on req's path.
func allowed(r *mux.Router, req *http.Request) []string {
	var out []string
	for _, m := range allowMethods {
		probe := req.Clone(req.Context())
		probe.Method = m
		var match mux.RouteMatch
		if r.Match(probe, &match) && match.MatchErr == nil && match.Route != nil {
			out = append(out, m)
		}
	}
	return out
}

// Canonical refuses, with 400 in the error shape, a request whose path is
// not in canonical form, before the route the router matched runs: such a
// path reaches a route only through a variable ("/v1/inventory/../receive"
// is the receive route of SKU ".."), which would answer in its own words.
func Canonical(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !canonicalPath(r.URL) {
			notCanonical(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func notCanonical(w http.ResponseWriter, r *http.Request) {
	WriteError(w, r, Errorf(http.StatusBadRequest, CodeInvalidRequest,
		"the path is not in canonical form (an empty, \".\" or \"..\" segment): send the path of the resource itself"))
}

// canonicalPath reports whether u's path has no empty segment but a
// trailing one and no "." or ".." segment, escaped ("%2E%2E") or not.
func canonicalPath(u *url.URL) bool {
	segs := strings.Split(u.EscapedPath(), "/")
	for i, s := range segs {
		if i == 0 {
			if s != "" {
				return false // no leading "/"
			}
			continue
		}
		if s == "" && i < len(segs)-1 {
			return false
		}
		if d, err := url.PathUnescape(s); err == nil && (d == "." || d == "..") {
			return false
		}
	}
	return true
}
