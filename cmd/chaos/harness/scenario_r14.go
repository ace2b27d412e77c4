package harness

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// r14Kind is one shape of bad request and the status it must get.
type r14Kind struct {
	name string
	want int
	// reads: the server may read up to the body limit (+1) of it.
	reads bool
	send  func(ctx context.Context, f *attackFixture, tok string) rawResult
}

func r14Kinds() []r14Kind {
	create := "/v1/orders"
	post := func(f *attackFixture, tok string, lines ...string) string {
		return f.postHead(create, tok, append([]string{"Content-Type: application/json"}, lines...)...)
	}
	const limit = 30 * time.Second
	return []r14Kind{
		{name: "2 MiB body with Content-Length", want: http.StatusRequestEntityTooLarge,
			send: func(ctx context.Context, f *attackFixture, tok string) rawResult {
				return f.rawExchange(ctx, post(f, tok, fmt.Sprintf("Content-Length: %d", 2*apiBodyLimit)), chunksRaw(64<<10, 2*apiBodyLimit), limit)
			}},
		{name: "2 MiB chunked body", want: http.StatusRequestEntityTooLarge, reads: true,
			send: func(ctx context.Context, f *attackFixture, tok string) rawResult {
				return f.rawExchange(ctx, post(f, tok, "Transfer-Encoding: chunked"), chunks(64<<10, 2*apiBodyLimit, 0), limit)
			}},
		{name: "chunked body without end", want: http.StatusRequestEntityTooLarge, reads: true,
			send: func(ctx context.Context, f *attackFixture, tok string) rawResult {
				return f.rawExchange(ctx, post(f, tok, "Transfer-Encoding: chunked"), chunks(64<<10, -1, 0), limit)
			}},
		{name: "72 KiB header", want: http.StatusRequestHeaderFieldsTooLarge,
			send: func(ctx context.Context, f *attackFixture, tok string) rawResult {
				return f.rawExchange(ctx, post(f, tok, "X-Big: "+strings.Repeat("a", 72<<10), "Content-Length: 2"), body("{}"), limit)
			}},
		{name: "wrong Content-Type", want: http.StatusUnsupportedMediaType,
			send: func(ctx context.Context, f *attackFixture, tok string) rawResult {
				b := `{"customer_id":"c-1","currency":"EUR"}`
				return f.rawExchange(ctx, f.postHead(create, tok, "Content-Type: text/plain", fmt.Sprintf("Content-Length: %d", len(b))), body(b), limit)
			}},
		{name: "JSON nested 10,000 deep", want: http.StatusBadRequest,
			send: func(ctx context.Context, f *attackFixture, tok string) rawResult {
				b := `{"customer_id":` + strings.Repeat("[", 10_000) + strings.Repeat("]", 10_000) + `,"currency":"EUR"}`
				return f.rawExchange(ctx, post(f, tok, fmt.Sprintf("Content-Length: %d", len(b))), body(b), limit)
			}},
		{name: "truncated JSON", want: http.StatusBadRequest,
			send: func(ctx context.Context, f *attackFixture, tok string) rawResult {
				b := `{"customer_id":"c-1","curr`
				return f.rawExchange(ctx, post(f, tok, fmt.Sprintf("Content-Length: %d", len(b))), body(b), limit)
			}},
		{name: "invalid UTF-8", want: http.StatusBadRequest,
			send: func(ctx context.Context, f *attackFixture, tok string) rawResult {
				b := "{\"customer_id\":\"c-\xff\xfe\",\"currency\":\"EUR\"}"
				return f.rawExchange(ctx, post(f, tok, fmt.Sprintf("Content-Length: %d", len(b))), body(b), limit)
			}},
	}
}

// chunksRaw writes total bytes of spaces in writes of size, for a body
// with a Content-Length, until done.
func chunksRaw(size, total int) func(w io.Writer, done <-chan struct{}) error {
	return func(w io.Writer, done <-chan struct{}) error {
		buf := []byte(strings.Repeat(" ", size))
		for sent := 0; sent < total; sent += size {
			select {
			case <-done:
				return nil
			default:
			}
			if _, err := w.Write(buf); err != nil {
				return err
			}
		}
		return nil
	}
}

