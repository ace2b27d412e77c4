package harness

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/internal/paysim"
)

// PM1: the fulfilment process manager under SIGKILL (some at the
// process.after-execute failpoint: between a provider's answer and its
// recording) and a payment provider that misbehaves in every way.
const PM1 = "PM1"

// PM1Config sizes PM1 (docs/chaos.md, "PM1").
type PM1Config struct {
	// Tenants x OrdersPerTenant orders, placed by Clients over Pace.
	Tenants, OrdersPerTenant, Clients int
	Pace                              time.Duration
	// SKUs per tenant, the first ScarceSKUs of them with ScarceStock units
	// (the others Stock); a line takes a scarce SKU with ScarceShare.
	SKUs, ScarceSKUs   int
	Stock, ScarceStock int64
	ScarceShare        float64
	// CancelRate of the customers cancel, HandPayRate pay by hand (POST
	// /v1/orders/{id}/pay, racing our capture), each after a random delay
	// up to the payment timeout + 1 s.
	CancelRate, HandPayRate float64
	// STRATA_PAYMENT_TIMEOUT, STRATA_PAYMENT_HTTP_TIMEOUT and
	// STRATA_PROCESS_ATTEMPTS of the serve processes.
	PaymentTimeout, HTTPTimeout time.Duration
	Attempts                    int
	// KillMin..KillMax between kill rounds; FaultEvery between the
	// provider's fault phases.
	KillMin, KillMax time.Duration
	// SuccessKills: up to this many times (at least SuccessKillEvery
	// apart), the projector-capable processes are killed the moment the
	// provider has flushed a capture's 201 to its caller.
	SuccessKills     int
	SuccessKillEvery time.Duration
	FaultEvery       time.Duration
	// Bound: every instance must be terminal within PaymentTimeout + Bound
	// of its order's placing; Converge is how long the harness waits for
	// that after the clean restart.
	Bound, Converge time.Duration
	// RequestTimeout and RetryFor of the clients' commands.
	RequestTimeout, RetryFor time.Duration
}

// DefaultPM1 is PM1's size in `make chaos` (about a minute and a half on a
// loaded 2-vCPU machine).
func DefaultPM1() PM1Config {
	return PM1Config{
		Tenants: 3, OrdersPerTenant: 70, Clients: 8, Pace: 42 * time.Second,
		SKUs: 6, ScarceSKUs: 2, Stock: 10_000, ScarceStock: 12, ScarceShare: 0.25,
		CancelRate: 0.15, HandPayRate: 0.12,
		PaymentTimeout: 4 * time.Second, HTTPTimeout: time.Second, Attempts: 10,
		KillMin: 3 * time.Second, KillMax: 6 * time.Second, FaultEvery: 4500 * time.Millisecond,
		SuccessKills: 5, SuccessKillEvery: 5 * time.Second,
		Bound: 60 * time.Second, Converge: 40 * time.Second,
		RequestTimeout: 5 * time.Second, RetryFor: 40 * time.Second,
	}
}

// validate reports a configuration PM1 cannot run.
func (c PM1Config) validate() error {
	switch {
	case c.Tenants < 1 || c.OrdersPerTenant < 1 || c.Clients < 1:
		return errors.New("PM1: want at least one tenant, order and client")
	case c.ScarceSKUs < 1 || c.SKUs <= c.ScarceSKUs || c.Stock < 1 || c.ScarceStock < 1:
		return errors.New("PM1: want scarce SKUs and plentiful ones, each with stock")
	case c.PaymentTimeout < time.Second || c.HTTPTimeout <= 0 || c.Attempts < 1 || c.Pace <= 0 || c.FaultEvery <= 0:
		return errors.New("PM1: want a payment timeout of at least 1s, positive durations and attempts")
	case c.KillMin <= 0 || c.KillMax < c.KillMin || c.SuccessKills < 0 || c.Bound <= 0 || c.Converge <= 0 || c.RequestTimeout <= 0 || c.RetryFor <= 0:
		return errors.New("PM1: want 0 < kill min <= kill max and positive bounds")
	}
	return nil
}

// pmPhase is one period of the provider's behaviour, scale x FaultEvery
// long.
type pmPhase struct {
	name   string
	faults paysim.Faults
	scale  float64
}

