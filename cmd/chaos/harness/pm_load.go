package harness

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/strata-es/strata/internal/paysim"
)

// pmOrder is one order of PM1's workload: its lines (SKU -> quantity, each
// SKU once) and what its customer does after placing it.
type pmOrder struct {
	tenant string
	id     string
	lines  map[string]int64
	// action: "" (leave it to the provider and the deadline), "cancel" or
	// "pay" (by hand, racing our capture), after delay.
	action string
	delay  time.Duration
}

// pmSKU names the i-th SKU; the first ScarceSKUs are scarce.
func pmSKU(i int) string { return fmt.Sprintf("sku-%d", i) }

// pmUnitPrice is a SKU's price in minor units.
func pmUnitPrice(sku string) int64 { return 250 + 10*int64(len(sku)) + int64(sku[len(sku)-1]) }

// newPMOrders draws the orders: OrdersPerTenant per tenant, 1-3 distinct
// SKUs each (a scarce one with probability ScarceShare), 1-3 units a line.
func newPMOrders(rng *rand.Rand, cfg PM1Config, tenants []string) []*pmOrder {
	var out []*pmOrder
	for k := 0; k < cfg.OrdersPerTenant; k++ {
		for ti, tenant := range tenants {
			o := &pmOrder{tenant: tenant, id: fmt.Sprintf("t%d-o%d", ti, k), lines: map[string]int64{}}
			n := 1 + rng.IntN(3)
			for len(o.lines) < n {
				var i int
				if rng.Float64() < cfg.ScarceShare {
					i = rng.IntN(cfg.ScarceSKUs)
				} else {
					i = cfg.ScarceSKUs + rng.IntN(cfg.SKUs-cfg.ScarceSKUs)
				}
				o.lines[pmSKU(i)] = int64(1 + rng.IntN(3))
			}
			switch u := rng.Float64(); {
			case u < cfg.CancelRate:
				o.action = "cancel"
			case u < cfg.CancelRate+cfg.HandPayRate:
				o.action = "pay"
			}
			// Most customers act within a second of placing (racing the
			// reservations and our capture); some around the deadline.
			if rng.IntN(5) == 0 {
				o.delay = cfg.PaymentTimeout - 500*time.Millisecond + time.Duration(rng.Int64N(int64(time.Second)))
			} else {
				o.delay = time.Duration(rng.Int64N(int64(time.Second)))
			}
			out = append(out, o)
		}
	}
	return out
}

