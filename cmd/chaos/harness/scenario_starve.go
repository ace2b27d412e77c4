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

	"github.com/strata-es/strata/domain/event"
)

// forgedToken is a consistency token far beyond any log.
func forgedToken() string { return event.Position{Major: 1 << 62}.Token() }

// runStarve: one tenant attacks with every slow or expensive request shape
// at once, for longer than the body timeout; the other tenants must be
// served throughout as if nothing happened.
func (e *env) runStarve(ctx context.Context, r *Result) error {
	cfg := e.cfg.Starve
	r.Title = "one tenant cannot starve the others"
	// Production settings: the default rates and per-tenant limits (the
	// harness turns the rates off elsewhere), the default body timeout.
	f, err := e.startAttackFixture(ctx, Starve,
		"STRATA_RATE_COMMANDS=100/s,burst=200", "STRATA_RATE_QUERIES=500/s,burst=1000",
		fmt.Sprintf("STRATA_MAX_IN_FLIGHT=%d", cfg.MaxInFlight), "STRATA_BODY_TIMEOUT="+cfg.BodyTimeout.String())
	if err != nil {
		return err
	}
	defer f.close()
	tok, err := f.token("starve-attacker")
	if err != nil {
		return err
	}
	v, err := f.startVictims(ctx, cfg.Victims)
	if err != nil {
		return err
	}
	defer v.stopVictims()
	time.Sleep(time.Second)
	e.logf("STARVE: the attacker holds %d never-ending bodies, %d slow-header and %d unauthenticated connections, %d slow bodies, "+
		"%d loops of forged consistency tokens (wait=10s), %d loops of 2 MiB bodies (each loop at most one request per %s) and a flood of %d commands/s, for %s; shared cap %d",
		cfg.ChunkedConns, cfg.SlowHeaderConns, cfg.Unauthenticated, cfg.SlowBodies, cfg.ForgedWorkers, cfg.HugeWorkers, cfg.Pace, cfg.FloodRate, cfg.Duration, cfg.MaxInFlight)

	began := time.Now()
	end := began.Add(cfg.Duration)
	v.measuring.Store(true)
	attacker := newHTTPClient(cfg.ForgedWorkers + cfg.HugeWorkers + 8)
	defer attacker.CloseIdleConnections()
	tooLongBody := cfg.BodyTimeout + 2*time.Second
	tooLongHeader := cfg.HeaderTimeout + 2*time.Second
	var (
		wg                           sync.WaitGroup
		chunked, unauth, huge, flood = newTally(), newTally(), newTally(), newTally()
		forged                       = newTally()
		chunkedHeld, forgedHeld      atomic.Int64
		serverErr                    atomic.Int64
		hs                           *slowHeaderStats
		slowBodies                   *tally
		slowLate                     int
		notReady                     atomic.Int64
		readyChecks                  atomic.Int64
	)
	count5xx := func(status int) {
		if status >= 500 {
			serverErr.Add(1)
		}
	}
	// Every loop sends at most one request per cfg.Pace: what starves is
	// how many requests are held open at once, not how fast refused ones
	// are retried, and the harness shares the machine's cores with strata
	// and the victims (an attacker's CPU is not what this scenario tests).
	paced := func(began time.Time) { time.Sleep(cfg.Pace - time.Since(began)) }
	// Loops start spread over one Pace, so that they do not fire in step.
	stagger := func(i, n int) { time.Sleep(time.Duration(i) * cfg.Pace / time.Duration(max(n, 1))) }
	// Never-ending chunked bodies, reopened whenever answered.
	for i := range cfg.ChunkedConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stagger(i, cfg.ChunkedConns)
			for until(ctx, end) {
				t0 := time.Now()
				res := f.rawExchange(ctx, f.postHead("/v1/orders", tok, "Content-Type: application/json", "Transfer-Encoding: chunked"),
					chunks(16, -1, time.Second), tooLongBody+10*time.Second)
				chunked.add(statusKey(res))
				count5xx(res.status)
				if res.status == 0 || res.took > tooLongBody {
					chunkedHeld.Add(1)
					chunked.example("never-ending body: %s after %s", statusKey(res), res.took.Round(time.Millisecond))
				}
				paced(t0)
			}
		}()
	}
	// The same without a token: refused before the body is read.
	for i := range cfg.Unauthenticated {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stagger(i, cfg.Unauthenticated)
			for until(ctx, end) {
				t0 := time.Now()
				res := f.rawExchange(ctx, f.postHead("/v1/orders", "", "Content-Type: application/json", "Transfer-Encoding: chunked"),
					chunks(16, -1, time.Second), tooLongBody+10*time.Second)
				unauth.add(statusKey(res))
				count5xx(res.status)
				paced(t0)
			}
		}()
	}
	// Slow headers, with the attacker's token in them.
	wg.Add(1)
	go func() {
		defer wg.Done()
		hs = f.slowHeaders(ctx, cfg.SlowHeaderConns, time.Second, end, tok, tooLongHeader, cfg.HeaderTimeout)
	}()
	// Slow bodies with a Content-Length.
	wg.Add(1)
	go func() {
		defer wg.Done()
		slowBodies, slowLate = f.slowBodies(ctx, cfg.SlowBodies, 500*time.Millisecond, []string{tok}, tooLongBody, cfg.Pace)
	}()
	// Forged consistency tokens with the longest wait.
	get := func(path string, hdr ...string) (int, time.Duration) {
		rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, f.base+path, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		began := time.Now()
		res, err := attacker.Do(req)
		if err != nil {
			return 0, time.Since(began)
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 1<<20))
		res.Body.Close()
		return res.StatusCode, time.Since(began)
	}
	postInvalid := func() int {
		rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(rctx, http.MethodPost, f.base+"/v1/orders", strings.NewReader(`{"currency":"EUR"}`))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		res, err := attacker.Do(req)
		if err != nil {
			return 0
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 1<<20))
		res.Body.Close()
		return res.StatusCode
	}
	for i := range cfg.ForgedWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stagger(i, cfg.ForgedWorkers)
			for until(ctx, end) {
				t0 := time.Now()
				status, took := get("/v1/orders?wait=10s", "X-Consistency-Token", forgedToken())
				forged.add(fmt.Sprint(status))
				count5xx(status)
				if status == 0 || took > 2*time.Second {
					forgedHeld.Add(1)
					forged.example("forged token: %d after %s", status, took.Round(time.Millisecond))
				}
				paced(t0)
			}
		}()
	}
	// 2 MiB bodies, with and without Content-Length.
	kinds := r14Kinds()[:3]
	for w := range cfg.HugeWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stagger(w, cfg.HugeWorkers)
			for i := w; until(ctx, end); i++ {
				t0 := time.Now()
				res := kinds[i%len(kinds)].send(ctx, f, tok)
				huge.add(statusKey(res))
				count5xx(res.status)
				paced(t0)
			}
		}()
	}
	// A flood of commands beyond the attacker's rate (100/s), paced, of an
	// invalid create: the part within the rate is refused by validation
	// (400) without touching the database, the rest by the rate (429).
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Second / time.Duration(cfg.FloodRate))
		defer tick.Stop()
		var fw sync.WaitGroup
		sem := make(chan struct{}, 16)
		for until(ctx, end) {
			<-tick.C
			select {
			case sem <- struct{}{}:
			default:
				flood.add("skipped (client busy)")
				continue
			}
			fw.Add(1)
			go func() {
				defer fw.Done()
				defer func() { <-sem }()
				status := postInvalid()
				flood.add(fmt.Sprint(status))
				count5xx(status)
			}()
		}
		fw.Wait()
	}()
	// The readiness probe, as a load balancer sees it.
	wg.Add(1)
	go func() {
		defer wg.Done()
		probe := newHTTPClient(1)
		for until(ctx, end) {
			readyChecks.Add(1)
			if !f.readyz(ctx, probe) {
				notReady.Add(1)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}()
	wg.Wait()
	took := time.Since(began)
	v.measuring.Store(false)
	fig := v.figures()
	e.logf("STARVE: attack over after %s", took.Round(time.Millisecond))

	minVictim := int(float64(cfg.Duration) / float64(cfg.Victims.Every) * float64(cfg.Victims.Tenants*cfg.Victims.Clients) / 2)
	fig.check(r, cfg.Victims, minVictim)
	r.zero("5xx responses to other tenants", fig.statuses[500]+fig.statuses[502]+fig.statuses[503]+fig.statuses[504])
	r.zero("5xx responses to the attacker", int(serverErr.Load()))
	r.zero("forged consistency tokens held over 2 s (refused at once: 400, or 429)", int(forgedHeld.Load()))
	r.zero(fmt.Sprintf("never-ending bodies held over the body timeout + 2 s (%s)", tooLongBody), int(chunkedHeld.Load()))
	r.zero(fmt.Sprintf("slow bodies held over the body timeout + 2 s (%s)", tooLongBody), slowLate)
	r.zero(fmt.Sprintf("slow-header connections open over ReadHeaderTimeout + 2 s (%s)", tooLongHeader), int(hs.heldTooLong.Load()))
	r.check("the flood beyond the attacker's rate answered 429", "> 0", flood.get("429"), flood.get("429") > 0)
	r.check("forged tokens refused as such (400)", "> 0", forged.get("400"), forged.get("400") > 0)
	r.note("/readyz: %d checks, %d not 200", readyChecks.Load(), notReady.Load())
	r.note("never-ending bodies: %s", chunked)
	r.note("unauthenticated never-ending bodies: %s", unauth)
	r.note("slow bodies: %s", slowBodies)
	r.note("slow headers: %d connections, %d closed by the server", hs.opened.Load(), hs.closedByServer.Load())
	r.note("forged tokens: %s", forged)
	r.note("2 MiB bodies: %s", huge)
	r.note("flood: %s", flood)
	for _, t := range []*tally{chunked, slowBodies, forged} {
		for _, ex := range t.examples {
			r.note("%s", ex)
		}
	}
	return nil
}