// pmPhases cycle during the load. Two are "down" (every call 503) for
// longer than the payment timeout, so that deadlines fire with captures
// outstanding (and race the captures when the provider returns).
//
// The orders in declined are declined in every phase (once a capture of
// theirs gets through the phase's other faults), so that every run sees
// payment_declined cancellations whatever the phase their payment falls
// in: a seed whose declined orders all paid outside the two declining
// phases saw none (the PM1 check of the four cancel reasons failed).
func pmPhases(cfg PM1Config, declined []string) []pmPhase {
	phases := []pmPhase{
		{"slow (300 ms) and some 5xx", paysim.Faults{Delay: 300 * time.Millisecond, FailRate: 0.1}, 1.0},
		{"5xx a third of the time", paysim.Faults{FailRate: 0.35}, 1.0},
		{"held past the client's timeout", paysim.Faults{TimeoutRate: 0.25, Hold: 3 * cfg.HTTPTimeout}, 1.0},
		{"succeed, then drop the answer", paysim.Faults{DropRate: 0.35}, 1.0},
		{"down (every call 503)", paysim.Faults{FailRate: 1}, 1.5},
		{"declines", paysim.Faults{DeclineRate: 0.3, FailRate: 0.1, DeclineOrders: declined}, 1.0},
		{"slower than the client's timeout", paysim.Faults{Delay: cfg.HTTPTimeout + 200*time.Millisecond}, 1.0},
		{"everything at once", paysim.Faults{Delay: 100 * time.Millisecond, FailRate: 0.15, TimeoutRate: 0.1, Hold: 3 * cfg.HTTPTimeout,
			DropRate: 0.2, DeclineRate: 0.1, DeclineOrders: declined}, 1.0},
		{"down (every call 503)", paysim.Faults{FailRate: 1}, 1.5},
	}
	for i := range phases {
		phases[i].faults.DeclineOrders = declined
	}
	return phases
}