// sortedSKUs returns an order's SKUs in order (the line commands' order).
func (o *pmOrder) sortedSKUs() []string {
	out := make([]string, 0, len(o.lines))
	for s := range o.lines {
		out = append(out, s)
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

func jsonBody(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// runOrder creates, fills and places one order, then (in the background,
// counted by wg) lets its customer cancel or pay by hand after its delay.
func (l *loadRun) runOrder(ctx context.Context, rng *rand.Rand, client int, o *pmOrder, customerRng *rand.Rand, wg *sync.WaitGroup) {
	s := &stream{tenant: o.tenant, order: o.id}
	key := func(step string) string { return o.id + ":" + step }
	l.execute(ctx, rng, client, s, key("create"), command{"create", http.MethodPost, "/v1/orders",
		jsonBody(map[string]string{"order_id": o.id, "customer_id": "c-" + o.id, "currency": "EUR"})})
	for _, sku := range o.sortedSKUs() {
		l.execute(ctx, rng, client, s, key("line:"+sku), command{"add_line", http.MethodPost, "/v1/orders/" + o.id + "/lines",
			jsonBody(map[string]any{"product_id": sku, "quantity": o.lines[sku],
				"unit_price": map[string]any{"amount": pmUnitPrice(sku), "currency": "EUR"}})})
	}
	l.execute(ctx, rng, client, s, key("place"), command{"place", http.MethodPost, "/v1/orders/" + o.id + "/place", nil})
	if o.action == "" {
		return
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-ctx.Done():
			return
		case <-time.After(o.delay):
		}
		if o.action == "cancel" {
			l.execute(ctx, customerRng, client, s, key("cancel"), command{"cancel", http.MethodPost, "/v1/orders/" + o.id + "/cancel",
				jsonBody(map[string]string{"reason": "customer"})})
			return
		}
		l.execute(ctx, customerRng, client, s, key("pay"), command{"pay", http.MethodPost, "/v1/orders/" + o.id + "/pay",
			jsonBody(map[string]string{"payment_reference": "hand-" + o.id})})
	}()
}

// providerCall is one request the simulator answered (or dropped).
type providerCall struct {
	At      time.Time
	Op      string // capture, void, ledger
	Key     string
	Status  int  // 0: the connection was closed without an answer
	Dropped bool // the simulator applied the call, then dropped the answer
	// Late: the caller had given up (its timeout) before the answer.
	Late bool
	Took time.Duration
}

// recordedProvider is paysim behind a recording handler: every call, its
// answer and how long it took, so the checker can see the faults it met
// and the captures answered 201 whose key was asked again (the answer
// reached strata, which died or gave up before recording it).
type recordedProvider struct {
	sim *paysim.Server
	srv *httptest.Server

	// onCaptured, when set, is called once a capture's 201 has been
	// flushed to the caller, before the handler returns (PM1 kills the
	// projector-capable processes there: the provider has succeeded, the
	// runner has not recorded it yet).
	onCaptured atomic.Pointer[func(key string)]

	mu    sync.Mutex
	calls []providerCall
}

func startRecordedProvider(cfg paysim.Config) *recordedProvider {
	p := &recordedProvider{sim: paysim.New(cfg)}
	h := p.sim.Handler()
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rw := &recordingWriter{ResponseWriter: w}
		start := time.Now()
		h.ServeHTTP(rw, r)
		late := r.Context().Err() != nil
		if f := p.onCaptured.Load(); f != nil && r.URL.Path == "/v1/captures" && rw.status == http.StatusCreated && !rw.hijacked {
			if fl, ok := w.(http.Flusher); ok {
				fl.Flush()
			}
			(*f)(r.Header.Get("Idempotency-Key"))
		}
		c := providerCall{At: start, Status: rw.status, Dropped: rw.hijacked, Late: late, Took: time.Since(start)}
		switch {
		case r.URL.Path == "/v1/captures":
			c.Op, c.Key = "capture", r.Header.Get("Idempotency-Key")
		case strings.HasSuffix(r.URL.Path, "/void"):
			c.Op, c.Key = "void", r.PathValue("key")
			if c.Key == "" {
				c.Key = strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/v1/captures/"), "/void")
			}
		default:
			c.Op = "other"
		}
		p.mu.Lock()
		p.calls = append(p.calls, c)
		p.mu.Unlock()
	}))
	return p
}

func (p *recordedProvider) URL() string { return p.srv.URL }

func (p *recordedProvider) Close() {
	p.srv.CloseClientConnections()
	p.srv.Close()
}

// Calls returns the calls in the order they arrived. A call is recorded
// when its handler returns, which for a quick call can be after a later
// one's (the client sees the answer before the record is written).
func (p *recordedProvider) Calls() []providerCall {
	p.mu.Lock()
	calls := append([]providerCall(nil), p.calls...)
	p.mu.Unlock()
	sort.SliceStable(calls, func(i, j int) bool { return calls[i].At.Before(calls[j].At) })
	return calls
}

type recordingWriter struct {
	http.ResponseWriter
	status   int
	hijacked bool
}

func (w *recordingWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recordingWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *recordingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := w.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, fmt.Errorf("not a hijacker")
	}
	w.hijacked = true
	return hj.Hijack()
}

// Term sends SIGTERM to process i (a graceful shutdown; the supervisor
// starts it again) and waits until that incarnation has exited.
func (s *supervisor) Term(ctx context.Context, i int) int {
	p := s.procs[i]
	p.mu.Lock()
	if p.cmd == nil || p.cmd.Process == nil || p.killed {
		p.mu.Unlock()
		return 0
	}
	exited := p.exited
	select {
	case <-exited:
		p.mu.Unlock()
		return 0
	default:
	}
	p.killed = true
	pid := p.cmd.Process.Pid
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	s.record(procEvent{At: time.Now(), Proc: p.spec.Name, Kind: "term", Pid: pid, Injected: true})
	p.mu.Unlock()
	select {
	case <-exited:
	case <-ctx.Done():
	case <-time.After(20 * time.Second): // a shutdown that hangs is killed
		p.mu.Lock()
		_ = p.cmd.Process.Kill()
		p.mu.Unlock()
		<-exited
	}
	return pid
}
