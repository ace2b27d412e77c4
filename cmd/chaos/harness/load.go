package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/domain"
)

// stream is one order that every client of a load writes to. Its commands
// follow a life cycle by their place in the stream's sequence (create,
// lines, place, pay or cancel, then commands that the order must reject),
// but the clients race, so some arrive out of turn and are rejected: the
// history then holds definite rejections as well as acknowledgements.
type stream struct {
	tenant   string
	order    string
	customer string
	currency string
	length   int // commands up to and including pay/cancel
	seq      atomic.Int64
}

// products are priced per product, so that repeated adds keep one price.
const products = 20

func productPrice(i int) int64 { return 100 + 37*int64(i) }

// workload is the orders of one load run and a token per tenant.
type workload struct {
	streams []*stream
	tokens  map[string]string
	tenants []string
}

func (e *env) newWorkload(scenario string, cfg LoadConfig) (*workload, error) {
	rng := e.rng(scenario, "workload")
	w := &workload{tokens: map[string]string{}}
	prefix := strings.ToLower(scenario)
	for t := 0; t < cfg.Tenants; t++ {
		tenant := fmt.Sprintf("%s-t%d", prefix, t)
		tok, err := auth.Sign(e.secret, auth.Claims{Subject: "chaos-load", Tenant: domain.TenantID(tenant), Scopes: []string{auth.ScopeAdmin}}, 2*time.Hour)
		if err != nil {
			return nil, err
		}
		w.tokens[tenant] = tok
		w.tenants = append(w.tenants, tenant)
	}
	for i := 0; i < cfg.Streams; i++ {
		tenant := w.tenants[i%cfg.Tenants]
		cur := "EUR"
		if rng.IntN(4) == 0 {
			cur = "USD"
		}
		// Average length about the commands each stream gets, so that
		// about half the orders complete their life cycle.
		per := cfg.Clients * cfg.Commands / cfg.Streams
		length := max(4, per/2+rng.IntN(per+1))
		w.streams = append(w.streams, &stream{
			tenant:   tenant,
			order:    fmt.Sprintf("o%d", i),
			customer: fmt.Sprintf("c%d", i%7),
			currency: cur,
			length:   length,
		})
	}
	return w, nil
}

// command is one HTTP command, fixed before its first attempt: retries
// send exactly the same request with the same idempotency key.
type command struct {
	kind   string
	method string
	path   string
	body   []byte
}

func (s *stream) next(rng *rand.Rand, key string) command {
	n := int(s.seq.Add(1))
	kind := ""
	switch {
	case n == 1:
		kind = "create"
	case n < s.length-1:
		kind = "add_line"
		if rng.IntN(5) == 0 {
			kind = "remove_line"
		}
	case n == s.length-1:
		kind = "place"
	case n == s.length:
		kind = "pay"
		if rng.IntN(10) < 3 {
			kind = "cancel"
		}
	default:
		kind = []string{"create", "add_line", "remove_line", "place", "pay", "cancel"}[rng.IntN(6)]
	}
	base := "/v1/orders/" + s.order
	switch kind {
	case "create":
		body, _ := json.Marshal(map[string]string{"order_id": s.order, "customer_id": s.customer, "currency": s.currency})
		return command{kind, http.MethodPost, "/v1/orders", body}
	case "add_line":
		p := rng.IntN(products)
		body, _ := json.Marshal(map[string]any{"product_id": fmt.Sprintf("p%d", p), "quantity": 1 + rng.IntN(5),
			"unit_price": map[string]any{"amount": productPrice(p), "currency": s.currency}})
		return command{kind, http.MethodPost, base + "/lines", body}
	case "remove_line":
		return command{kind, http.MethodDelete, fmt.Sprintf("%s/lines/p%d", base, rng.IntN(products)), nil}
	case "place":
		return command{kind, http.MethodPost, base + "/place", nil}
	case "pay":
		body, _ := json.Marshal(map[string]string{"payment_reference": "psp-" + key})
		return command{kind, http.MethodPost, base + "/pay", body}
	default:
		body, _ := json.Marshal(map[string]string{"reason": "chaos " + key})
		return command{kind, http.MethodPost, base + "/cancel", body}
	}
}

// loadRun drives a workload against a set of serve processes.
type loadRun struct {
	cfg     LoadConfig
	w       *workload
	urls    []string
	client  *http.Client
	hist    *history
	started time.Time
	// onAttempt, when set, sees every attempt as it ends (R2 times the
	// first success after PostgreSQL is back).
	onAttempt func(Attempt)
	done      atomic.Int64 // operations finished
	// halted stops issuing new commands (those in flight still resolve):
	// MOVE runs the load until its move has finished, however long that is.
	halted atomic.Bool
	// inflight counts the attempts under way per serve process, so that
	// R1 can kill a process while it is executing commands (the case where
	// a commit may have happened but its response is lost).
	inflight []atomic.Int64
}

func newHTTPClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		// Loopback only: the dialer refuses anything else.
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
				return nil, fmt.Errorf("chaos: refusing to dial %s: loopback only", addr)
			}
			return (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, network, addr)
		},
		MaxIdleConns:        2 * conns,
		MaxIdleConnsPerHost: conns,
		DisableCompression:  true,
	}}
}

