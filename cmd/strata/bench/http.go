package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// client is one simulated API user: it walks orders through their
// lifecycle (create, add 3 lines, place, pay), one request per call.
type client struct {
	http    *http.Client
	base    string
	tenant  string
	token   string
	id      string
	step    int
	created []string // paid orders, for the query workloads
}

var orderSeq atomic.Int64

func (c *client) do(ctx context.Context, method, path, body string, hdr ...string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader([]byte(body)))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	return res.StatusCode, raw, err
}

// next sends the next request of the mix.
func (c *client) next(ctx context.Context, rng *rand.Rand) error {
	var status, want int
	var err error
	switch c.step {
	case 0:
		c.id = fmt.Sprintf("b-%d", orderSeq.Add(1))
		status, _, err = c.do(ctx, "POST", "/v1/orders", fmt.Sprintf(`{"order_id":%q,"customer_id":"c-%d","currency":"EUR"}`, c.id, rng.IntN(500)))
		want = 201
	case 1, 2, 3:
		status, _, err = c.do(ctx, "POST", "/v1/orders/"+c.id+"/lines",
			fmt.Sprintf(`{"product_id":"p-%d","quantity":%d,"unit_price":{"amount":%d,"currency":"EUR"}}`, c.step, 1+rng.IntN(5), 100+rng.IntN(9900)))
		want = 200
	case 4:
		status, _, err = c.do(ctx, "POST", "/v1/orders/"+c.id+"/place", "")
		want = 200
	case 5:
		status, _, err = c.do(ctx, "POST", "/v1/orders/"+c.id+"/pay", fmt.Sprintf(`{"payment_reference":"pay-%s"}`, c.id))
		want = 200
	}
	if err != nil {
		return err
	}
	if status != want {
		return fmt.Errorf("step %d: status %d", c.step, status)
	}
	if c.step == 5 {
		c.created = append(c.created, c.id)
	}
	c.step = (c.step + 1) % 6
	return nil
}

func newClients(n int, base string) []*client {
	hc := httpClient(n)
	out := make([]*client, n)
	for i := range out {
		tenant := fmt.Sprintf("t-%d", i%4)
		out[i] = &client{http: hc, base: base, tenant: tenant, token: tokenFor(tenant)}
	}
	return out
}

// benchHTTP runs the end-to-end workloads against one `strata serve`
// process: the command mix, queries, read-your-writes, and its memory.
func benchHTTP(ctx context.Context, e *Env) ([]Result, error) {
	url, err := e.newDatabase(ctx, "bench_http")
	if err != nil {
		return nil, err
	}
	srv, err := e.startServe(ctx, url)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	raw, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, err
	}
	defer raw.Close()
	if _, err := raw.Exec(ctx, rawEventsDDL); err != nil {
		return nil, err
	}

	var results []Result
	var all []*client
	for _, n := range []int{16, 64} {
		var strataRuns, rawRuns []Run
		for i := 0; i < e.cfg.Runs; i++ {
			rawRuns = append(rawRuns, rawInsertLoop(ctx, e, raw, n, fmt.Sprintf("cmd%d-%d", n, i)))
			clients := newClients(n, srv.base)
			strataRuns = append(strataRuns, closedLoop(ctx, n, e.cfg.Warmup, e.cfg.Duration, func(ctx context.Context, w int, rng *rand.Rand) error {
				return clients[w].next(ctx, rng)
			}))
			all = append(all, clients...)
			e.logf("command API clients=%-2d run %d: %.0f req/s p99 %.2f ms (raw append %.0f/s)", n, i+1,
				strataRuns[i].Throughput, strataRuns[i].P99ms, rawRuns[i].Throughput)
		}
		s, r := summarize(strataRuns), summarize(rawRuns)
		res := Result{Workload: "command API", Concurrency: n, Unit: "requests/s", Strata: s, Raw: &r,
			RawLabel: "single-row INSERT (the append baseline) at the same concurrency", Ratio: ratioOf(s, r),
			Note: "end-to-end HTTP with JWT; mix per order: create, 3 x add line, place, pay"}
		if n == 16 {
			res.Target = ">= 0.5x raw, p99 <= 25 ms"
			res.Met = met(res.Ratio >= 0.5 && s.Median.P99ms <= 25)
		}
		results = append(results, res)
	}
	rss, err := srv.peakRSS()
	if err != nil {
		return nil, err
	}
	results = append(results, Result{Workload: "memory (peak RSS of serve)", Unit: "MiB",
		Strata: Summary{Median: Run{Throughput: rss}, MinThroughput: rss, MaxThroughput: rss},
		Target: "<= 200 MiB", Met: met(rss <= 200), Note: "VmHWM of the strata serve process after the command API workload"})

	var known [][3]string // tenant, token, id of paid orders
	for _, c := range all {
		for _, id := range c.created {
			known = append(known, [3]string{c.tenant, c.token, id})
		}
	}
	if len(known) == 0 {
		return nil, fmt.Errorf("the command workload created no paid orders to query")
	}
	vsMinimal, err := benchAgainstMinimal(ctx, e, srv, url, raw, known) // http_minimal.go
	if err != nil {
		return nil, err
	}
	results = append(results, vsMinimal...)
	qs, err := benchQueries(ctx, e, srv, raw, all)
	if err != nil {
		return nil, err
	}
	results = append(results, qs...)
	ryw, err := benchReadYourWrites(ctx, e, srv)
	if err != nil {
		return nil, err
	}
	results = append(results, ryw)
	srv.stop()
	pgb, err := benchPgBouncer(ctx, e) // pgbouncer.go
	if err != nil {
		return nil, err
	}
	return append(results, pgb), nil
}

