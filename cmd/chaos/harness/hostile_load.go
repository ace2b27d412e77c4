package harness

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

// hsRequest is one request of the other tenants' load in HOSTILE.
type hsRequest struct {
	tenant, kind string // kind: create, line, place, pay, read
	start        time.Time
	took         time.Duration
	status       int // 0: no response
	err          string
	// readStatus is the order's status a read answered (read only).
	readStatus string
}

// hsLoad is the well-behaved tenants' work in HOSTILE: each client runs
// order flows (create, add a line, place, pay by hand, then read the order
// back with the payment's consistency token), one request every Every,
// on its own serve process (client c on process c mod 2). Nothing is
// retried: every request is recorded with its latency and status, and an
// order whose step fails is left there (the next flow begins).
type hsLoad struct {
	urls   []string
	client *http.Client
	tokens map[string]string
	sku    string
	every  time.Duration

	stop chan struct{}
	wg   sync.WaitGroup

	mu   sync.Mutex
	reqs []hsRequest
	// created and paid: the orders whose create (pay) was acknowledged,
	// by tenant, and when the pay was.
	created map[string][]string
	paid    map[string]map[string]time.Time
}

func newHSLoad(urls []string, tokens map[string]string, sku string, every time.Duration, clients int) *hsLoad {
	return &hsLoad{urls: urls, client: newHTTPClient(clients + 4), tokens: tokens, sku: sku, every: every,
		stop: make(chan struct{}), created: map[string][]string{}, paid: map[string]map[string]time.Time{}}
}

// start runs clients clients for each tenant until halt.
func (l *hsLoad) start(ctx context.Context, tenants []string, clients int) {
	n := 0
	for _, t := range tenants {
		for c := 0; c < clients; c++ {
			proc := n % len(l.urls)
			n++
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				l.run(ctx, t, fmt.Sprintf("c%d", c), proc)
			}()
		}
	}
}

// halt stops the clients and waits for the requests in flight.
func (l *hsLoad) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
	l.client.CloseIdleConnections()
}

func (l *hsLoad) run(ctx context.Context, tenant, name string, proc int) {
	next := time.Now()
	tick := func() bool {
		select {
		case <-l.stop:
			return false
		case <-ctx.Done():
			return false
		case <-time.After(time.Until(next)):
		}
		next = next.Add(l.every)
		if now := time.Now(); next.Before(now) {
			next = now // behind: no burst to catch up
		}
		return true
	}
	for k := 0; ; k++ {
		order := fmt.Sprintf("%s-o%d", name, k)
		steps := []struct{ kind, method, path, body string }{
			{"create", http.MethodPost, "/v1/orders", fmt.Sprintf(`{"order_id":%q,"customer_id":"cust-%s","currency":"EUR"}`, order, name)},
			{"line", http.MethodPost, "/v1/orders/" + order + "/lines", fmt.Sprintf(`{"product_id":%q,"quantity":1,"unit_price":{"amount":250,"currency":"EUR"}}`, l.sku)},
			{"place", http.MethodPost, "/v1/orders/" + order + "/place", ""},
			{"pay", http.MethodPost, "/v1/orders/" + order + "/pay", fmt.Sprintf(`{"payment_reference":"ref-%s"}`, order)},
			{"read", http.MethodGet, "/v1/orders/" + order, ""},
		}
		pos := ""
		for _, s := range steps {
			if !tick() {
				return
			}
			q := l.do(ctx, proc, tenant, s.kind, s.method, s.path, s.body, order+"-"+s.kind, pos)
			l.mu.Lock()
			l.reqs = append(l.reqs, q.hsRequest)
			if q.status/100 == 2 {
				switch s.kind {
				case "create":
					l.created[tenant] = append(l.created[tenant], order)
				case "pay":
					if l.paid[tenant] == nil {
						l.paid[tenant] = map[string]time.Time{}
					}
					l.paid[tenant][order] = q.start.Add(q.took)
				}
			}
			l.mu.Unlock()
			if q.status/100 != 2 {
				break
			}
			pos = q.position
		}
	}
}

type hsAnswer struct {
	hsRequest
	position string
}

