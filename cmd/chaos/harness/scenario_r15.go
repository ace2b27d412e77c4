package harness

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// slowHeaderStats counts what slowHeaders saw: connections opened, closed
// by the server, and held longer than they may be, and the longest life.
type slowHeaderStats struct {
	opened, closedByServer, heldTooLong atomic.Int64
	mu                                  sync.Mutex
	longest                             time.Duration
}

// slowHeaders keeps conns connections sending a request's headers one byte
// every pause until end, opening a new one whenever the server closes one.
func (f *attackFixture) slowHeaders(ctx context.Context, conns int, pause time.Duration, end time.Time, token string, tooLong, spread time.Duration) *slowHeaderStats {
	st := &slowHeaderStats{}
	var wg sync.WaitGroup
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Spread over spread, so that the connections do not all
			// time out and reconnect in step.
			time.Sleep(time.Duration(i) * spread / time.Duration(conns))
			for until(ctx, end) {
				f.oneSlowHeader(ctx, pause, end, token, tooLong, st)
			}
		}()
	}
	wg.Wait()
	return st
}

func (f *attackFixture) oneSlowHeader(ctx context.Context, pause time.Duration, end time.Time, token string, tooLong time.Duration, st *slowHeaderStats) {
	c, err := f.dial(ctx)
	if err != nil {
		time.Sleep(100 * time.Millisecond)
		return
	}
	defer c.Close()
	st.opened.Add(1)
	began := time.Now()
	head := "GET /v1/orders HTTP/1.1\r\nHost: " + f.addr + "\r\n"
	if token != "" {
		head += "Authorization: Bearer " + token + "\r\n"
	}
	head += "X-Slow: " + strings.Repeat("a", 4096)
	closed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, c) // ends when the server closes (or we do)
		close(closed)
	}()
	for i := 0; ; i++ {
		select {
		case <-closed:
			lived := time.Since(began)
			st.closedByServer.Add(1)
			if lived > tooLong {
				st.heldTooLong.Add(1)
			}
			st.mu.Lock()
			st.longest = max(st.longest, lived)
			st.mu.Unlock()
			return
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		if !time.Now().Before(end) {
			if time.Since(began) > tooLong { // the attack ended, but the server should have closed it long ago
				st.heldTooLong.Add(1)
			}
			return
		}
		if i >= len(head) {
			continue
		}
		if _, err := c.Write([]byte{head[i]}); err != nil {
			<-closed
			lived := time.Since(began)
			st.closedByServer.Add(1)
			if lived > tooLong {
				st.heldTooLong.Add(1)
			}
			return
		}
	}
}

// slowBodies sends n authenticated POSTs whose bodies arrive one byte every
// pause (tokens in turn) and tallies their answers; tooLong counts those
// answered later than that (or never).
func (f *attackFixture) slowBodies(ctx context.Context, n int, pause time.Duration, tokens []string, tooLong, spread time.Duration) (*tally, int) {
	t := newTally()
	var late atomic.Int64
	var wg sync.WaitGroup
	body := `{"customer_id":"c-slow","currency":"EUR"}` + strings.Repeat(" ", 200)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * spread / time.Duration(n))
			head := f.postHead("/v1/orders", tokens[i%len(tokens)], "Content-Type: application/json", fmt.Sprintf("Content-Length: %d", len(body)))
			res := f.rawExchange(ctx, head, trickle(body, pause), tooLong+10*time.Second)
			t.add(statusKey(res))
			if res.status == 0 || res.took > tooLong {
				late.Add(1)
				t.example("slow body: %s after %s", statusKey(res), res.took.Round(time.Millisecond))
			}
		}()
	}
	wg.Wait()
	return t, int(late.Load())
}