// run issues every client's commands and returns when all have resolved
// (or been given up on after RetryFor).
func (l *loadRun) run(ctx context.Context, rngFor func(client int) *rand.Rand) {
	l.started = time.Now()
	deadline := l.started.Add(l.cfg.MaxDuration)
	var wg sync.WaitGroup
	for c := 0; c < l.cfg.Clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rngFor(c)
			// The client's registrations are spread at random among its
			// commands; without any, the steps (and the random draws)
			// are the commands alone, as before registrations existed.
			steps, registered := l.cfg.Commands+l.cfg.Registrations, 0
			for j, k := 0, 0; j < steps; j++ {
				if l.cfg.Pace > 0 {
					at := l.started.Add(time.Duration(j) * l.cfg.Pace / time.Duration(steps))
					if d := time.Until(at); d > 0 {
						select {
						case <-ctx.Done():
							return
						case <-time.After(d):
						}
					}
				}
				if ctx.Err() != nil || time.Now().After(deadline) || l.halted.Load() {
					return
				}
				if left := l.cfg.Registrations - registered; left > 0 && rng.IntN(steps-j) < left {
					l.register(ctx, rng, c, registered)
					registered++
					continue
				}
				s := l.w.streams[rng.IntN(len(l.w.streams))]
				key := fmt.Sprintf("c%d-k%d", c, k)
				k++
				l.execute(ctx, rng, c, s, key, s.next(rng, key))
			}
		}()
	}
	wg.Wait()
}

// execute runs one command to a resolution: it retries indeterminate
// attempts with the same idempotency key (on any serve process) until an
// attempt is definite or RetryFor has passed.
func (l *loadRun) execute(ctx context.Context, rng *rand.Rand, client int, s *stream, key string, cmd command) {
	l.executeOp(ctx, rng, &Op{Client: client, Tenant: s.tenant, Order: s.order, Kind: cmd.kind, Key: key, Start: time.Now(), Outcome: Info, cmd: cmd})
}

// executeOp is execute of an operation already described (its command,
// tenant and key set, Start now, Outcome Info), whatever its aggregate.
func (l *loadRun) executeOp(ctx context.Context, rng *rand.Rand, op *Op) {
	key, cmd := op.Key, op.cmd
	defer func() {
		op.End = time.Now()
		l.hist.add(op)
		l.done.Add(1)
	}()
	for n := 1; ; n++ {
		target := rng.IntN(len(l.urls))
		a := l.attempt(ctx, target, op.Tenant, key, cmd)
		op.Attempts = append(op.Attempts, a.Attempt)
		if l.onAttempt != nil {
			l.onAttempt(a.Attempt)
		}
		switch a.Outcome {
		case OK:
			op.Outcome, op.Version, op.Status = OK, a.version, a.Status
			return
		case Fail:
			op.Outcome, op.Status, op.Code = Fail, a.Status, a.Code
			return
		}
		if ctx.Err() != nil || time.Since(op.Start) > l.cfg.RetryFor || n >= 500 {
			return // unresolved: stays Info
		}
		// Jittered exponential backoff from 50 ms to 1 s.
		d := min(50*time.Millisecond<<min(n-1, 5), time.Second)
		d = d/2 + time.Duration(rng.Int64N(int64(d/2)+1))
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
	}
}

type attemptResult struct {
	Attempt
	version int64
}

func (l *loadRun) attempt(ctx context.Context, target int, tenant, key string, cmd command) (a attemptResult) {
	a.Start, a.Target = time.Now(), target
	if l.inflight != nil {
		l.inflight[target].Add(1)
		defer l.inflight[target].Add(-1)
	}
	defer func() { a.End = time.Now() }()
	actx, cancel := context.WithTimeout(ctx, l.cfg.RequestTimeout)
	defer cancel()
	var body io.Reader
	if cmd.body != nil {
		body = bytes.NewReader(cmd.body)
	}
	req, err := http.NewRequestWithContext(actx, cmd.method, l.urls[target]+cmd.path, body)
	if err != nil {
		a.Err, a.Outcome = err.Error(), Info
		return a
	}
	req.Header.Set("Authorization", "Bearer "+l.w.tokens[tenant])
	req.Header.Set("Idempotency-Key", key)
	if cmd.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := l.client.Do(req)
	if err != nil {
		a.Err, a.Outcome = transportError(err), Info
		return a
	}
	raw, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	res.Body.Close()
	a.Status = res.StatusCode
	a.RetryAfter = res.Header.Get("Retry-After") != ""
	a.Replayed = res.Header.Get("Idempotent-Replayed") == "true"
	if err != nil {
		// The status came but the body did not: the outcome is still
		// known only if the status is.
		a.Err = transportError(err)
	}
	a.Outcome = classifyStatus(res.StatusCode)
	if a.Outcome == OK {
		var ok struct {
			OrderID string `json:"order_id"`
			Version int64  `json:"version"`
		}
		if json.Unmarshal(raw, &ok) != nil || ok.Version < 1 {
			a.Outcome, a.Err = Info, "2xx without a version in the body"
			return a
		}
		a.version = ok.Version
		return a
	}
	var eb struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(raw, &eb)
	a.Code = eb.Error.Code
	return a
}

// classifyStatus maps a status onto an outcome: 2xx acknowledged; a 4xx
// is the server's decision (the command did not and will not run under
// this key), except 429 which is a "not now"; 5xx and anything else is
// indeterminate, including a 500 (the detail may have been a failed
// COMMIT whose fate is unknown).
func classifyStatus(status int) Outcome {
	switch {
	case status >= 200 && status < 300:
		return OK
	case status == http.StatusTooManyRequests:
		return Info
	case status >= 400 && status < 500:
		return Fail
	default:
		return Info
	}
}

func transportError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case strings.Contains(err.Error(), "connection refused"):
		return "connection refused"
	case strings.Contains(err.Error(), "connection reset"), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection dropped"
	}
	return oneLine(err.Error(), 120)
}
