package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gorilla/mux"

	"github.com/strata-es/strata/cli/openapi"
	"github.com/strata-es/strata/cli/openapi/openapitest"
	"github.com/strata-es/strata/examples"
	"github.com/strata-es/strata/internal/pgtest"
)

// Every response a test here receives from a server startServe started is
// validated against the OpenAPI document: http.DefaultTransport, which
// http.DefaultClient and the tests' own clients use, is wrapped once for
// the whole test binary, and a mismatch fails the test that started that
// server. Requests to anything else (the metrics address, a broker, a
// process started by strataProcess) pass through unchecked.
var (
	watchMu sync.Mutex
	watched = map[string]*watch{} // host:port -> the test of the server there
	routers sync.Map              // base URL -> the router serve built
)

type watch struct {
	t    *testing.T
	done bool
}

func init() {
	testRouterHook = func(baseURL string, r *mux.Router) { routers.Store(baseURL, r) }
	http.DefaultTransport = &openapitest.Transport{
		Base: http.DefaultTransport,
		Match: func(r *http.Request) bool {
			watchMu.Lock()
			defer watchMu.Unlock()
			_, ok := watched[r.URL.Host]
			return ok
		},
		Report:   reportMismatch,
		Validate: func(*http.Request) (*openapitest.Validator, error) { return openapitest.For(examples.All()...) },
	}
}

// watchOpenAPI validates the responses of the server at baseURL for t's
// duration.
func watchOpenAPI(t *testing.T, baseURL string) {
	u, err := url.Parse(baseURL)
	if err != nil {
		t.Fatal(err)
	}
	w := &watch{t: t}
	watchMu.Lock()
	watched[u.Host] = w
	watchMu.Unlock()
	t.Cleanup(func() {
		watchMu.Lock()
		defer watchMu.Unlock()
		w.done = true
		if watched[u.Host] == w {
			delete(watched, u.Host)
		}
	})
}

// reportMismatch fails the test of the server that answered req. A report
// after that test ended (a leftover request to a stopped server) is
// dropped: testing forbids it.
func reportMismatch(req *http.Request, err error) {
	watchMu.Lock()
	defer watchMu.Unlock()
	if w, ok := watched[req.URL.Host]; ok && !w.done {
		w.t.Errorf("the exchange does not match the OpenAPI document: %v", err)
	}
}

var muxVar = regexp.MustCompile(`\{([^{}:]+)(:[^{}]*)?\}`)

// TestOpenAPIRoutesBothWays walks the router `strata serve` built, with
// every role, and compares its routes (method and path template, and the
// route's name as the operation's ID) with the document's operations: a
// route the document lacks fails, and so does an operation no route serves.
// It also fetches /openapi.json, unauthenticated.
func TestOpenAPIRoutesBothWays(t *testing.T) {
	vars := map[string]string{"DATABASE_URL": pgtest.NewDatabase(t), "STRATA_DATA_DIR": t.TempDir()}
	base, _, stop := startServe(t, vars)
	defer stop()
	r, ok := routers.Load(base)
	if !ok {
		t.Fatal("serve did not hand its router to testRouterHook")
	}
	served := map[string]string{} // "METHOD /path/{var}" -> route name
	err := r.(*mux.Router).Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		tpl, err := route.GetPathTemplate()
		if err != nil {
			return nil // a subrouter's own route: matches no path of its own
		}
		if route.GetName() == RouteConsole {
			// The console's page and assets (docs/console.md) are not API
			// operations: static files for browsers, no JSON, no token.
			return nil
		}
		methods, err := route.GetMethods()
		if err != nil {
			return fmt.Errorf("route %s serves every method: the document names one per operation", tpl)
		}
		for _, m := range methods {
			served[m+" "+muxVar.ReplaceAllString(tpl, "{$1}")] = route.GetName()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	doc, err := openapi.Document(examples.All())
	if err != nil {
		t.Fatal(err)
	}
	documented := documentedOperations(t, doc)
	if len(served) < 25 {
		t.Fatalf("walked only %d routes: %v", len(served), served)
	}
	if diff := compareRoutes(served, documented); len(diff) > 0 {
		t.Errorf("the router and the OpenAPI document disagree:\n%s", strings.Join(diff, "\n"))
	}

	res, err := http.Get(base + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !bytes.Equal(body, doc) {
		t.Fatalf("GET /openapi.json: %d, %d bytes; want 200 and the %d bytes of the merged document", res.StatusCode, len(body), len(doc))
	}
}

// documentedOperations returns "METHOD /path" -> operationId of doc.
func documentedOperations(t *testing.T, doc []byte) map[string]string {
	t.Helper()
	d, err := openapi.Load(context.Background(), doc)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for path, item := range d.Paths.Map() {
		for method, op := range item.Operations() {
			out[method+" "+path] = op.OperationID
		}
	}
	return out
}

// compareRoutes lists every disagreement between served and documented
// ("METHOD /path" -> route name / operation ID), sorted.
func compareRoutes(served, documented map[string]string) []string {
	var out []string
	for k, name := range served {
		id, ok := documented[k]
		switch {
		case !ok:
			out = append(out, "served, not documented: "+k+" ("+name+")")
		case id != name:
			out = append(out, fmt.Sprintf("%s: the route is named %q, the operation %q", k, name, id))
		}
	}
	for k := range documented {
		if _, ok := served[k]; !ok {
			out = append(out, "documented, not served: "+k)
		}
	}
	slices.Sort(out)
	return out
}

// TestCompareRoutesBites: a route the document lacks, an operation no
// route serves and a renamed route each show.
func TestCompareRoutesBites(t *testing.T) {
	doc, err := openapi.Document(examples.All())
	if err != nil {
		t.Fatal(err)
	}
	documented := documentedOperations(t, doc)
	served := map[string]string{}
	for k, v := range documented {
		served[k] = v
	}
	if diff := compareRoutes(served, documented); len(diff) != 0 {
		t.Fatalf("identical sets disagree: %v", diff)
	}
	delete(served, "POST /v1/orders/{id}/pay")
	served["POST /v1/orders/{id}/refund"] = "order.refund"
	served["GET /livez"] = "health"
	want := []string{
		`GET /livez: the route is named "health", the operation "livez"`,
		"documented, not served: POST /v1/orders/{id}/pay",
		"served, not documented: POST /v1/orders/{id}/refund (order.refund)",
	}
	if diff := compareRoutes(served, documented); !slices.Equal(diff, want) {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(diff, "\n"), strings.Join(want, "\n"))
	}
}
