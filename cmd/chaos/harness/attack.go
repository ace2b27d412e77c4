package harness

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/domain"
)

// apiBodyLimit is the request body limit the README documents (1 MiB):
// the harness tests it from the outside rather than importing it.
const apiBodyLimit = 1 << 20

// VictimConfig sizes the well-behaved tenants whose latency R14, R15 and
// STARVE bound while the attacks run.
type VictimConfig struct {
	// Tenants each have Clients clients; each client issues one request
	// every Every (create an order, read it back with its consistency
	// token, add a line, list the customer's orders with the token).
	Tenants, Clients int
	Every            time.Duration
	// P99 is the most the 99th percentile latency may be.
	P99 time.Duration
}

// attackFixture is what R14, R15 and STARVE share: one serve process (every
// role) on a fresh database, and the victims' load.
type attackFixture struct {
	e    *env
	id   string
	url  string
	sup  *supervisor
	base string // http://127.0.0.1:port
	addr string // 127.0.0.1:port
}

// startAttackFixture starts the process with strataEnv plus extra (later
// settings win).
func (e *env) startAttackFixture(ctx context.Context, id string, extra ...string) (*attackFixture, error) {
	name := "chaos_" + strings.ToLower(id)
	url, err := e.newStrataDatabase(ctx, name)
	if err != nil {
		return nil, err
	}
	pname := strings.ToLower(id) + "-serve"
	sup, err := e.startSupervised(ctx, []procSpec{{Name: pname, Roles: "command,query,projector",
		Env: e.strataEnv(url, filepath.Join(e.dir, "data", pname), extra...)}})
	if err != nil {
		return nil, err
	}
	base := sup.URLs()[0]
	return &attackFixture{e: e, id: id, url: url, sup: sup, base: base, addr: strings.TrimPrefix(base, "http://")}, nil
}

func (f *attackFixture) close() { f.sup.Stop(25 * time.Second) }

func (f *attackFixture) token(tenant string) (string, error) {
	return auth.Sign(f.e.secret, auth.Claims{Subject: "chaos-" + tenant, Tenant: domain.TenantID(tenant)}, 2*time.Hour)
}

// procStats are what /proc says of the serve process.
type procStats struct {
	rss, hwm int64 // resident set now and at its peak, bytes
	fds      int
	rchar    int64 // bytes returned by read(2) and friends, every descriptor
}