func body(s string) func(w io.Writer, done <-chan struct{}) error {
	return func(w io.Writer, _ <-chan struct{}) error {
		_, err := io.WriteString(w, s)
		return err
	}
}

// runR14: oversized and malformed requests from one tenant while other
// tenants are served.
func (e *env) runR14(ctx context.Context, r *Result) error {
	cfg := e.cfg.R14
	r.Title = "oversized and malformed bodies"
	f, err := e.startAttackFixture(ctx, R14)
	if err != nil {
		return err
	}
	defer f.close()
	tok, err := f.token("r14-attacker")
	if err != nil {
		return err
	}
	v, err := f.startVictims(ctx, cfg.Victims)
	if err != nil {
		return err
	}
	defer v.stopVictims()
	time.Sleep(time.Second) // warm the victims' connections and the server
	before, err := f.stats()
	if err != nil {
		return err
	}
	e.logf("R14: %d bad requests over %d connections at once; serve RSS %d MiB", cfg.Requests, cfg.Workers, before.rss>>20)

	kinds := r14Kinds()
	var sent, readers, wrong, serverErr atomic.Int64
	byKind := make([]*tally, len(kinds))
	for i := range byKind {
		byKind[i] = newTally()
	}
	var next atomic.Int64
	began := time.Now()
	v.measuring.Store(true)
	var wg sync.WaitGroup
	for w := 0; w < cfg.Workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= cfg.Requests || time.Since(began) > cfg.MaxDuration {
					return
				}
				k := kinds[i%len(kinds)]
				res := k.send(ctx, f, tok)
				sent.Add(1)
				if k.reads {
					readers.Add(1)
				}
				byKind[i%len(kinds)].add(statusKey(res))
				if res.status >= 500 {
					serverErr.Add(1)
				}
				if res.status != k.want {
					wrong.Add(1)
					byKind[i%len(kinds)].example("%s: %s (%v), want %d", k.name, statusKey(res), res.err, k.want)
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(began)
	v.measuring.Store(false)
	after, err := f.stats()
	if err != nil {
		return err
	}
	fig := v.figures()
	e.logf("R14: %d requests in %s; serve RSS peak %d MiB", sent.Load(), took.Round(time.Millisecond), after.hwm>>20)

	r.check("bad requests sent", fmt.Sprintf(">= %d", cfg.Requests), sent.Load(), sent.Load() >= int64(cfg.Requests))
	r.zero("wrong statuses (413 oversized, 431 header, 415 type, 400 malformed)", int(wrong.Load()))
	r.zero("5xx responses (attack and other tenants)", int(serverErr.Load())+fig.statuses[500]+fig.statuses[502]+fig.statuses[503]+fig.statuses[504])
	// What the server may read: the body limit + 1 of each body it must
	// read to know it is too large, plus the 256 KiB net/http drains of a
	// chunked body after the answer (bounded by strata's body deadline),
	// and 64 KiB (headers, chunk framing, buffering, the database's
	// answers) per request. A server reading bodies to their end would
	// read several MiB per oversized body.
	read := after.rchar - before.rchar
	allowed := readers.Load()*(apiBodyLimit+1+256<<10) + (sent.Load()+int64(fig.n))*(64<<10)
	r.check("bytes the server read", fmt.Sprintf("<= %.1f MiB (limit+1+256 KiB per oversized body)", float64(allowed)/(1<<20)),
		fmt.Sprintf("%.1f MiB", float64(read)/(1<<20)), read <= allowed)
	growth := after.hwm - before.rss
	r.check("RSS growth (peak during the attack - RSS before)", fmt.Sprintf("< %d MiB", cfg.MaxRSSGrowth>>20),
		fmt.Sprintf("%.1f MiB", float64(growth)/(1<<20)), growth < cfg.MaxRSSGrowth)
	fig.check(r, cfg.Victims, 1)
	for i, k := range kinds {
		r.note("%s (want %d): %s", k.name, k.want, byKind[i])
		for _, ex := range byKind[i].examples {
			r.note("WRONG: %s", ex)
		}
	}
	r.note("%d requests in %s; serve RSS %.1f MiB before, peak %.1f MiB; %d fds before, %d after",
		sent.Load(), took.Round(time.Millisecond), float64(before.rss)/(1<<20), float64(after.hwm)/(1<<20), before.fds, after.fds)
	return nil
}
