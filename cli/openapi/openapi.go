// Package openapi holds the HTTP contract of `strata serve`: the OpenAPI 3.1
// document of every route it serves. It is a file, not generated from the
// handlers, so that it says what clients may rely on; cmd/strata's
// TestOpenAPIRoutesBothWays holds it and the router in step, and
// cli/openapi/openapitest validates every response the HTTP tests
// receive against it. It sits in the composition root because it names
// every module's routes: a new module adds its paths here, beside its one
// entry in cmd/strata/modules, and no engine file changes. Standard library
// only.
package openapi

import _ "embed"

// OpenAPI is the document, served at GET /openapi.json.
//
//go:embed openapi.json
var OpenAPI []byte