func (f *attackFixture) stats() (procStats, error) {
	pid := f.sup.Pid(0)
	if pid == 0 {
		return procStats{}, fmt.Errorf("%s: the serve process is not running", f.id)
	}
	var s procStats
	dir := "/proc/" + strconv.Itoa(pid)
	status, err := os.ReadFile(dir + "/status")
	if err != nil {
		return s, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(fields[1], 10, 64)
		switch fields[0] {
		case "VmRSS:":
			s.rss = kb << 10
		case "VmHWM:":
			s.hwm = kb << 10
		}
	}
	fds, err := os.ReadDir(dir + "/fd")
	if err != nil {
		return s, err
	}
	s.fds = len(fds)
	io, err := os.ReadFile(dir + "/io")
	if err != nil {
		return s, err
	}
	for _, line := range strings.Split(string(io), "\n") {
		if v, ok := strings.CutPrefix(line, "rchar: "); ok {
			s.rchar, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return s, nil
}

// dialLoopback opens a raw connection to the serve process (loopback only,
// as newHTTPClient's dialer).
func (f *attackFixture) dial(ctx context.Context) (net.Conn, error) {
	host, _, err := net.SplitHostPort(f.addr)
	if err != nil {
		return nil, err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("chaos: refusing to dial %s: loopback only", f.addr)
	}
	return (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, "tcp", f.addr)
}

// rawResult is the outcome of one hand-written HTTP exchange.
type rawResult struct {
	status int    // 0: no response
	code   string // the error shape's code, if any
	err    error
	took   time.Duration // until the response (or the connection's end)
}

// rawExchange writes head (request line and headers, up to the blank
// line), then body, if any, in the background until it returns or the
// response arrives, and reads one response. The connection is closed
// afterwards. limit bounds the whole exchange.
func (f *attackFixture) rawExchange(ctx context.Context, head string, body func(w io.Writer, done <-chan struct{}) error, limit time.Duration) rawResult {
	began := time.Now()
	c, err := f.dial(ctx)
	if err != nil {
		return rawResult{err: err, took: time.Since(began)}
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(limit))
	// Written in the background even the head: the server may answer (431)
	// and close before it has read all of it, and the answer is what counts.
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := io.WriteString(c, head); err != nil || body == nil {
			return
		}
		_ = body(c, done)
	}()
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	close(done)
	out := rawResult{err: err, took: time.Since(began)}
	if err == nil {
		out.status = res.StatusCode
		raw, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
		res.Body.Close()
		var shape struct {
			Error struct{ Code string } `json:"error"`
		}
		if json.Unmarshal(raw, &shape) == nil {
			out.code = shape.Error.Code
		}
	}
	_ = c.Close() // ends a body writer blocked in Write
	wg.Wait()
	return out
}

// chunks writes chunked-encoding chunks of size bytes, total bytes in all
// (total < 0: without end), every pause, until done; then the last chunk
// when the body has an end.
func chunks(size, total int, pause time.Duration) func(w io.Writer, done <-chan struct{}) error {
	return func(w io.Writer, done <-chan struct{}) error {
		chunk := []byte(fmt.Sprintf("%x\r\n%s\r\n", size, bytes.Repeat([]byte(" "), size)))
		for sent := 0; total < 0 || sent < total; sent += size {
			select {
			case <-done:
				return nil
			default:
			}
			if _, err := w.Write(chunk); err != nil {
				return err
			}
			if pause > 0 {
				select {
				case <-done:
					return nil
				case <-time.After(pause):
				}
			}
		}
		_, err := io.WriteString(w, "0\r\n\r\n")
		return err
	}
}

// trickle writes body one byte every pause until done.
func trickle(body string, pause time.Duration) func(w io.Writer, done <-chan struct{}) error {
	return func(w io.Writer, done <-chan struct{}) error {
		for i := 0; i < len(body); i++ {
			select {
			case <-done:
				return nil
			case <-time.After(pause):
			}
			if _, err := w.Write([]byte{body[i]}); err != nil {
				return err
			}
		}
		return nil
	}
}

// postHead is the head of a POST to path with the given extra header lines.
func (f *attackFixture) postHead(path, token string, lines ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: %s\r\n", path, f.addr)
	if token != "" {
		fmt.Fprintf(&b, "Authorization: Bearer %s\r\n", token)
	}
	for _, l := range lines {
		b.WriteString(l + "\r\n")
	}
	b.WriteString("\r\n")
	return b.String()
}

// victims is the well-behaved tenants' load and what it measured while
// measuring was on.
type victims struct {
	f         *attackFixture
	cfg       VictimConfig
	client    *http.Client
	measuring atomic.Bool
	stop      chan struct{}
	wg        sync.WaitGroup

	mu       sync.Mutex
	lat      []time.Duration
	errors   int
	statuses map[int]int
	examples []string
}

// startVictims starts the victims' clients; measure and stopVictims
// bracket the window whose figures count.
func (f *attackFixture) startVictims(ctx context.Context, cfg VictimConfig) (*victims, error) {
	v := &victims{f: f, cfg: cfg, client: newHTTPClient(cfg.Tenants * cfg.Clients), stop: make(chan struct{}), statuses: map[int]int{}}
	for t := 0; t < cfg.Tenants; t++ {
		tenant := fmt.Sprintf("%s-victim%d", strings.ToLower(f.id), t)
		tok, err := f.token(tenant)
		if err != nil {
			return nil, err
		}
		for c := 0; c < cfg.Clients; c++ {
			v.wg.Add(1)
			go func() {
				defer v.wg.Done()
				v.client1(ctx, tok, fmt.Sprintf("c%d", c))
			}()
		}
	}
	return v, nil
}

// stopVictims ends the load and waits for the clients.
func (v *victims) stopVictims() {
	close(v.stop)
	v.wg.Wait()
	v.client.CloseIdleConnections()
}

func (v *victims) client1(ctx context.Context, tok, name string) {
	next := time.Now()
	var pos string
	for i := 0; ; i++ {
		select {
		case <-v.stop:
			return
		case <-ctx.Done():
			return
		case <-time.After(time.Until(next)):
		}
		next = next.Add(v.cfg.Every)
		if now := time.Now(); next.Before(now) {
			next = now // behind: no burst to catch up
		}
		order := fmt.Sprintf("%s-o%d", name, i/4)
		var method, path, body string
		switch i % 4 {
		case 0:
			method, path, body = http.MethodPost, "/v1/orders", fmt.Sprintf(`{"order_id":%q,"customer_id":%q,"currency":"EUR"}`, order, name)
		case 1:
			method, path = http.MethodGet, "/v1/orders/"+order+"?wait=2s"
		case 2:
			method, path, body = http.MethodPost, "/v1/orders/"+order+"/lines", `{"product_id":"p-1","quantity":2,"unit_price":{"amount":150,"currency":"EUR"}}`
		case 3:
			method, path = http.MethodGet, "/v1/orders?limit=10&customer_id="+name+"&wait=2s"
		}
		status, got, took, err := v.do(ctx, method, path, tok, body, pos)
		if status/100 == 2 && got != "" {
			pos = got
		}
		if !v.measuring.Load() {
			continue
		}
		v.mu.Lock()
		v.lat = append(v.lat, took)
		v.statuses[status]++
		if err != nil || status/100 != 2 {
			v.errors++
			if len(v.examples) < 10 {
				v.examples = append(v.examples, fmt.Sprintf("victim %s %s: %d %v", method, path, status, err))
			}
		}
		v.mu.Unlock()
	}
}

func (v *victims) do(ctx context.Context, method, path, tok, body, pos string) (status int, position string, took time.Duration, err error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(rctx, method, v.f.base+path, rd)
	if err != nil {
		return 0, "", 0, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if method == http.MethodGet && pos != "" {
		req.Header.Set("X-Consistency-Token", pos)
	}
	began := time.Now()
	res, err := v.client.Do(req)
	if err != nil {
		return 0, "", time.Since(began), err
	}
	raw, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	res.Body.Close()
	took = time.Since(began)
	var ok struct {
		Position string `json:"position"`
	}
	_ = json.Unmarshal(raw, &ok)
	if err == nil && res.StatusCode/100 != 2 {
		err = fmt.Errorf("%s", oneLine(string(raw), 120))
	}
	return res.StatusCode, ok.Position, took, err
}

// victimFigures are the latency figures of the measured window.
type victimFigures struct {
	n             int
	p50, p99, max time.Duration
	errors        int
	statuses      map[int]int
	examples      []string
}

func (v *victims) figures() victimFigures {
	v.mu.Lock()
	defer v.mu.Unlock()
	lat := append([]time.Duration(nil), v.lat...)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	fig := victimFigures{n: len(lat), errors: v.errors, statuses: map[int]int{}, examples: append([]string(nil), v.examples...)}
	for k, n := range v.statuses {
		fig.statuses[k] = n
	}
	if len(lat) > 0 {
		fig.p50, fig.p99, fig.max = percentile(lat, 0.50), percentile(lat, 0.99), lat[len(lat)-1]
	}
	return fig
}

// percentile of sorted durations (nearest rank).
func percentile(sorted []time.Duration, q float64) time.Duration {
	i := int(float64(len(sorted))*q+0.999999) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return sorted[i]
}

// check records the victims' criteria: they were served, without errors,
// with the p99 under the limit; the figures go into the table.
func (fig victimFigures) check(r *Result, cfg VictimConfig, minRequests int) {
	ms := func(d time.Duration) string { return d.Round(100 * time.Microsecond).String() }
	r.check("other tenants' requests during the attack", fmt.Sprintf(">= %d", minRequests), fig.n, fig.n >= minRequests)
	r.zero("other tenants' errors (non-2xx or no response)", fig.errors)
	r.check("other tenants' p99 latency", "< "+cfg.P99.String(),
		fmt.Sprintf("%s (p50 %s, max %s)", ms(fig.p99), ms(fig.p50), ms(fig.max)), fig.n > 0 && fig.p99 < cfg.P99)
	st := map[string]int{}
	for s, n := range fig.statuses {
		st[fmt.Sprint(s)] = n
	}
	r.note("other tenants (%d x %d clients, one request every %s each): %d requests, p50 %s, p99 %s, max %s; statuses %s",
		cfg.Tenants, cfg.Clients, cfg.Every, fig.n, ms(fig.p50), ms(fig.p99), ms(fig.max), formatCounts(st))
	for _, ex := range fig.examples {
		r.note("%s", ex)
	}
}

// tally counts outcomes by name, with a few examples.
type tally struct {
	mu       sync.Mutex
	counts   map[string]int
	examples []string
}

func newTally() *tally { return &tally{counts: map[string]int{}} }

func (t *tally) add(key string) {
	t.mu.Lock()
	t.counts[key]++
	t.mu.Unlock()
}

func (t *tally) example(format string, args ...any) {
	t.mu.Lock()
	if len(t.examples) < 10 {
		t.examples = append(t.examples, fmt.Sprintf(format, args...))
	}
	t.mu.Unlock()
}

func (t *tally) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return formatCounts(t.counts)
}

func (t *tally) get(key string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.counts[key]
}

// statusKey names a raw result for a tally: its status, or how it ended.
func statusKey(res rawResult) string {
	if res.status != 0 {
		return strconv.Itoa(res.status)
	}
	if res.err == nil {
		return "no response"
	}
	if ne, ok := res.err.(net.Error); ok && ne.Timeout() {
		return "client timeout"
	}
	if strings.Contains(res.err.Error(), "EOF") || strings.Contains(res.err.Error(), "reset") {
		return "closed by server"
	}
	return "error"
}

// until reports whether the time is before end, unless ctx is done.
func until(ctx context.Context, end time.Time) bool {
	return ctx.Err() == nil && time.Now().Before(end)
}

// readyz reports whether the process answers 200 on /readyz.
func (f *attackFixture) readyz(ctx context.Context, client *http.Client) bool {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(rctx, http.MethodGet, f.base+"/readyz", nil)
	res, err := client.Do(req)
	if err != nil {
		return false
	}
	res.Body.Close()
	return res.StatusCode == http.StatusOK
}
