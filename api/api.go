// Package api holds the HTTP contract of `strata serve`: the OpenAPI 3.1
// document of every route it serves. It is a file, not generated from the
// handlers, so that it says what clients may rely on; cmd/strata's
// TestOpenAPIRoutesBothWays holds it and the router in step, and
// internal/openapitest validates every response the HTTP tests receive
// against it. Standard library only: the engine, the modules and the test
// support may all import it.
package api

import _ "embed"

// OpenAPI is the document, served at GET /openapi.json.
//
//go:embed openapi.json
var OpenAPI []byte