// rawInsertLoop is the append baseline at n writers (see benchAppend).
func rawInsertLoop(ctx context.Context, e *Env, raw *pgxpool.Pool, n int, tag string) Run {
	parts := partition(n)
	return closedLoop(ctx, n, e.cfg.Warmup, e.cfg.Duration, func(ctx context.Context, w int, rng *rand.Rand) error {
		p := parts[w]
		k := rng.IntN(len(p.streams))
		_, err := raw.Exec(ctx, `INSERT INTO public.raw_events (tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata)
			VALUES ($1, $2, $3, gen_random_uuid(), 'order.line_added', 2, $4, $5)`,
			fmt.Sprintf("tenant-%d", p.streams[k]%benchTenants), fmt.Sprintf("order-%s-%d", tag, p.streams[k]),
			p.version[k]+1, benchPayload, benchMetaJSON)
		if err == nil {
			p.version[k]++
		}
		return err
	})
}

func benchQueries(ctx context.Context, e *Env, srv *server, raw *pgxpool.Pool, writers []*client) ([]Result, error) {
	type known struct{ tenant, token, id string }
	var ids []known
	for _, c := range writers {
		for _, id := range c.created {
			ids = append(ids, known{c.tenant, c.token, id})
		}
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("the command workload created no paid orders to query")
	}
	const n = 32
	hc := httpClient(n)
	get := func(ctx context.Context, token, path string) error {
		return send(ctx, hc, http.MethodGet, srv.base+path, token, "", http.StatusOK)
	}
	var byID, list, pk []Run
	for i := 0; i < e.cfg.Runs; i++ {
		pk = append(pk, closedLoop(ctx, n, e.cfg.Warmup, e.cfg.Duration, func(ctx context.Context, w int, rng *rand.Rand) error {
			k := ids[rng.IntN(len(ids))]
			var s string
			return raw.QueryRow(ctx, `SELECT status FROM strata.order_details WHERE tenant_id = $1 AND order_id = $2`, k.tenant, k.id).Scan(&s)
		}))
		byID = append(byID, closedLoop(ctx, n, e.cfg.Warmup, e.cfg.Duration, func(ctx context.Context, w int, rng *rand.Rand) error {
			k := ids[rng.IntN(len(ids))]
			return get(ctx, k.token, "/v1/orders/"+k.id)
		}))
		list = append(list, closedLoop(ctx, n, e.cfg.Warmup, e.cfg.Duration, func(ctx context.Context, w int, rng *rand.Rand) error {
			k := ids[rng.IntN(len(ids))]
			return get(ctx, k.token, fmt.Sprintf("/v1/orders?status=paid&customer_id=c-%d&limit=50", rng.IntN(500)))
		}))
		e.logf("queries run %d: get %.0f/s p99 %.2f ms, list %.0f/s p99 %.2f ms, raw PK SELECT %.0f/s p99 %.2f ms", i+1,
			byID[i].Throughput, byID[i].P99ms, list[i].Throughput, list[i].P99ms, pk[i].Throughput, pk[i].P99ms)
	}
	b, l, r := summarize(byID), summarize(list), summarize(pk)
	return []Result{
		{Workload: "query get-by-id", Concurrency: n, Unit: "requests/s", Strata: b, Raw: &r, RawLabel: "primary-key SELECT on order_details",
			Ratio: ratioOf(b, r), Target: "p99 <= 10 ms", Met: met(b.Median.P99ms <= 10)},
		{Workload: "query list (status+customer)", Concurrency: n, Unit: "requests/s", Strata: l, Raw: &r, RawLabel: "primary-key SELECT on order_details",
			Ratio: ratioOf(l, r), Target: "p99 <= 20 ms", Met: met(l.Median.P99ms <= 20)},
	}, nil
}

