package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/domain"
)

// tenancyFixture is the data R11 and R12 attack: tenants A and B, with the
// same order IDs in both, orders only B has (whose IDs the attacks use as
// foreign IDs), and canary markers in B's data. Every string only B's data
// holds starts with marker (a prefix unique to the run), so leaked data is
// found by grepping for it. Twin IDs (twin(id): the marker's "b" turned
// into "z") have the same length as B's IDs and exist in no tenant: a
// foreign ID must answer exactly like its twin.
type tenancyFixture struct {
	e   *env
	db  string
	url string
	sup *supervisor
	// base is the serve process's URL.
	base   string
	client *http.Client

	a, b     string
	marker   string
	markerRE *regexp.Regexp // a whole B-only string: marker-kindN

	tokA, tokAAdmin, tokB, tokBCross string

	shared     []string // order IDs both tenants have
	aOrders    []string // every order of A (shared and A-only)
	aCustomers []string
	aProducts  []string
	// expected per A customer (orders, open orders, paid per currency)
	// and A's paid revenue per currency: what A's reads must show, computed
	// from what the fixture sent, never from a response.
	aSummary map[string]summaryWant
	aRevenue map[string]int64

	bPathOrders    []string // B-only orders; A uses their IDs in paths
	bBodyOrders    []string // B-only orders; A creates orders with these IDs
	bCustomers     []string
	bProducts      []string
	bRequests      []bRequest // B's commands, with their idempotency keys
	bCursor        string     // a next_cursor from B's order list
	bPosition      string     // a consistency token from B's commands
	bEventsAtStart int64
}

type summaryWant struct {
	Orders, Open int64
	Paid         map[string]int64
}

// bRequest is a command tenant B sent, replayed by A with B's key.
type bRequest struct {
	Method, Path, Key string
	Body              []byte
}

// markerPattern matches a whole B-only string: the marker, a dash, a kind
// and a number (cnryb1a2b3c-c4).
func markerPattern(marker string) *regexp.Regexp {
	return regexp.MustCompile(regexp.QuoteMeta(marker) + `-[a-z]+[0-9]*`)
}

// leakedMarker returns a string of B's data found in text that is not in
// echo (the request that produced text) and is not one of the body-foreign
// IDs, which become A's own order IDs when R11 creates them; "" when none.
func (f *tenancyFixture) leakedMarker(text, echo string) string {
	for _, m := range f.markerRE.FindAllString(text, -1) {
		if !strings.Contains(echo, m) && !slices.Contains(f.bBodyOrders, m) {
			return m
		}
	}
	return ""
}

func (f *tenancyFixture) twin(id string) string {
	return strings.Replace(id, f.marker, "cnryz"+f.marker[len("cnryb"):], 1)
}

// newTenancyFixture starts one serve process on a fresh database and seeds
// both tenants through the command API.
func (e *env) newTenancyFixture(ctx context.Context) (_ *tenancyFixture, err error) {
	f := &tenancyFixture{e: e, db: "chaos_tenancy", a: "ten-a", b: "ten-b", client: newHTTPClient(8)}
	rng := e.rng("tenancy", "fixture")
	f.marker = fmt.Sprintf("cnryb%06x", rng.IntN(1<<24))
	f.markerRE = markerPattern(f.marker)
	if f.url, err = e.newStrataDatabase(ctx, f.db); err != nil {
		return nil, err
	}
	f.sup, err = newSupervisor(e.cfg.Strata, filepath.Join(e.dir, "logs"), []procSpec{{Name: "tenancy-serve", Roles: "command,query,projector",
		Env: e.strataEnv(f.url, filepath.Join(e.dir, "data", "tenancy-serve"))}})
	if err != nil {
		return nil, err
	}
	if err := f.sup.Start(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			f.sup.Stop(5 * time.Second)
		}
	}()
	if err := f.sup.WaitReady(ctx, 60*time.Second); err != nil {
		return nil, err
	}
	f.base = f.sup.URLs()[0]
	sign := func(tenant string, scopes []string, cross bool) string {
		tok, serr := auth.Sign(e.secret, auth.Claims{Subject: "chaos-" + tenant, Tenant: domain.TenantID(tenant), Scopes: scopes, CrossTenant: cross}, 2*time.Hour)
		if serr != nil && err == nil {
			err = serr
		}
		return tok
	}
	f.tokA = sign(f.a, nil, false)
	f.tokAAdmin = sign(f.a, []string{auth.ScopeAdmin}, false)
	f.tokB = sign(f.b, nil, false)
	f.tokBCross = sign(f.b, []string{auth.ScopeAdmin}, true)
	if err != nil {
		return nil, err
	}
	if err := f.seed(ctx); err != nil {
		return nil, err
	}
	e.logf("tenancy: tenants %s and %s seeded (canary marker %s)", f.a, f.b, f.marker)
	return f, nil
}

