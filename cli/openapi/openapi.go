// Package openapi builds the HTTP contract of `strata serve`: the OpenAPI
// 3.1 document served at GET /openapi.json. It is written by hand, not
// generated from the handlers, so that it says what clients may rely on.
//
// The engine's own document (openapi.json here: health, the document
// itself, admin, platform, dead letters, processes) holds the components
// every route shares — the one error shape and every error response, the
// common headers and parameters — and each module brings a fragment of its
// own (module.Module.OpenAPI): its paths and its schemas. Document merges
// them when serve starts; a fragment that redefines an engine path or
// component, one another module defines, or that is not valid OpenAPI, stops
// the start with an error naming the module (merge.go).
//
// A fragment's operation marked `x-strata-route: command` or `query` costs
// a few lines, because the engine adds what every such route of commandapi
// or queryapi answers (defaults.go): the error responses, the common
// headers and parameters, and an entity-ID parameter for each path
// variable the operation does not declare.
//
// cli's TestOpenAPIRoutesBothWays holds the merged document and the
// router in step, and openapitest validates every request and response of
// the HTTP tests against it.
package openapi

import (
	_ "embed"
	"fmt"

	"github.com/strata-es/strata/module"
)

// Engine is the engine's own document: its routes and the shared
// components the modules' fragments refer to.
//
//go:embed openapi.json
var Engine []byte

// Document returns the document of an application made of mods: the
// engine's merged with every module's fragment (modules without one add
// nothing), as served at /openapi.json.
func Document(mods module.Set) ([]byte, error) {
	frags := make([]Fragment, 0, len(mods))
	for _, m := range mods {
		if len(m.OpenAPI) > 0 {
			frags = append(frags, Fragment{Module: m.Name, Doc: m.OpenAPI})
		}
	}
	doc, err := Merge(Engine, frags...)
	if err != nil {
		return nil, fmt.Errorf("build the OpenAPI document: %w", err)
	}
	return doc, nil
}
