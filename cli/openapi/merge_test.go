package openapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/strata-es/strata/cli/openapi"
	"github.com/strata-es/strata/examples"
)

// TestExamplesDocument merges the example modules' fragments into the
// engine's document and validates the result (kin-openapi, examples
// included): what serve builds at start.
func TestExamplesDocument(t *testing.T) {
	t.Parallel()
	doc, err := openapi.Document(examples.All())
	if err != nil {
		t.Fatal(err)
	}
	d, err := openapi.Load(context.Background(), doc)
	if err != nil {
		t.Fatal(err)
	}
	if d.OpenAPI != "3.1.0" || !d.IsOpenAPI31OrLater() {
		t.Fatalf("openapi %q: want 3.1.0", d.OpenAPI)
	}
	for _, p := range []string{"/livez", "/v1/orders/{id}/place", "/v1/inventory/{sku}/receive", "/v1/orders/{id}/fulfilment"} {
		if d.Paths.Find(p) == nil {
			t.Errorf("no path %s in the merged document", p)
		}
	}
	again, err := openapi.Document(examples.All())
	if err != nil || !bytes.Equal(doc, again) {
		t.Fatalf("the merged document differs between two builds (%v)", err)
	}
}

const loyaltyish = `
paths:
  /v1/points/{customer}/earn:
    post:
      operationId: points.earn
      x-strata-route: command
      requestBody: {required: true, content: {application/json: {schema: {$ref: '#/components/schemas/Earn'}}}}
      responses:
        '200': {description: done, content: {application/json: {schema: {$ref: '#/components/schemas/PointsResult'}}}}
        '422': {$ref: '#/components/responses/Unprocessable'}
  /v1/points/{customer}:
    get:
      operationId: points.balance
      x-strata-route: query
      responses:
        '200': {description: the balance, content: {application/json: {schema: {type: object}}}}
components:
  schemas:
    Earn: {type: object, properties: {points: {type: integer, minimum: 1}}, required: [points], additionalProperties: false}
    PointsResult: {type: object}
`

func merge(t *testing.T, frags ...openapi.Fragment) (map[string]any, error) {
	t.Helper()
	out, err := openapi.Merge(openapi.Engine, frags...)
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	return doc, nil
}