func (l *hsLoad) do(ctx context.Context, proc int, tenant, kind, method, path, body, key, token string) hsAnswer {
	a := hsAnswer{hsRequest: hsRequest{tenant: tenant, kind: kind, start: time.Now()}}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(rctx, method, l.urls[proc]+path, rd)
	if err != nil {
		a.err = err.Error()
		return a
	}
	req.Header.Set("Authorization", "Bearer "+l.tokens[tenant])
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if method == http.MethodPost {
		req.Header.Set("Idempotency-Key", key)
	}
	if token != "" {
		req.Header.Set("X-Consistency-Token", token)
	}
	res, err := l.client.Do(req)
	if err != nil {
		a.took, a.err = time.Since(a.start), transportError(err)
		return a
	}
	raw, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	res.Body.Close()
	a.took, a.status = time.Since(a.start), res.StatusCode
	var ok struct {
		Position string `json:"position"`
		Status   string `json:"status"`
	}
	_ = json.Unmarshal(raw, &ok)
	a.position, a.readStatus = ok.Position, ok.Status
	if kind != "read" {
		a.readStatus = ""
	}
	if err == nil && res.StatusCode/100 != 2 {
		err = fmt.Errorf("%s", oneLine(string(raw), 160))
	}
	if err != nil {
		a.err = err.Error()
	}
	return a
}

// writeHSRequests writes every request, one JSON object a line, for a look
// at what the table sums up (t: seconds since the hostile phase began).
func writeHSRequests(file string, reqs []hsRequest, hostileFrom time.Time) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, q := range reqs {
		if err := enc.Encode(map[string]any{"t": q.start.Sub(hostileFrom).Seconds(), "tenant": q.tenant, "kind": q.kind,
			"ms": float64(q.took.Microseconds()) / 1000, "status": q.status, "err": q.err}); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// requests returns what was recorded so far.
func (l *hsLoad) requests() []hsRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]hsRequest(nil), l.reqs...)
}

// horizonHold is a transaction that held an xid, and so the global log's
// reading horizon (ARCHITECTURE decision 1), for longer than the watch's
// threshold.
type horizonHold struct {
	what string
	held time.Duration
	seen time.Time // first sampled
}

// horizonWatch samples pg_stat_activity every 20 ms for transactions
// holding an xid longer than a threshold: while one is open no consumer
// reads past it, and a read with a consistency token waits. A hold is
// timed from the first sample that saw the xid, not from the transaction's
// start: a transaction takes its xid at its first write, and one that read
// or waited for long before (the relay publishing to a slow broker before
// it moves its checkpoint) held no xid meanwhile. A hold is thus known to
// within a sample.
type horizonWatch struct {
	stopc chan struct{}
	done  chan struct{}
	holds map[string]horizonHold // held longer than the threshold
	seen  map[string]horizonHold // every xid sampled
}

func startHorizonWatch(ctx context.Context, url string, threshold time.Duration) *horizonWatch {
	w := &horizonWatch{stopc: make(chan struct{}), done: make(chan struct{}), holds: map[string]horizonHold{}, seen: map[string]horizonHold{}}
	go func() {
		defer close(w.done)
		conn, err := connectAdmin(ctx, url)
		if err != nil {
			return
		}
		defer conn.Close(context.WithoutCancel(ctx))
		for {
			select {
			case <-w.stopc:
				return
			case <-ctx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
			rows, err := conn.Query(ctx, `SELECT pid::text || ' ' || backend_xid::text, coalesce(application_name, ''), coalesce(usename::text, ''),
       left(regexp_replace(coalesce(query, ''), '\s+', ' ', 'g'), 120)
FROM pg_stat_activity WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid()`)
			if err != nil {
				continue
			}
			now := time.Now()
			current := map[string]bool{}
			for rows.Next() {
				var key, app, user, query string
				if rows.Scan(&key, &app, &user, &query) != nil {
					continue
				}
				h, ok := w.seen[key]
				if !ok {
					h.seen = now
				}
				h.what, h.held = fmt.Sprintf("%s %s: %s", user, app, query), now.Sub(h.seen)
				w.seen[key] = h
				current[key] = true
				if h.held > threshold {
					w.holds[key] = h
				}
			}
			rows.Close()
			for key := range w.seen {
				if !current[key] { // committed or rolled back: its xid is gone
					delete(w.seen, key)
				}
			}
		}
	}()
	return w
}

// stop ends the watch and returns what it saw, longest first.
func (w *horizonWatch) stop() []horizonHold {
	close(w.stopc)
	<-w.done
	out := make([]horizonHold, 0, len(w.holds))
	for _, h := range w.holds {
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].held > out[j].held })
	return out
}
