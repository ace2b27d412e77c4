// Package httpapi is the plumbing shared by the command and query APIs: the
// one JSON error shape and the error-to-status table, strict JSON request
// decoding, bearer-token authentication that puts the tenant into the
// context, request IDs and the http.Server settings. It imports domain,
// the eventstore port (for its error kinds), auth and db.
package httpapi