func (f *tenancyFixture) close() { f.sup.Stop(25 * time.Second) }

// do sends one request and returns the status, the body and the headers.
func (f *tenancyFixture) do(ctx context.Context, method, path, token string, body []byte, hdr http.Header) (int, []byte, http.Header, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, method, f.base+path, rd)
	if err != nil {
		return 0, nil, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	res, err := f.client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 4<<20))
	return res.StatusCode, raw, res.Header, err
}

// must sends a seeding request that must succeed.
func (f *tenancyFixture) must(ctx context.Context, method, path, token, key string, body any) ([]byte, error) {
	var raw []byte
	if body != nil {
		raw, _ = json.Marshal(body)
	}
	hdr := http.Header{}
	if key != "" {
		hdr.Set("Idempotency-Key", key)
	}
	status, out, _, err := f.do(ctx, method, path, token, raw, hdr)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if status/100 != 2 {
		return nil, fmt.Errorf("%s %s: %d %s", method, path, status, out)
	}
	if token == f.tokB && key != "" {
		f.bRequests = append(f.bRequests, bRequest{Method: method, Path: path, Key: key, Body: raw})
	}
	return out, nil
}

type seedLine struct {
	product string
	qty     int64
	price   int64
}

func (f *tenancyFixture) seed(ctx context.Context) error {
	m := f.marker
	for i := 1; i <= 6; i++ {
		f.shared = append(f.shared, fmt.Sprintf("o-%d", i))
	}
	for i := 1; i <= 3; i++ {
		f.aCustomers = append(f.aCustomers, fmt.Sprintf("ca-%d", i))
	}
	for i := 1; i <= 5; i++ {
		f.aProducts = append(f.aProducts, fmt.Sprintf("pa-%d", i))
		f.bProducts = append(f.bProducts, fmt.Sprintf("%s-p%d", m, i))
	}
	for i := 1; i <= 4; i++ {
		f.bCustomers = append(f.bCustomers, fmt.Sprintf("%s-c%d", m, i))
	}
	for i := 1; i <= 8; i++ {
		f.bPathOrders = append(f.bPathOrders, fmt.Sprintf("%s-o%d", m, i))
	}
	for i := 1; i <= 6; i++ {
		f.bBodyOrders = append(f.bBodyOrders, fmt.Sprintf("%s-b%d", m, i))
	}
	f.aOrders = append(append([]string{}, f.shared...), "oa-1", "oa-2", "oa-3", "oa-4")
	f.aSummary, f.aRevenue = map[string]summaryWant{}, map[string]int64{}

	// lifecycle: 0 draft, 1 placed, 2 paid, 3 cancelled.
	type plan struct {
		tenant, token, order, customer, currency string
		lines                                    []seedLine
		state                                    int
	}
	var plans []plan
	for i, id := range f.aOrders {
		cur := "EUR"
		if i%4 == 3 {
			cur = "USD"
		}
		lines := []seedLine{{f.aProducts[i%5], int64(1 + i%3), 250 + int64(i%5)}, {f.aProducts[(i+2)%5], 2, 250 + int64((i+2)%5)}}
		plans = append(plans, plan{f.a, f.tokA, id, f.aCustomers[i%3], cur, lines, i % 4})
	}
	bOrders := append(append(append([]string{}, f.shared...), f.bPathOrders...), f.bBodyOrders...)
	for i, id := range bOrders {
		cur := "EUR"
		if i%3 == 2 {
			cur = "USD"
		}
		lines := []seedLine{{f.bProducts[i%5], int64(1 + i%4), 7_000_000 + int64(i%5)*1_000}, {f.bProducts[(i+1)%5], 3, 7_000_000 + int64((i+1)%5)*1_000}}
		plans = append(plans, plan{f.b, f.tokB, id, f.bCustomers[i%4], cur, lines, (i + 2) % 4})
	}
	key := 0
	nextKey := func(tenant string) string {
		key++
		return fmt.Sprintf("seed-%s-%d", tenant, key)
	}
	for _, p := range plans {
		if _, err := f.must(ctx, http.MethodPost, "/v1/orders", p.token, nextKey(p.tenant),
			map[string]string{"order_id": p.order, "customer_id": p.customer, "currency": p.currency}); err != nil {
			return err
		}
		var total int64
		for _, l := range p.lines {
			if _, err := f.must(ctx, http.MethodPost, "/v1/orders/"+p.order+"/lines", p.token, nextKey(p.tenant),
				map[string]any{"product_id": l.product, "quantity": l.qty, "unit_price": map[string]any{"amount": l.price, "currency": p.currency}}); err != nil {
				return err
			}
			total += l.qty * l.price
		}
		ref := "psp-" + p.order
		reason := "changed my mind"
		if p.tenant == f.b {
			ref, reason = m+"-ref-"+p.order, m+"-reason secret of tenant b"
		}
		var last []byte
		var err error
		switch p.state {
		case 1:
			last, err = f.must(ctx, http.MethodPost, "/v1/orders/"+p.order+"/place", p.token, nextKey(p.tenant), nil)
		case 2:
			if _, err = f.must(ctx, http.MethodPost, "/v1/orders/"+p.order+"/place", p.token, nextKey(p.tenant), nil); err == nil {
				last, err = f.must(ctx, http.MethodPost, "/v1/orders/"+p.order+"/pay", p.token, nextKey(p.tenant), map[string]string{"payment_reference": ref})
			}
		case 3:
			last, err = f.must(ctx, http.MethodPost, "/v1/orders/"+p.order+"/cancel", p.token, nextKey(p.tenant), map[string]string{"reason": reason})
		}
		if err != nil {
			return err
		}
		if p.tenant == f.b && last != nil {
			var res struct {
				Position string `json:"position"`
			}
			_ = json.Unmarshal(last, &res)
			f.bPosition = res.Position
		}
		if p.tenant == f.a {
			s := f.aSummary[p.customer]
			if s.Paid == nil {
				s.Paid = map[string]int64{}
			}
			s.Orders++
			if p.state <= 1 {
				s.Open++
			}
			if p.state == 2 {
				s.Paid[p.currency] += total
				f.aRevenue[p.currency] += total
			}
			f.aSummary[p.customer] = s
		}
	}
	// A cross-tenant admin read by B leaves an audit row in B's tenant.
	status, out, _, err := f.do(ctx, http.MethodGet, "/v1/admin/projections?scope=all", f.tokBCross, nil, http.Header{"X-Request-Id": {m + "-audit"}})
	if err != nil || status != http.StatusOK {
		return fmt.Errorf("seed an audit row: %d %s %v", status, out, err)
	}
	// Everything applied before the attacks start.
	conn, err := connectAdmin(ctx, f.url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	head, err := logHead(ctx, conn)
	if err != nil {
		return err
	}
	if _, ok, behind, err := waitAtHead(ctx, f.url, head, 30*time.Second); err != nil || !ok {
		return fmt.Errorf("projections did not catch up with the seed: %s %v", behind, err)
	}
	_, out, _, err = f.do(ctx, http.MethodGet, "/v1/orders?limit=2", f.tokB, nil, nil)
	if err != nil {
		return err
	}
	var page struct {
		Next *string `json:"next_cursor"`
	}
	if json.Unmarshal(out, &page) != nil || page.Next == nil {
		return fmt.Errorf("tenant b's order list has no next_cursor: %s", out)
	}
	f.bCursor = *page.Next
	return conn.QueryRow(ctx, `SELECT count(*) FROM events WHERE tenant_id = $1`, f.b).Scan(&f.bEventsAtStart)
}