// runR15: slowloris and slow bodies while other tenants are served; the
// server's descriptors return to their baseline afterwards.
func (e *env) runR15(ctx context.Context, r *Result) error {
	cfg := e.cfg.R15
	r.Title = "slow headers and slow bodies"
	f, err := e.startAttackFixture(ctx, R15, "STRATA_BODY_TIMEOUT="+cfg.BodyTimeout.String())
	if err != nil {
		return err
	}
	defer f.close()
	var tokens []string
	for i := range cfg.BodyTenants {
		tok, err := f.token(fmt.Sprintf("r15-slow%d", i))
		if err != nil {
			return err
		}
		tokens = append(tokens, tok)
	}
	v, err := f.startVictims(ctx, cfg.Victims)
	if err != nil {
		return err
	}
	defer v.stopVictims()
	time.Sleep(time.Second)
	before, err := f.stats()
	if err != nil {
		return err
	}
	e.logf("R15: %d slow-header connections (a byte every %s) for %s, and %d slow-body POSTs; serve has %d fds",
		cfg.SlowHeaderConns, cfg.ByteEvery, cfg.Duration, cfg.SlowBodies, before.fds)
	tooLongHeader := cfg.HeaderTimeout + 2*time.Second
	tooLongBody := cfg.BodyTimeout + 2*time.Second
	began := time.Now()
	end := began.Add(cfg.Duration)
	v.measuring.Store(true)
	var wg sync.WaitGroup
	var hs *slowHeaderStats
	var bodies *tally
	var late int
	wg.Add(2)
	go func() {
		defer wg.Done()
		hs = f.slowHeaders(ctx, cfg.SlowHeaderConns, cfg.ByteEvery, end, "", tooLongHeader, cfg.HeaderTimeout)
	}()
	go func() {
		defer wg.Done()
		bodies, late = f.slowBodies(ctx, cfg.SlowBodies, cfg.ByteEvery, tokens, tooLongBody, time.Second)
	}()
	wg.Wait()
	attackEnd := time.Now()
	v.measuring.Store(false)
	fig := v.figures()
	// Every attacking connection is closed now; the server's descriptors
	// must come back to where they were.
	var after procStats
	var back time.Duration
	backOK := false
	for {
		if after, err = f.stats(); err != nil {
			return err
		}
		if after.fds <= before.fds+cfg.FDSlack {
			back, backOK = time.Since(attackEnd), true
			break
		}
		if time.Since(attackEnd) > cfg.FDsBackWithin+5*time.Second || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.logf("R15: attack over after %s; %d slow-header connections opened", attackEnd.Sub(began).Round(time.Millisecond), hs.opened.Load())

	r.check("slow-header connections opened", fmt.Sprintf(">= %d", cfg.SlowHeaderConns), hs.opened.Load(), hs.opened.Load() >= int64(cfg.SlowHeaderConns))
	r.check("slow-header connections closed by the server", "> 0", hs.closedByServer.Load(), hs.closedByServer.Load() > 0)
	r.zero(fmt.Sprintf("slow-header connections open longer than ReadHeaderTimeout + 2 s (%s)", tooLongHeader), int(hs.heldTooLong.Load()))
	got408 := bodies.get("408")
	r.check("slow-body POSTs answered 408 request_timeout", fmt.Sprintf("%d/%d", cfg.SlowBodies, cfg.SlowBodies),
		fmt.Sprintf("%d/%d", got408, cfg.SlowBodies), got408 == cfg.SlowBodies)
	r.zero(fmt.Sprintf("slow-body POSTs not answered within the body timeout + 2 s (%s)", tooLongBody), late)
	r.within(fmt.Sprintf("serve's descriptors back to the baseline (+%d) after the attack", cfg.FDSlack), cfg.FDsBackWithin, back, backOK)
	r.zero("5xx responses to other tenants", fig.statuses[500]+fig.statuses[502]+fig.statuses[503]+fig.statuses[504])
	fig.check(r, cfg.Victims, 1)
	hs.mu.Lock()
	longest := hs.longest
	hs.mu.Unlock()
	r.note("slow headers: %d connections, %d closed by the server, the longest lived %s", hs.opened.Load(), hs.closedByServer.Load(), longest.Round(time.Millisecond))
	r.note("slow bodies: %s", bodies)
	for _, ex := range bodies.examples {
		r.note("%s", ex)
	}
	r.note("serve descriptors: %d before, %d at the end; RSS %.1f MiB before, %.1f MiB after",
		before.fds, after.fds, float64(before.rss)/(1<<20), float64(after.rss)/(1<<20))
	return nil
}