func (e *env) runPM1(ctx context.Context, r *Result) error {
	cfg := e.cfg.PM1
	if cfg.Tenants == 0 {
		cfg = DefaultPM1()
	}
	if err := cfg.validate(); err != nil {
		return err
	}
	r.Title = "fulfilment: SIGKILL and a misbehaving payment provider"
	name := "chaos_pm1"
	url, err := e.newStrataDatabase(ctx, name)
	if err != nil {
		return err
	}
	var tenants []string
	tokens := map[string]string{}
	for t := 0; t < cfg.Tenants; t++ {
		tenant := fmt.Sprintf("pm1-t%d", t)
		tok, err := auth.Sign(e.secret, auth.Claims{Subject: "chaos-pm1", Tenant: domain.TenantID(tenant), Scopes: []string{auth.ScopeAdmin}}, 2*time.Hour)
		if err != nil {
			return err
		}
		tenants, tokens[tenant] = append(tenants, tenant), tok
	}
	orders := newPMOrders(e.rng(PM1, "orders"), cfg, tenants)
	var declined []string
	for i, o := range orders {
		if i%17 == 5 {
			declined = append(declined, o.id)
		}
	}
	phases := pmPhases(cfg, declined)
	prov := startRecordedProvider(paysim.Config{Seed: uint64(e.cfg.Seed), Faults: phases[0].faults})
	defer prov.Close()

	// Failpoints: each incarnation of a projector-capable process is armed
	// at process.after-execute (the Nth step execution: a command appended
	// or the provider answered, its outcome not yet recorded) or at
	// process.before-commit, until the clean restart.
	var armed atomic.Bool
	armed.Store(true)
	armRng := e.rng(PM1, "failpoints")
	var armMu sync.Mutex
	arm := func() string {
		if !armed.Load() {
			return ""
		}
		armMu.Lock()
		defer armMu.Unlock()
		switch u := armRng.Float64(); {
		case u < 0.4:
			return fmt.Sprintf("process.after-execute=%d", 5+armRng.IntN(40))
		case u < 0.5:
			return fmt.Sprintf("process.before-commit=%d", 3+armRng.IntN(20))
		case u < 0.6:
			return fmt.Sprintf("projector.before-commit=%d", 5+armRng.IntN(40))
		}
		return ""
	}
	extra := []string{
		"STRATA_PROCESSES=all", // the harness runs none by default
		"STRATA_PAYMENT_PROVIDER=http",
		"STRATA_PAYMENT_URL=" + prov.URL(),
		"STRATA_PAYMENT_TIMEOUT=" + cfg.PaymentTimeout.String(),
		"STRATA_PAYMENT_HTTP_TIMEOUT=" + cfg.HTTPTimeout.String(),
		fmt.Sprintf("STRATA_PROCESS_ATTEMPTS=%d", cfg.Attempts),
	}
	var specs []procSpec
	for i, roles := range []string{"command,query,projector", "command,query,projector", "command,query"} {
		pname := fmt.Sprintf("pm1-serve%d", i)
		sp := procSpec{Name: pname, Roles: roles, Env: e.strataEnv(url, filepath.Join(e.dir, "data", pname), extra...)}
		if strings.Contains(roles, "projector") {
			sp.Arm = arm
		}
		specs = append(specs, sp)
	}
	sup, err := e.startSupervised(ctx, specs)
	if err != nil {
		return err
	}
	defer sup.Stop(5 * time.Second)
	lc := LoadConfig{Clients: cfg.Clients, RequestTimeout: cfg.RequestTimeout, RetryFor: cfg.RetryFor}
	load := &loadRun{cfg: lc, w: &workload{tokens: tokens, tenants: tenants}, urls: sup.URLs(), client: newHTTPClient(cfg.Clients + 8),
		hist: &history{}, inflight: make([]atomic.Int64, len(specs))}
	e.logf("PM1: %d serve processes ready (%s); provider %s; %d orders over %d tenants, payment timeout %s, provider call timeout %s",
		len(specs), strings.Join(sup.URLs(), " "), prov.URL(), len(orders), len(tenants), cfg.PaymentTimeout, cfg.HTTPTimeout)

	// Stock first, before any fault.
	stockRng := e.rng(PM1, "stock")
	for _, tenant := range tenants {
		for i := 0; i < cfg.SKUs; i++ {
			q := cfg.Stock
			if i < cfg.ScarceSKUs {
				q = cfg.ScarceStock
			}
			sku := pmSKU(i)
			load.execute(ctx, stockRng, 0, &stream{tenant: tenant, order: sku}, "receive:"+sku, command{"receive", http.MethodPost,
				"/v1/inventory/" + sku + "/receive", jsonBody(map[string]int64{"quantity": q})})
		}
	}

	// Kills the moment a capture's success has reached the runner.
	var successKills []string
	var skMu sync.Mutex
	var lastSK time.Time
	onCaptured := func(key string) {
		skMu.Lock()
		defer skMu.Unlock()
		if !armed.Load() || len(successKills) >= cfg.SuccessKills || time.Since(lastSK) < cfg.SuccessKillEvery {
			return
		}
		lastSK = time.Now()
		var pids []string
		for i, sp := range specs {
			if sp.Arm != nil {
				if pid := sup.Kill(i); pid != 0 {
					pids = append(pids, fmt.Sprintf("%s (pid %d)", sp.Name, pid))
				}
			}
		}
		successKills = append(successKills, fmt.Sprintf("%s after %s: %s", lastSK.Format("15:04:05.000"), key, strings.Join(pids, ", ")))
		e.logf("PM1: capture %s answered 201: SIGKILL %s", key, strings.Join(pids, ", "))
	}
	prov.onCaptured.Store(&onCaptured)

	done := make(chan struct{})
	var bg sync.WaitGroup
	var rounds, kills int
	var phaseLog []string
	bg.Add(3)
	go func() { // kills
		defer bg.Done()
		rng := e.rng(PM1, "kills")
		for {
			pause := cfg.KillMin + time.Duration(rng.Int64N(int64(cfg.KillMax-cfg.KillMin)+1))
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-time.After(pause):
			}
			var victims []int
			if rng.IntN(4) == 0 {
				victims = []int{0, 1, 2}
			} else {
				victims = []int{rng.IntN(len(specs))}
			}
			rounds++
			var pids []string
			for _, i := range victims {
				if pid := sup.Kill(i); pid != 0 {
					kills++
					pids = append(pids, fmt.Sprintf("%s (pid %d)", specs[i].Name, pid))
				}
			}
			e.logf("PM1: kill round %d: SIGKILL %s", rounds, strings.Join(pids, ", "))
		}
	}()
	go func() { // the provider's fault phases
		defer bg.Done()
		for i := 0; ; i++ {
			ph := phases[i%len(phases)]
			prov.sim.SetFaults(ph.faults)
			phaseLog = append(phaseLog, fmt.Sprintf("%s %s", time.Now().Format("15:04:05.0"), ph.name))
			e.logf("PM1: provider: %s", ph.name)
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(ph.scale * float64(cfg.FaultEvery))):
			}
		}
	}()
	go func() { // progress
		defer bg.Done()
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				e.logf("PM1: %d client commands done", load.done.Load())
			}
		}
	}()

	// The orders: order k starts at k*Pace/len(orders), on client k%Clients.
	load.started = time.Now()
	var customers sync.WaitGroup
	var clients sync.WaitGroup
	for c := 0; c < cfg.Clients; c++ {
		clients.Add(1)
		go func() {
			defer clients.Done()
			rng := e.rng(PM1, "client", fmt.Sprint(c))
			for k := c; k < len(orders); k += cfg.Clients {
				at := load.started.Add(time.Duration(k) * cfg.Pace / time.Duration(len(orders)))
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Until(at)):
				}
				o := orders[k]
				load.runOrder(ctx, rng, c, o, rand.New(rand.NewPCG(uint64(e.cfg.Seed), uint64(k))), &customers)
			}
		}()
	}
	clients.Wait()
	customers.Wait()
	loadEnd := time.Now()
	close(done)
	bg.Wait()
	e.logf("PM1: load done in %s; %d kill rounds, %d SIGKILLs, %d failpoint kills", loadEnd.Sub(load.started).Round(100*time.Millisecond),
		rounds, kills, sup.count("failpoint"))
	r.check("kill rounds during the load", ">= 3", fmt.Sprintf("%d (%d SIGKILLs)", rounds, kills), rounds >= 3)
	skMu.Lock()
	nsk := len(successKills)
	r.check("projector-capable processes killed just after a capture's 201 was flushed to them", ">= 1", nsk, nsk >= 1)
	r.note("kills after a capture's 201: %s", strings.Join(successKills, "; "))
	skMu.Unlock()
	fpExec, fpCommit, fpProj := 0, 0, 0
	for _, ev := range sup.Events() {
		if ev.Kind == "failpoint" {
			switch {
			case strings.Contains(ev.Detail, "process.after-execute"):
				fpExec++
			case strings.Contains(ev.Detail, "process.before-commit"):
				fpCommit++
			default:
				fpProj++
			}
		}
	}
	r.check("leader killed at process.after-execute (a step's answer not yet recorded)", ">= 1", fpExec, fpExec >= 1)
	r.note("failpoint kills: %d at process.after-execute, %d at process.before-commit, %d at projector.before-commit", fpExec, fpCommit, fpProj)
	r.note("provider phases (every %s): %s", cfg.FaultEvery, strings.Join(phaseLog, "; "))

	// The clean restart: no more failpoints, a provider that behaves, every
	// process shut down gracefully and started again.
	armed.Store(false)
	prov.sim.SetFaults(paysim.Faults{})
	for i := range specs {
		sup.Term(ctx, i)
	}
	if err := sup.WaitReady(ctx, 60*time.Second); err != nil {
		return err
	}
	restarted := time.Now()
	e.logf("PM1: clean restart done; waiting for every instance to be terminal")

	conn, err := connectAdmin(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var open, total int
	var terminalAt time.Time
	for deadline := time.Now().Add(cfg.Converge); ; {
		if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE NOT done), count(*) FROM process_instances WHERE process = 'fulfilment'`).Scan(&open, &total); err != nil {
			return err
		}
		if open == 0 && total >= len(orders) {
			terminalAt = time.Now()
			break
		}
		if time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	if terminalAt.IsZero() {
		r.note("after %s, %d of %d instances are not terminal (orders: %d)", cfg.Converge, open, total, len(orders))
	}
	r.within("every instance terminal after the clean restart (the provider healthy again)", cfg.Converge, terminalAt.Sub(restarted), !terminalAt.IsZero())

	head, err := logHead(ctx, conn)
	if err != nil {
		return err
	}
	at, ok, behind, err := waitAtHead(ctx, url, head, 60*time.Second)
	if err != nil {
		return err
	}
	if !ok {
		r.note("projections not at the head %s: %s", head, behind)
	}
	from := restarted
	if terminalAt.After(from) {
		from = terminalAt
	}
	r.within("projections at the head of the log after every instance is terminal", 30*time.Second, max(at.Sub(from), 0), ok)
	api, err := readInventoryAPI(ctx, load.client, sup.URLs()[2], tokens, cfg.SKUs)
	if err != nil {
		return err
	}
	sup.Stop(25 * time.Second)

	if err := e.checkPM1(ctx, r, pm1Run{cfg: cfg, url: url, orders: orders, prov: prov, hist: load.hist, api: api, sup: sup}); err != nil {
		return err
	}
	rv, err := e.compareWithRebuild(ctx, name)
	if err != nil {
		return fmt.Errorf("rebuild: %w", err)
	}
	r.check("read models equal a fresh rebuild (table x tenant checksums)", "all equal",
		fmt.Sprintf("%d/%d equal", rv.Compared-len(rv.Mismatches), rv.Compared), len(rv.Mismatches) == 0 && rv.Compared > 0)
	for i, m := range rv.Mismatches {
		if i == 10 {
			r.note("... and %d more read-model differences", len(rv.Mismatches)-10)
			break
		}
		r.note("%s", m)
	}
	if err := e.verifyLedgers(ctx, r, url, name); err != nil {
		return err
	}
	sup.noteUnexpectedExits(r)
	return nil
}
