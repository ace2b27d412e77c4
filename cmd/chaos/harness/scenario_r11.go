package harness

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// fuzzReq is one request of R11.
type fuzzReq struct {
	Method string
	Path   string
	Token  string
	Header http.Header
	Body   []byte
}

// fuzzCase is one randomized attack: one request, or a foreign-ID request
// and its twin with an ID that exists nowhere, which must answer the same.
type fuzzCase struct {
	kind string
	req  fuzzReq
	twin *fuzzReq
	// foreign is the foreign ID of a pair (substituted by its twin when
	// the two responses are compared).
	foreign string
	// want is the status the request must get (0: not fixed).
	want int
	// wantAny lists acceptable statuses when want is 0 (nil: any non-5xx).
	wantAny []int
	// check looks at a response beyond status and markers.
	check func(status int, body []byte) string
}

type fuzzResp struct {
	status int
	body   []byte
	header http.Header
	err    error
}

// r11Verdict counts what R11 found.
type r11Verdict struct {
	requests    atomic.Int64
	mu          sync.Mutex
	serverErr   int
	transport   int
	leaks       int
	pairDiffers int
	pairs       int
	wrongStatus int
	wrongData   int
	byKind      map[string]int
	statuses    map[int]int
	examples    []string
}

func (v *r11Verdict) fail(counter *int, format string, args ...any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	*counter++
	if len(v.examples) < 15 {
		v.examples = append(v.examples, fmt.Sprintf(format, args...))
	}
}