// benchReadYourWrites measures a query sent with the consistency token of
// the command just before it: the latency is the query's, including its
// wait for the projections.
func benchReadYourWrites(ctx context.Context, e *Env, srv *server) (Result, error) {
	const n = 8
	clients := newClients(n, srv.base)
	var mu sync.Mutex
	var runs []Run
	for i := 0; i < e.cfg.Runs; i++ {
		var rec recorder
		run := closedLoop(ctx, n, e.cfg.Warmup, e.cfg.Duration, func(ctx context.Context, w int, rng *rand.Rand) error {
			c := clients[w]
			id := fmt.Sprintf("ryw-%d", orderSeq.Add(1))
			status, body, err := c.do(ctx, "POST", "/v1/orders", fmt.Sprintf(`{"order_id":%q,"customer_id":"c-1","currency":"EUR"}`, id))
			if err != nil || status != 201 {
				return fmt.Errorf("create: %d %v", status, err)
			}
			var out struct{ Position string }
			if err := json.Unmarshal(body, &out); err != nil {
				return err
			}
			t0 := time.Now()
			status, _, err = c.do(ctx, "GET", "/v1/orders/"+id, "", "X-Consistency-Token", out.Position)
			if err != nil || status != 200 {
				return fmt.Errorf("read: %d %v", status, err)
			}
			mu.Lock()
			rec.lat = append(rec.lat, time.Since(t0))
			mu.Unlock()
			return nil
		})
		q := rec.run(time.Duration(run.Seconds * float64(time.Second)))
		runs = append(runs, Run{Ops: run.Ops, Errors: run.Errors, Seconds: run.Seconds, Throughput: run.Throughput, P50ms: q.P50ms, P95ms: q.P95ms, P99ms: q.P99ms})
		e.logf("read-your-writes run %d: %.0f pairs/s, query p99 %.2f ms", i+1, runs[i].Throughput, runs[i].P99ms)
	}
	s := summarize(runs)
	return Result{Workload: "read-your-writes", Concurrency: n, Unit: "pairs/s", Strata: s, Target: "p99 <= 50 ms", Met: met(s.Median.P99ms <= 50),
		Note: "latency is the query's (with X-Consistency-Token), including its wait for the projections"}, nil
}

// send sends one request with token (and a JSON body unless body is "")
// and fails unless the answer has status want.
func send(ctx context.Context, hc *http.Client, method, url, token, body string, want int) error {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	if res.StatusCode != want {
		return fmt.Errorf("%s %s: status %d", method, url, res.StatusCode)
	}
	return nil
}