func at(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

// TestRouteDefaults: an operation marked x-strata-route gets what every
// route of its kind answers and reads, an entity-ID parameter for its
// path variable, the server's own answers and the request ID header; what
// the fragment states itself is kept.
func TestRouteDefaults(t *testing.T) {
	t.Parallel()
	doc, err := merge(t, openapi.Fragment{Module: "points", Doc: []byte(loyaltyish)})
	if err != nil {
		t.Fatal(err)
	}
	earn := at(doc, "paths", "/v1/points/{customer}/earn", "post")
	for _, code := range []string{"400", "401", "403", "404", "408", "409", "413", "415", "422", "429", "431", "500", "501", "503"} {
		if at(earn, "responses", code) == nil {
			t.Errorf("earn: no %s response", code)
		}
	}
	if got := at(earn, "responses", "422", "$ref"); got != "#/components/responses/Unprocessable" {
		t.Errorf("earn 422: %v", got)
	}
	for _, h := range []string{"ETag", "Idempotent-Replayed", "X-Request-Id"} {
		if at(earn, "responses", "200", "headers", h) == nil {
			t.Errorf("earn 200: no %s header", h)
		}
	}
	params, _ := json.Marshal(at(earn, "parameters"))
	for _, p := range []string{`"name":"customer"`, "IfMatch", "IdempotencyKey", "CorrelationID"} {
		if !strings.Contains(string(params), p) {
			t.Errorf("earn: parameters %s lack %s", params, p)
		}
	}
	balance := at(doc, "paths", "/v1/points/{customer}", "get")
	if at(balance, "responses", "409") != nil || at(balance, "responses", "404") == nil {
		t.Errorf("balance: a query answers no 409 and may answer 404: %v", at(balance, "responses"))
	}
	if at(balance, "responses", "200", "headers", "X-Read-Source") == nil {
		t.Error("balance 200: no X-Read-Source header")
	}
	params, _ = json.Marshal(at(balance, "parameters"))
	if !strings.Contains(string(params), "ConsistencyToken") || strings.Contains(string(params), "IfMatch") {
		t.Errorf("balance: parameters %s", params)
	}
	if at(doc, "components", "responses", "NotFound", "headers", "X-Request-Id") == nil {
		t.Error("the NotFound component has no X-Request-Id header")
	}
}

// TestMergeRefuses: each way a fragment can break the document stops the
// merge with an error naming the module and the clash.
func TestMergeRefuses(t *testing.T) {
	t.Parallel()
	other := openapi.Fragment{Module: "points", Doc: []byte(loyaltyish)}
	for _, c := range []struct {
		name, frag string
		want       []string
	}{
		{"not YAML", "paths: [", []string{"module m", "fragment"}},
		{"an engine path", `paths: {/livez: {get: {operationId: m.livez, responses: {'200': {description: ok}}}}}`,
			[]string{"module m", "path /livez is already defined by the engine"}},
		{"an engine path, other variable names", `paths: {'/v1/admin/projections/{p}': {get: {operationId: m.p, responses: {'200': {description: ok}}}}}`,
			[]string{"path /v1/admin/projections/{p} is already defined by the engine"}},
		{"another module's path", `paths: {'/v1/points/{c}/earn': {post: {operationId: m.earn, responses: {'200': {description: ok}}}}}`,
			[]string{"is already defined by module points"}},
		{"an engine component", `components: {schemas: {Error: {type: object}}}`,
			[]string{"component schemas/Error is already defined by the engine"}},
		{"an engine response", `components: {responses: {NotFound: {description: mine}}}`,
			[]string{"component responses/NotFound is already defined by the engine"}},
		{"an operation ID", `paths: {/v1/m: {get: {operationId: livez, responses: {'200': {description: ok}}}}}`,
			[]string{"operationId livez is already defined by the engine"}},
		{"no operation ID", `paths: {/v1/m: {get: {responses: {'200': {description: ok}}}}}`,
			[]string{"GET /v1/m: no operationId"}},
		{"a dangling reference", `paths: {/v1/m: {get: {operationId: m.m, responses: {'200': {$ref: '#/components/responses/Nope'}}}}}`,
			[]string{`"#/components/responses/Nope": no such component`}},
		{"another module's schema", `paths: {/v1/m: {get: {operationId: m.m, responses: {'200': {description: ok, content: {application/json: {schema: {$ref: '#/components/schemas/Earn'}}}}}}}}`,
			[]string{`"#/components/schemas/Earn": no such component`}},
		{"an external reference", `paths: {/v1/m: {get: {operationId: m.m, responses: {'200': {$ref: 'other.yaml#/x'}}}}}`,
			[]string{"refers only to components"}},
		{"servers", `servers: [{url: 'http://x'}]`, []string{`"servers": a fragment holds only`}},
		{"security", `paths: {/v1/m: {get: {operationId: m.m, security: [], responses: {'200': {description: ok}}}}}`,
			[]string{"the engine authenticates every module route"}},
		{"a route kind", `paths: {/v1/m: {get: {operationId: m.m, x-strata-route: read, responses: {'200': {description: ok}}}}}`,
			[]string{"x-strata-route read: want command or query"}},
		{"an invalid schema", `paths: {/v1/m: {get: {operationId: m.m, responses: {'200': {description: ok, content: {application/json: {schema: {type: int64}}}}}}}}`,
			[]string{"invalid"}},
		{"an example that breaks its schema", `paths: {/v1/m: {get: {operationId: m.m, parameters: [{name: n, in: query, schema: {type: integer}, example: x}], responses: {'200': {description: ok}}}}}`,
			[]string{"invalid"}},
	} {
		_, err := merge(t, other, openapi.Fragment{Module: "m", Doc: []byte(c.frag)})
		if err == nil {
			t.Errorf("%s: merged", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v\nwant it to say %q", c.name, err, w)
			}
		}
	}
}

// TestFragmentSizes measures what a module's routes cost in its fragment:
// an operation is a few lines because the error responses are shared. A
// `subscriptions`-sized module (8 operations) took 901 lines when every
// operation repeated them; the bar is a quarter of that.
func TestFragmentSizes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		file string
		max  int // lines per operation, schemas included
	}{
		{"../../examples/orders/openapi.yaml", 225 / 8},
		{"../../examples/inventory/openapi.yaml", 225 / 8},
		{"../../examples/loyalty/openapi.yaml", 225 / 8},
	} {
		b, err := os.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := openapi.Merge(openapi.Engine, openapi.Fragment{Module: "m", Doc: b}); err != nil {
			t.Fatal(err)
		}
		var frag struct {
			Paths map[string]map[string]any `yaml:"paths"`
		}
		if err := yaml.Unmarshal(b, &frag); err != nil {
			t.Fatal(err)
		}
		ops := 0
		for _, item := range frag.Paths {
			for k := range item {
				if k == "get" || k == "post" || k == "put" || k == "delete" || k == "patch" {
					ops++
				}
			}
		}
		lines := bytes.Count(b, []byte("\n"))
		t.Logf("%s: %d operations in %d lines (%.1f an operation)", c.file, ops, lines, float64(lines)/float64(ops))
		if ops == 0 || lines > c.max*ops {
			t.Errorf("%s: %d lines for %d operations; want at most %d an operation", c.file, lines, ops, c.max)
		}
	}
}