// runR11 sends randomized cross-tenant requests as tenant A (and forged or
// broken credentials) and checks every response.
func (e *env) runR11(ctx context.Context, r *Result, f *tenancyFixture) error {
	cfg := e.cfg.R11
	r.Title = "cross-tenant HTTP fuzzing"
	rng := e.rng(R11, "cases")
	cases := f.fuzzCases(rng, cfg.Requests)
	v := &r11Verdict{byKind: map[string]int{}, statuses: map[int]int{}}
	began := time.Now()
	work := make(chan fuzzCase)
	var wg sync.WaitGroup
	for w := 0; w < cfg.Workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range work {
				f.runCase(ctx, c, v)
			}
		}()
	}
	for _, c := range cases {
		select {
		case work <- c:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(work)
	wg.Wait()
	e.logf("R11: %d requests in %s", v.requests.Load(), time.Since(began).Round(time.Millisecond))

	// Nothing A sent may have reached B's streams.
	conn, err := connectAdmin(ctx, f.url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var bEvents int64
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM events WHERE tenant_id = $1`, f.b).Scan(&bEvents); err != nil {
		return err
	}

	r.check("randomized requests sent", fmt.Sprintf(">= %d", cfg.Requests), v.requests.Load(), v.requests.Load() >= int64(cfg.Requests))
	r.zero("responses with tenant B's data (canary markers)", v.leaks)
	r.zero("A's own reads showing other numbers than A's data", v.wrongData)
	r.zero("5xx responses", v.serverErr)
	r.check("foreign IDs answer exactly like missing ones", "all pairs equal",
		fmt.Sprintf("%d/%d equal", v.pairs-v.pairDiffers, v.pairs), v.pairDiffers == 0 && v.pairs > 0)
	r.zero("unexpected statuses (401 bad token, 403 scope, 404/400 ...)", v.wrongStatus)
	r.zero("events appended to tenant B by these requests", int(bEvents-f.bEventsAtStart))
	r.zero("requests without a response", v.transport)
	kinds := make([]string, 0, len(v.byKind))
	for k := range v.byKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %d", k, v.byKind[k]))
	}
	r.note("cases: %s", strings.Join(parts, ", "))
	st := map[string]int{}
	for s, n := range v.statuses {
		st[fmt.Sprint(s)] = n
	}
	r.note("statuses: %s", formatCounts(st))
	for _, ex := range v.examples {
		r.note("%s", ex)
	}
	return nil
}

func (f *tenancyFixture) send(ctx context.Context, q fuzzReq) fuzzResp {
	status, body, hdr, err := f.do(ctx, q.Method, q.Path, q.Token, q.Body, q.Header)
	return fuzzResp{status, body, hdr, err}
}

func (f *tenancyFixture) runCase(ctx context.Context, c fuzzCase, v *r11Verdict) {
	reqs := []fuzzReq{c.req}
	if c.twin != nil {
		reqs = append(reqs, *c.twin)
	}
	var resps []fuzzResp
	for _, q := range reqs {
		res := f.send(ctx, q)
		v.requests.Add(1)
		resps = append(resps, res)
		v.mu.Lock()
		v.byKind[c.kind]++
		v.statuses[res.status]++
		v.mu.Unlock()
		desc := fmt.Sprintf("%s %s %s", c.kind, q.Method, q.Path)
		if res.err != nil {
			v.fail(&v.transport, "%s: no response: %v", desc, res.err)
			continue
		}
		if res.status >= 500 {
			v.fail(&v.serverErr, "%s: %d %s", desc, res.status, oneLine(string(res.body), 160))
		}
		// Canary markers: any B-only string in the response that the
		// request did not carry itself.
		reqText := requestText(q)
		respText := string(res.body)
		for k, vs := range res.header {
			respText += "\n" + k + ": " + strings.Join(vs, ",")
		}
		if m := f.leakedMarker(respText, reqText); m != "" {
			v.fail(&v.leaks, "LEAK: %s: response contains %q: %s", desc, m, oneLine(string(res.body), 200))
		}
	}
	if len(resps) == 0 || resps[0].err != nil {
		return
	}
	first := resps[0]
	desc := fmt.Sprintf("%s %s %s", c.kind, c.req.Method, c.req.Path)
	switch {
	case c.want != 0 && first.status != c.want:
		v.fail(&v.wrongStatus, "%s: status %d, want %d: %s", desc, first.status, c.want, oneLine(string(first.body), 160))
	case c.want == 0 && c.wantAny != nil && !containsInt(c.wantAny, first.status):
		v.fail(&v.wrongStatus, "%s: status %d, want one of %v: %s", desc, first.status, c.wantAny, oneLine(string(first.body), 160))
	}
	if c.check != nil {
		if msg := c.check(first.status, first.body); msg != "" {
			v.fail(&v.wrongData, "%s: %s", desc, msg)
		}
	}
	if c.twin != nil && len(resps) == 2 && resps[1].err == nil {
		v.mu.Lock()
		v.pairs++
		v.mu.Unlock()
		twin := resps[1]
		fb := strings.ReplaceAll(string(first.body), c.foreign, f.twin(c.foreign))
		same := first.status == twin.status && fb == string(twin.body) &&
			first.header.Get("Content-Type") == twin.header.Get("Content-Type")
		if c.kind == "foreign-body-create" {
			// Both create an order of A's: same status and version; the
			// positions differ by nature.
			same = first.status == twin.status && versionOf(first.body) == versionOf(twin.body)
		}
		if !same {
			v.fail(&v.pairDiffers, "%s: foreign answered %d %s, missing twin %d %s", desc,
				first.status, oneLine(string(first.body), 120), twin.status, oneLine(string(twin.body), 120))
		}
	}
}

func versionOf(body []byte) int64 {
	var res struct {
		Version int64 `json:"version"`
	}
	_ = json.Unmarshal(body, &res)
	return res.Version
}

func containsInt(xs []int, x int) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

func requestText(q fuzzReq) string {
	var b strings.Builder
	b.WriteString(q.Path)
	if u, err := url.PathUnescape(q.Path); err == nil {
		b.WriteString("\n" + u)
	}
	for k, vs := range q.Header {
		b.WriteString("\n" + k + ": " + strings.Join(vs, ","))
	}
	b.WriteString("\n")
	b.Write(q.Body)
	return b.String()
}

// fuzzCases generates n requests' worth of cases.
func (f *tenancyFixture) fuzzCases(rng *rand.Rand, n int) []fuzzCase {
	type gen struct {
		weight int
		make   func() fuzzCase
	}
	pick := func(xs []string) string { return xs[rng.IntN(len(xs))] }
	key := 0
	newKey := func() string { key++; return fmt.Sprintf("r11-%d", key) }
	gens := []gen{
		{12, func() fuzzCase { // foreign order ID in the path of a query
			id := pick(f.bPathOrders)
			p := "/v1/orders/"
			suffix := ""
			if rng.IntN(3) == 0 {
				suffix = "?wait=1s"
			}
			q := fuzzReq{Method: http.MethodGet, Path: p + id + suffix, Token: f.tokA}
			t := q
			t.Path = p + f.twin(id) + suffix
			return fuzzCase{kind: "foreign-order-get", req: q, twin: &t, foreign: id, want: http.StatusNotFound}
		}},
		{8, func() fuzzCase {
			id := pick(f.bCustomers)
			q := fuzzReq{Method: http.MethodGet, Path: "/v1/customers/" + id + "/summary", Token: f.tokA}
			t := q
			t.Path = "/v1/customers/" + f.twin(id) + "/summary"
			return fuzzCase{kind: "foreign-customer-summary", req: q, twin: &t, foreign: id, want: http.StatusNotFound}
		}},
		{8, func() fuzzCase { // foreign ID in a query parameter
			id := pick(f.bCustomers)
			extra := []string{"", "&status=paid", "&status=draft", "&limit=1", "&limit=200"}[rng.IntN(5)]
			q := fuzzReq{Method: http.MethodGet, Path: "/v1/orders?customer_id=" + id + extra, Token: f.tokA}
			t := q
			t.Path = "/v1/orders?customer_id=" + f.twin(id) + extra
			return fuzzCase{kind: "foreign-customer-filter", req: q, twin: &t, foreign: id, want: http.StatusOK}
		}},
		{16, func() fuzzCase { // foreign order ID in a command's path, sometimes with B's own request and key
			if rng.IntN(4) == 0 && len(f.bRequests) > 0 {
				br := f.bRequests[rng.IntN(len(f.bRequests))]
				for _, id := range f.bPathOrders {
					if strings.Contains(br.Path, "/"+id+"/") {
						q := fuzzReq{Method: br.Method, Path: br.Path, Token: f.tokA, Body: br.Body, Header: http.Header{"Idempotency-Key": {br.Key}}}
						t := q
						t.Path = strings.Replace(br.Path, id, f.twin(id), 1)
						t.Header = http.Header{"Idempotency-Key": {newKey()}}
						return fuzzCase{kind: "foreign-command-b-key", req: q, twin: &t, foreign: id, want: http.StatusNotFound}
					}
				}
			}
			id := pick(f.bPathOrders)
			var method, suffix string
			var body []byte
			switch rng.IntN(5) {
			case 0:
				method, suffix = http.MethodPost, "/lines"
				body, _ = json.Marshal(map[string]any{"product_id": pick(f.bProducts), "quantity": 1, "unit_price": map[string]any{"amount": 7_000_000, "currency": "EUR"}})
			case 1:
				method, suffix = http.MethodPost, "/place"
			case 2:
				method, suffix = http.MethodPost, "/pay"
				body = []byte(`{"payment_reference":"r11"}`)
			case 3:
				method, suffix = http.MethodPost, "/cancel"
				body = []byte(`{"reason":"r11"}`)
			default:
				method, suffix = http.MethodDelete, "/lines/"+pick(f.aProducts)
			}
			hdr := http.Header{}
			if rng.IntN(2) == 0 {
				hdr.Set("Idempotency-Key", newKey())
			}
			if rng.IntN(4) == 0 {
				hdr.Set("If-Match", `"3"`)
			}
			q := fuzzReq{Method: method, Path: "/v1/orders/" + id + suffix, Token: f.tokA, Body: body, Header: hdr}
			t := q
			t.Path = "/v1/orders/" + f.twin(id) + suffix
			t.Header = hdr.Clone()
			if t.Header.Get("Idempotency-Key") != "" {
				t.Header.Set("Idempotency-Key", newKey())
			}
			return fuzzCase{kind: "foreign-command", req: q, twin: &t, foreign: id, want: http.StatusNotFound}
		}},
		{8, func() fuzzCase { // a tenant header contradicting the token
			id := pick(f.aOrders)
			hdr := http.Header{}
			for _, h := range []string{"X-Tenant-Id", "X-Tenant", "Tenant", "X-Org-Id", "X-Tenant-Id"}[:1+rng.IntN(5)] {
				hdr.Add(h, f.b)
			}
			path := "/v1/orders/" + id
			check := f.ownOrderCheck(id)
			if rng.IntN(3) == 0 {
				c := pick(f.aCustomers)
				path, check = "/v1/customers/"+c+"/summary", f.summaryCheck(c)
			}
			return fuzzCase{kind: "tenant-header", req: fuzzReq{Method: http.MethodGet, Path: path, Token: f.tokA, Header: hdr},
				want: http.StatusOK, check: check}
		}},
		{4, func() fuzzCase {
			hdr := http.Header{"X-Tenant-Id": {f.b}}
			path := []string{"/v1/orders?limit=200", "/v1/orders?status=paid&limit=200", "/v1/orders?customer_id=" + pick(f.aCustomers)}[rng.IntN(3)]
			return fuzzCase{kind: "tenant-header-list", req: fuzzReq{Method: http.MethodGet, Path: path, Token: f.tokA, Header: hdr},
				want: http.StatusOK, check: f.listCheck()}
		}},
		{3, func() fuzzCase { // the tenant in the path or the query
			path := []string{"/tenants/" + f.b + "/v1/orders/o-1", "/v1/tenants/" + f.b + "/orders", "/" + f.b + "/v1/orders/o-1"}[rng.IntN(3)]
			return fuzzCase{kind: "tenant-path", req: fuzzReq{Method: http.MethodGet, Path: path, Token: f.tokA}, want: http.StatusNotFound}
		}},
		{3, func() fuzzCase {
			return fuzzCase{kind: "tenant-query", req: fuzzReq{Method: http.MethodGet, Path: "/v1/orders/o-1?tenant=" + f.b, Token: f.tokA}, want: http.StatusBadRequest}
		}},
		{16, func() fuzzCase { // forged, expired, tenant-less or broken credentials against B's data
			tok, hdr, what := f.badCredential(rng)
			paths := []fuzzReq{
				{Method: http.MethodGet, Path: "/v1/orders/" + pick(append(append([]string{}, f.bPathOrders...), f.shared...))},
				{Method: http.MethodGet, Path: "/v1/orders?limit=200"},
				{Method: http.MethodGet, Path: "/v1/customers/" + pick(f.bCustomers) + "/summary"},
				{Method: http.MethodGet, Path: "/v1/revenue/daily?from=2020-01-01&to=2020-12-31"},
				{Method: http.MethodGet, Path: "/v1/admin/projections?scope=all"},
				{Method: http.MethodPost, Path: "/v1/orders/" + pick(f.bPathOrders) + "/cancel", Body: []byte(`{"reason":"r11"}`)},
			}
			q := paths[rng.IntN(len(paths))]
			q.Token, q.Header = tok, hdr
			return fuzzCase{kind: "bad-token/" + what, req: q, want: http.StatusUnauthorized}
		}},
		{6, func() fuzzCase { // admin routes without the scope
			switch rng.IntN(3) {
			case 0:
				return fuzzCase{kind: "admin-no-scope", req: fuzzReq{Method: http.MethodGet, Path: "/v1/admin/projections", Token: f.tokA}, want: http.StatusForbidden}
			case 1:
				return fuzzCase{kind: "admin-no-scope", req: fuzzReq{Method: http.MethodGet, Path: "/v1/admin/projections?scope=all", Token: f.tokA}, want: http.StatusForbidden}
			default:
				return fuzzCase{kind: "admin-no-cross-tenant", req: fuzzReq{Method: http.MethodGet, Path: "/v1/admin/projections?scope=all", Token: f.tokAAdmin}, want: http.StatusForbidden}
			}
		}},
		{2, func() fuzzCase {
			return fuzzCase{kind: "admin-tenant-view", req: fuzzReq{Method: http.MethodGet, Path: "/v1/admin/projections", Token: f.tokAAdmin}, want: http.StatusOK}
		}},
		{3, func() fuzzCase { // B's cursor with A's token
			return fuzzCase{kind: "b-cursor", req: fuzzReq{Method: http.MethodGet, Path: "/v1/orders?cursor=" + url.QueryEscape(f.bCursor), Token: f.tokA},
				wantAny: []int{http.StatusOK, http.StatusBadRequest}, check: f.listCheck()}
		}},
		{3, func() fuzzCase { // B's consistency token with A's token
			id := pick(f.aOrders)
			return fuzzCase{kind: "b-consistency-token", req: fuzzReq{Method: http.MethodGet, Path: "/v1/orders/" + id, Token: f.tokA,
				Header: http.Header{"X-Consistency-Token": {f.bPosition}}}, want: http.StatusOK, check: f.ownOrderCheck(id)}
		}},
		{5, func() fuzzCase { // injection-shaped IDs
			bad := []string{"o-1'%20OR%20'1'='1", "o-1;SELECT%20set_config('app.tenant_id','" + f.b + "',false)", "%2e%2e%2f" + f.b,
				"o-1%00", "o-1%0d%0aX-Tenant-Id:%20" + f.b, strings.Repeat("a", 65), "*", "o-1%27--"}
			id := bad[rng.IntN(len(bad))]
			path := []string{"/v1/orders/" + id, "/v1/customers/" + id + "/summary", "/v1/orders?customer_id=" + id}[rng.IntN(3)]
			return fuzzCase{kind: "injection", req: fuzzReq{Method: http.MethodGet, Path: path, Token: f.tokA},
				wantAny: []int{http.StatusBadRequest, http.StatusNotFound}}
		}},
		{5, func() fuzzCase { // A's own reads show A's data and only A's
			switch rng.IntN(3) {
			case 0:
				id := pick(f.aOrders)
				return fuzzCase{kind: "own-read", req: fuzzReq{Method: http.MethodGet, Path: "/v1/orders/" + id, Token: f.tokA}, want: http.StatusOK, check: f.ownOrderCheck(id)}
			case 1:
				c := pick(f.aCustomers)
				return fuzzCase{kind: "own-read", req: fuzzReq{Method: http.MethodGet, Path: "/v1/customers/" + c + "/summary", Token: f.tokA}, want: http.StatusOK, check: f.summaryCheck(c)}
			default:
				today := time.Now().UTC()
				p := fmt.Sprintf("/v1/revenue/daily?from=%s&to=%s", today.AddDate(0, 0, -2).Format(time.DateOnly), today.AddDate(0, 0, 1).Format(time.DateOnly))
				return fuzzCase{kind: "own-read", req: fuzzReq{Method: http.MethodGet, Path: p, Token: f.tokA}, want: http.StatusOK, check: f.revenueCheck()}
			}
		}},
	}
	total := 0
	for _, g := range gens {
		total += g.weight
	}
	var cases []fuzzCase
	requests := 0
	// Each body-foreign ID is created once by A (a second create would be
	// a rule violation where its fresh twin is not).
	for i, id := range f.bBodyOrders {
		twinID := fmt.Sprintf("%s-%d", f.twin(f.marker)+"-n", i)
		mk := func(oid string) fuzzReq {
			body, _ := json.Marshal(map[string]string{"order_id": oid, "customer_id": fmt.Sprintf("cf-%d", i), "currency": "EUR"})
			return fuzzReq{Method: http.MethodPost, Path: "/v1/orders", Token: f.tokA, Body: body, Header: http.Header{"Idempotency-Key": {newKey()}}}
		}
		t := mk(twinID)
		cases = append(cases, fuzzCase{kind: "foreign-body-create", req: mk(id), twin: &t, foreign: id, want: http.StatusCreated})
		requests += 2
	}
	for requests < n {
		x := rng.IntN(total)
		for _, g := range gens {
			if x < g.weight {
				c := g.make()
				cases = append(cases, c)
				requests++
				if c.twin != nil {
					requests++
				}
				break
			}
			x -= g.weight
		}
	}
	rng.Shuffle(len(cases), func(i, j int) { cases[i], cases[j] = cases[j], cases[i] })
	return cases
}

// badCredential returns a token (and headers) that must be refused.
func (f *tenancyFixture) badCredential(rng *rand.Rand) (token string, hdr http.Header, what string) {
	secret := f.e.secret
	now := time.Now()
	signed := func(claims jwt.MapClaims, key []byte, method jwt.SigningMethod) string {
		s, _ := jwt.NewWithClaims(method, claims).SignedString(key)
		return s
	}
	raw := func(header, payload string, key []byte) string {
		h := base64.RawURLEncoding.EncodeToString([]byte(header))
		p := base64.RawURLEncoding.EncodeToString([]byte(payload))
		sig := ""
		if key != nil {
			s, _ := jwt.SigningMethodHS256.Sign(h+"."+p, key)
			sig = base64.RawURLEncoding.EncodeToString(s)
		}
		return h + "." + p + "." + sig
	}
	exp := now.Add(time.Hour).Unix()
	switch rng.IntN(13) {
	case 0:
		return signed(jwt.MapClaims{"sub": "x", "exp": exp}, secret, jwt.SigningMethodHS256), nil, "no-tenant"
	case 1:
		return signed(jwt.MapClaims{"sub": "x", "tenant": "", "exp": exp}, secret, jwt.SigningMethodHS256), nil, "empty-tenant"
	case 2:
		return signed(jwt.MapClaims{"sub": "x", "tenant": strings.ToUpper(f.b), "exp": exp}, secret, jwt.SigningMethodHS256), nil, "malformed-tenant"
	case 3:
		return signed(jwt.MapClaims{"sub": "x", "tenant": f.b, "exp": now.Add(-time.Hour).Unix()}, secret, jwt.SigningMethodHS256), nil, "expired"
	case 4:
		return raw(`{"alg":"none","typ":"JWT"}`, fmt.Sprintf(`{"sub":"x","tenant":%q,"exp":%d}`, f.b, exp), nil), nil, "alg-none"
	case 5:
		return signed(jwt.MapClaims{"sub": "x", "tenant": f.b, "exp": exp}, []byte("another-secret-of-at-least-32-bytes!!"), jwt.SigningMethodHS256), nil, "wrong-secret"
	case 6:
		return raw(`{"alg":"HS256","typ":"JWT"}`, fmt.Sprintf(`{"sub":"x","tenant":%q,"Tenant":%q,"exp":%d}`, f.a, f.b, exp), secret), nil, "case-variant-claim"
	case 7:
		return raw(`{"alg":"HS256","typ":"JWT"}`, fmt.Sprintf(`{"sub":"x","tenant":%q,"tenant":%q,"exp":%d}`, f.a, f.b, exp), secret), nil, "duplicate-claim"
	case 8:
		return signed(jwt.MapClaims{"sub": "x", "tenant": f.b, "exp": exp}, secret, jwt.SigningMethodHS512), nil, "hs512"
	case 9:
		return signed(jwt.MapClaims{"sub": "x", "tenant": f.b}, secret, jwt.SigningMethodHS256), nil, "no-exp"
	case 10:
		return "", nil, "no-authorization"
	case 11:
		return "", http.Header{"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte(f.b+":x"))}}, "basic-scheme"
	default:
		// A's valid token with B's signature part: the signature no
		// longer matches the claims.
		parts := strings.Split(f.tokB, ".")
		ap := strings.Split(f.tokA, ".")
		return ap[0] + "." + parts[1] + "." + ap[2], nil, "spliced"
	}
}

// ownOrderCheck checks that A's order shows A's lines only, with the total
// A's seed gave it.
func (f *tenancyFixture) ownOrderCheck(id string) func(int, []byte) string {
	return func(status int, body []byte) string {
		if status != http.StatusOK {
			return ""
		}
		var o struct {
			OrderID    string `json:"order_id"`
			CustomerID string `json:"customer_id"`
			Lines      []struct {
				ProductID string `json:"product_id"`
			} `json:"lines"`
		}
		if err := json.Unmarshal(body, &o); err != nil {
			return "undecodable order: " + err.Error()
		}
		if o.OrderID != id || !strings.HasPrefix(o.CustomerID, "ca-") {
			return fmt.Sprintf("order %s shows order %q of customer %q", id, o.OrderID, o.CustomerID)
		}
		for _, l := range o.Lines {
			if !strings.HasPrefix(l.ProductID, "pa-") {
				return fmt.Sprintf("order %s has a line of product %q", id, l.ProductID)
			}
		}
		if len(o.Lines) != 2 {
			return fmt.Sprintf("order %s has %d lines, A gave it 2", id, len(o.Lines))
		}
		return ""
	}
}

func (f *tenancyFixture) summaryCheck(customer string) func(int, []byte) string {
	want := f.aSummary[customer]
	return func(status int, body []byte) string {
		if status != http.StatusOK {
			return ""
		}
		var s struct {
			Orders    int64 `json:"orders"`
			Open      int64 `json:"open_orders"`
			PaidTotal []struct {
				Amount   int64  `json:"amount"`
				Currency string `json:"currency"`
			} `json:"paid_total"`
		}
		if err := json.Unmarshal(body, &s); err != nil {
			return "undecodable summary: " + err.Error()
		}
		got := map[string]int64{}
		for _, p := range s.PaidTotal {
			got[p.Currency] += p.Amount
		}
		if s.Orders != want.Orders || s.Open != want.Open || !sameAmounts(got, want.Paid) {
			return fmt.Sprintf("customer %s: orders %d open %d paid %v; A's data: %d %d %v", customer, s.Orders, s.Open, got, want.Orders, want.Open, want.Paid)
		}
		return ""
	}
}

func (f *tenancyFixture) revenueCheck() func(int, []byte) string {
	return func(status int, body []byte) string {
		if status != http.StatusOK {
			return ""
		}
		var rev struct {
			Days []struct {
				Currency string `json:"currency"`
				Amount   int64  `json:"amount"`
			} `json:"days"`
		}
		if err := json.Unmarshal(body, &rev); err != nil {
			return "undecodable revenue: " + err.Error()
		}
		got := map[string]int64{}
		for _, d := range rev.Days {
			got[d.Currency] += d.Amount
		}
		if !sameAmounts(got, f.aRevenue) {
			return fmt.Sprintf("revenue %v; A's paid orders add up to %v", got, f.aRevenue)
		}
		return ""
	}
}

// listCheck: every listed order is A's (seeded, or created by this run
// with a fresh or body-foreign ID for a fresh customer).
func (f *tenancyFixture) listCheck() func(int, []byte) string {
	return func(status int, body []byte) string {
		if status != http.StatusOK {
			return ""
		}
		var l struct {
			Items []struct {
				OrderID    string `json:"order_id"`
				CustomerID string `json:"customer_id"`
			} `json:"items"`
		}
		if err := json.Unmarshal(body, &l); err != nil {
			return "undecodable list: " + err.Error()
		}
		for _, it := range l.Items {
			if !strings.HasPrefix(it.CustomerID, "ca-") && !strings.HasPrefix(it.CustomerID, "cf-") {
				return fmt.Sprintf("list shows order %q of customer %q", it.OrderID, it.CustomerID)
			}
		}
		return ""
	}
}

func sameAmounts(a, b map[string]int64) bool {
	for k, v := range a {
		if v != 0 && b[k] != v {
			return false
		}
	}
	for k, v := range b {
		if v != 0 && a[k] != v {
			return false
		}
	}
	return true
}
