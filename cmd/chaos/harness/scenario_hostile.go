package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/domain"
)

// Hostile: the promises of issue 29 at once, against two serve processes
// with every role, the fulfilment process manager and the NATS relay, while
// two well-behaved tenants work: an export imported under a new tenant ID,
// hostile archives imported (each must be refused with nothing written),
// poison of every kind fed to every consumer (a tenant whose events make
// every projection, the process manager and the relay panic, and raw
// history an older version might have written: undecodable,
// uncorrelatable, larger than the broker takes), and the erasure of a
// tenant whose data carries a canary, with every relay publish slowed to
// 300 ms (docs/chaos.md, "HOSTILE").
const Hostile = "HOSTILE"

// HostileConfig sizes HOSTILE.
type HostileConfig struct {
	// Others well-behaved tenants, Clients clients each, each client one
	// request every Every, for Baseline before the hostile work and at
	// least Phase during it (the phase lasts until the hostile work ends).
	Others, Clients int
	Every           time.Duration
	Baseline, Phase time.Duration
	// Stagger spaces the starts of the hostile work in the phase: the
	// poison at once, the hostile imports after Stagger, the export and
	// import after 2 Stagger, the erasure after 3 Stagger.
	Stagger time.Duration
	// Warmup leaves the baseline's first requests (connections, caches)
	// out of its p99.
	Warmup time.Duration
	// MaxP99Ratio bounds the other tenants' p99 latency during the hostile
	// phase over their baseline p99.
	MaxP99Ratio float64
	// SourceOrders orders of the tenant that is exported and imported
	// under a new ID; VictimOrders orders of the erased tenant.
	SourceOrders, VictimOrders int
	// RelayDelay is the relay.publish-delay failpoint: every publish to
	// NATS waits this long first (a slow broker).
	RelayDelay time.Duration
	// Lease is STRATA_TENANT_DIRECTORY_LEASE (the erasure's barrier).
	Lease time.Duration
	// CatchUp bounds each wait for the consumers (setup and the end).
	CatchUp time.Duration
}

// DefaultHostile is HOSTILE's size in `make chaos` (about 1.5 minutes).
func DefaultHostile() HostileConfig {
	return HostileConfig{Others: 2, Clients: 2, Every: 50 * time.Millisecond, Baseline: 20 * time.Second, Phase: 20 * time.Second,
		Stagger: 2 * time.Second, Warmup: 2 * time.Second, MaxP99Ratio: 2, SourceOrders: 6, VictimOrders: 4, RelayDelay: 300 * time.Millisecond,
		Lease: 2 * time.Second, CatchUp: 60 * time.Second}
}

// The tenants of HOSTILE.
const (
	hsSource = "hs-source" // exported, then imported under hsCopy
	hsCopy   = "hs-copy"
	hsVictim = "hs-victim" // erased; its data carries the canary
	hsPoison = "hs-poison" // every consumer panics on its events
	hsOtherP = "hs-other"  // hs-other0, hs-other1, ...: the well-behaved load
	hsHostP  = "hs-h"      // hs-h-1, ...: the hostile imports' targets
)

// hsPoisonEvent is a raw event HOSTILE writes into hsPoison's history.
type hsPoisonEvent struct {
	kind, stream, typ string
	version           int
	id                string
	data              string
}

func (e *env) runHostile(ctx context.Context, r *Result) error {
	cfg := e.cfg.Hostile
	if cfg.Others == 0 {
		cfg = DefaultHostile()
	}
	r.Title = "hostile tenants: imports (hostile archives too), poison in every consumer and an erasure with a slow relay, while other tenants work"
	url, err := e.newStrataDatabase(ctx, "chaos_hostile")
	if err != nil {
		return err
	}
	broker, err := startBroker(e.dir, e.logf)
	if err != nil {
		return err
	}
	defer broker.close()
	// The topic is the run's own: the machine's NATS server is shared.
	topic := fmt.Sprintf("chaos_hostile_%d_%d", os.Getpid(), time.Now().UnixNano()%1_000_000)
	defer broker.deleteStream(topic)
	relayName := "relay_" + topic
	rng := e.rng(Hostile, "markers")
	marker := fmt.Sprintf("cnryv%06x", rng.IntN(1<<24))  // the victim's canary
	hostile := fmt.Sprintf("cnryh%06x", rng.IntN(1<<24)) // in every hostile archive

	common := []string{"STRATA_RELAY_URL=" + broker.url, "STRATA_RELAY_TOPIC=" + topic, "STRATA_PROCESSES=all",
		"STRATA_TENANT_DIRECTORY_LEASE=" + cfg.Lease.String()}
	cliEnv := e.strataEnv(url, filepath.Join(e.dir, "data", "hostile-cli"), common...)
	failpoints := fmt.Sprintf("%s=projections.apply-panic=panic:%s,process.decide-panic=panic:%s,relay.publish-panic=panic:%s,relay.publish-delay=%s",
		failpointEnv, hsPoison, hsPoison, hsPoison, cfg.RelayDelay)
	var others []string
	for i := 0; i < cfg.Others; i++ {
		others = append(others, fmt.Sprintf("%s%d", hsOtherP, i))
	}
	for _, t := range append(slicesOf(others), hsSource, hsVictim, hsPoison) {
		if code, _, errOut := e.strataCLI(ctx, cliEnv, "tenants", "provision", t); code != 0 {
			return fmt.Errorf("provision %s: %s", t, errOut)
		}
	}
	var specs []procSpec
	for i := 0; i < 2; i++ {
		name := fmt.Sprintf("hostile-serve%d", i)
		specs = append(specs, procSpec{Name: name, Roles: "command,query,projector",
			Env: append(e.strataEnv(url, filepath.Join(e.dir, "data", name), common...), failpoints)})
	}
	sup, err := e.startSupervised(ctx, specs)
	if err != nil {
		return err
	}
	defer sup.Stop(5 * time.Second)
	urls := sup.URLs()
	tokens := map[string]string{}
	for _, t := range append(slicesOf(others), hsSource, hsVictim, hsPoison) {
		if tokens[t], err = auth.Sign(e.secret, auth.Claims{Subject: "chaos-hostile", Tenant: domain.TenantID(t)}, 2*time.Hour); err != nil {
			return err
		}
	}
	client := newHTTPClient(8)
	must := func(tenant, method, path, body, key string) error {
		st, raw, err := hsCall(ctx, client, urls[0], tokens[tenant], method, path, body, key)
		if err != nil || st/100 != 2 {
			return fmt.Errorf("%s %s %s: %d %s %v", tenant, method, path, st, oneLine(raw, 200), err)
		}
		return nil
	}
	admin, err := connectAdmin(ctx, url)
	if err != nil {
		return err
	}
	defer admin.Close(context.WithoutCancel(ctx))
	e.logf("HOSTILE: topic %s on %s, failpoints %s; canary %s, hostile archives' marker %s", topic, broker.url,
		strings.TrimPrefix(failpoints, failpointEnv+"="), marker, hostile)

	// Setup: stock, the source's orders (paid, cancelled and placed, so
	// that its history has process steps), the victim's (the canary in
	// its customer, product, idempotency keys, payment reference and
	// cancellation reason).
	const otherSKU = "sku-1"
	for _, t := range others {
		if err := must(t, http.MethodPost, "/v1/inventory/"+otherSKU+"/receive", `{"quantity":1000000}`, "stock"); err != nil {
			return err
		}
	}
	flow := func(tenant, id, customer, product, key string, end int, ref, reason string) error {
		steps := []struct{ path, body, key string }{
			{"/v1/orders", fmt.Sprintf(`{"order_id":%q,"customer_id":%q,"currency":"EUR"}`, id, customer), key + "-create"},
			{"/v1/orders/" + id + "/lines", fmt.Sprintf(`{"product_id":%q,"quantity":1,"unit_price":{"amount":990,"currency":"EUR"}}`, product), key + "-line"},
			{"/v1/orders/" + id + "/place", "", key + "-place"},
		}
		switch end {
		case 1:
			steps = append(steps, struct{ path, body, key string }{"/v1/orders/" + id + "/pay", fmt.Sprintf(`{"payment_reference":%q}`, ref), key + "-pay"})
		case 2:
			steps = append(steps, struct{ path, body, key string }{"/v1/orders/" + id + "/cancel", fmt.Sprintf(`{"reason":%q}`, reason), key + "-cancel"})
		}
		for _, s := range steps {
			if err := must(tenant, http.MethodPost, s.path, s.body, s.key); err != nil {
				return err
			}
		}
		return nil
	}
	if err := must(hsSource, http.MethodPost, "/v1/inventory/sku-src/receive", `{"quantity":1000}`, "stock"); err != nil {
		return err
	}
	for i := 1; i <= cfg.SourceOrders; i++ {
		end := 1 // paid, but the last two: cancelled, and placed only
		switch {
		case i == cfg.SourceOrders:
			end = 0
		case i == cfg.SourceOrders-1:
			end = 2
		}
		if err := flow(hsSource, fmt.Sprintf("s-%d", i), "c-src", "sku-src", fmt.Sprintf("s-%d", i), end, fmt.Sprintf("ref-s-%d", i), "changed my mind"); err != nil {
			return err
		}
	}
	if err := must(hsVictim, http.MethodPost, "/v1/inventory/"+marker+"-p1/receive", `{"quantity":1000}`, marker+"-stock"); err != nil {
		return err
	}
	for i := 1; i <= cfg.VictimOrders; i++ {
		end := []int{1, 1, 2, 0}[(i-1)%4]
		if err := flow(hsVictim, fmt.Sprintf("v-%d", i), marker+"-c1", marker+"-p1", fmt.Sprintf("%s-k%d", marker, i), end,
			fmt.Sprintf("%s-ref-%d", marker, i), marker+" reason of the victim"); err != nil {
			return err
		}
	}
	// Every consumer has the setup, the relay has published the victim's
	// events, and the source's process instances have settled.
	if err := hsWaitConsumers(ctx, admin, cfg.CatchUp); err != nil {
		return fmt.Errorf("after the setup: %w", err)
	}
	victimEvents, err := hsCount(ctx, admin, `SELECT count(*) FROM strata.events WHERE tenant_id = $1`, hsVictim)
	if err != nil {
		return err
	}
	if err := hsWaitSourceSettled(ctx, admin, cfg.SourceOrders, cfg.CatchUp); err != nil {
		return err
	}
	// The canary is where it should be before the erasure: the proof that
	// the scans after it can find it.
	before, err := hsScanTables(ctx, admin, marker)
	if err != nil {
		return err
	}
	msgs, err := broker.messages(ctx, topic)
	if err != nil {
		return err
	}
	vb := hsBrokerFindings(msgs, topic, hsVictim, marker)
	r.note("before the erasure: the canary in %d columns (%s); %d messages of %s in JetStream (%d with the canary) of its %d events",
		len(before), hsFindsString(before, 8), vb.tenant, hsVictim, vb.marker, victimEvents)
	r.check("canary found before the erasure (tables; JetStream messages of the victim)", "> 0; all its events",
		fmt.Sprintf("%d columns; %d of %d", len(before), vb.tenant, victimEvents), len(before) > 0 && int64(vb.tenant) == victimEvents && vb.marker > 0)

	// The hostile archives are built now: the bomb's 64 MiB of zeros take
	// the harness a second of CPU, which must not land in either phase.
	attacks := hostileArchives(hsHostP, hostile)

	// Baseline, then the hostile phase under the same load.
	load := newHSLoad(urls, tokens, otherSKU, cfg.Every, cfg.Others*cfg.Clients)
	loadFrom := time.Now()
	load.start(ctx, others, cfg.Clients)
	// What holds the log's horizon, in both phases alike: every
	// transaction with an xid open longer than 100 ms, sampled.
	horizon := startHorizonWatch(ctx, url, 100*time.Millisecond)
	defer load.halt()
	e.logf("HOSTILE: baseline: %d tenants x %d clients, one request every %s each", cfg.Others, cfg.Clients, cfg.Every)
	if sleepCtx(ctx, cfg.Baseline); ctx.Err() != nil {
		return ctx.Err()
	}
	hostileFrom := time.Now()
	e.logf("HOSTILE: hostile phase")
	var wg sync.WaitGroup
	var mu sync.Mutex
	took := map[string]time.Duration{}
	cpu := &cliCPU{e: e}
	// Each task starts at its offset into the phase, so that the phase
	// holds them all, overlapping, rather than four processes starting in
	// the same millisecond on a small machine.
	task := func(name string, at time.Duration, fn func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if sleepCtx(ctx, time.Until(hostileFrom.Add(at))); ctx.Err() != nil {
				return
			}
			began := time.Now()
			fn()
			mu.Lock()
			took[name] = time.Since(began)
			mu.Unlock()
			e.logf("HOSTILE: %s (from %s into the phase) done after %s", name, at, time.Since(began).Round(time.Millisecond))
		}()
	}
	// The copy: export, then import under a new tenant ID.
	archive := filepath.Join(e.dir, "hostile-source.strata.tar.gz")
	var exportCode, importCode int
	var exportErr, importOut, importErr string
	task("export and import of "+hsSource, 2*cfg.Stagger, func() {
		exportCode, _, exportErr = cpu.run(ctx, cliEnv, "tenants", "export", hsSource, "--out", archive)
		if exportCode == 0 {
			importCode, importOut, importErr = cpu.run(ctx, cliEnv, "tenants", "import", archive, "--tenant", hsCopy, "--wait", cfg.CatchUp.String(), "--json")
		}
	})
	// The hostile archives (built before the baseline), one after the other.
	type refusal struct {
		code     int
		out, err string
	}
	refusals := make([]refusal, len(attacks))
	task("hostile imports", cfg.Stagger, func() {
		for i, a := range attacks {
			f := filepath.Join(e.dir, fmt.Sprintf("hostile-%d.strata.tar.gz", i+1))
			if err := os.WriteFile(f, a.raw, 0o644); err != nil {
				refusals[i] = refusal{code: -1, err: err.Error()}
				continue
			}
			code, out, errOut := cpu.run(ctx, cliEnv, "tenants", "import", f, "--tenant", a.tenant, "--wait", "0")
			refusals[i] = refusal{code, out, errOut}
		}
	})
	// Poison: hsPoison's own commands (every consumer panics on its
	// events), then raw history.
	poison := []hsPoisonEvent{
		{kind: "valid", stream: "order-hsraw-1", typ: "order.created", version: 1,
			data: `{"order_id":"hsraw-1","customer_id":"c-raw","currency":"EUR","at":"2026-01-01T00:00:00Z"}`},
		{kind: "undecodable", stream: "order-hsraw-1", typ: "order.placed", version: 2,
			data: `{"order_id":"hsraw-1","total":{"amount":"lots","currency":"EUR"},"at":"2026-01-01T00:01:00Z"}`},
		{kind: "uncorrelatable", stream: "order-<b>x</b>", typ: "order.created", version: 1,
			data: `{"order_id":"<b>x</b>","customer_id":"c-raw","currency":"EUR","at":"2026-01-01T00:00:00Z"}`},
		{kind: "oversized", stream: "order-hsbig-1", typ: "order.created", version: 1,
			data: `{"order_id":"hsbig-1","customer_id":"` + strings.Repeat("z", 2<<20) + `","currency":"EUR","at":"2026-01-01T00:00:00Z"}`},
	}
	for i := range poison {
		poison[i].id = uuid.NewString()
	}
	var poisonErrs []string
	task("poison", 0, func() {
		if err := must(hsPoison, http.MethodPost, "/v1/inventory/sku-p/receive", `{"quantity":10}`, "stock"); err != nil {
			poisonErrs = append(poisonErrs, err.Error())
		}
		if err := flow(hsPoison, "p-1", "c-p", "sku-p", "p-1", 1, "ref-p-1", ""); err != nil {
			poisonErrs = append(poisonErrs, err.Error())
		}
		if err := hsInsertRaw(ctx, url, hsPoison, poison); err != nil {
			poisonErrs = append(poisonErrs, err.Error())
		}
	})
	// The erasure, with the slowed relay.
	var eraseCode int
	var eraseOut, eraseErr string
	task("erasure of "+hsVictim, 3*cfg.Stagger, func() {
		eraseCode, eraseOut, eraseErr = cpu.run(ctx, cliEnv, "tenants", "erase", hsVictim, "--reason", "chaos HOSTILE", "--barrier-timeout", "30s", "--json")
	})
	wg.Wait()
	if rest := time.Until(hostileFrom.Add(cfg.Phase)); rest > 0 {
		sleepCtx(ctx, rest)
	}
	hostileTo := time.Now()
	var baseHold time.Duration
	shown := 0
	for _, h := range horizon.stop() {
		switch {
		case h.seen.Before(hostileFrom):
			baseHold = max(baseHold, h.held)
		case shown < 8:
			shown++
			r.note("hostile phase: a transaction held an xid (the log's horizon) for %s at %s: %s", h.held.Round(time.Millisecond),
				h.seen.Sub(hostileFrom).Round(100*time.Millisecond), h.what)
		}
	}
	r.note("baseline: the longest transaction holding an xid (the log's horizon), sampled every 20 ms: %s", baseHold.Round(time.Millisecond))
	load.halt()
	reqs := load.requests()
	if err := writeHSRequests(filepath.Join(e.dir, "hostile-requests.jsonl"), reqs, hostileFrom); err != nil {
		return err
	}
	names := make([]string, 0, len(took))
	for n := range took {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		r.note("hostile phase: %s took %s", n, took[n].Round(time.Millisecond))
	}
	r.note("hostile phase: %s (at least %s: until the hostile work ended); its %d strata CLI processes used %s of CPU (user and system) of the machine's %d cores",
		hostileTo.Sub(hostileFrom).Round(time.Millisecond), cfg.Phase, cpu.runs, cpu.used.Round(time.Millisecond), runtime.NumCPU())

	// The consumers catch up with everything.
	cpOK := true
	if err := hsWaitConsumers(ctx, admin, cfg.CatchUp); err != nil {
		cpOK = false
		r.note("consumers: %v", err)
	}
	cps, head, err := hsCheckpoints(ctx, admin)
	if err != nil {
		return err
	}
	var behind, inError []string
	for _, c := range cps {
		if !c.atHead(head) {
			behind = append(behind, fmt.Sprintf("%s at %s/%s (head %s)", c.name, c.major, c.minor, head))
		}
		if c.status == "error" {
			inError = append(inError, fmt.Sprintf("%s: %s", c.name, oneLine(c.lastError, 120)))
		}
	}
	r.check(fmt.Sprintf("checkpoints of every projection, process manager and relay (%d) at the log's head", len(cps)), "all",
		fmt.Sprintf("%d/%d", len(cps)-len(behind), len(cps)), cpOK && len(behind) == 0 && len(cps) > 0)
	for _, b := range behind {
		r.note("behind: %s", b)
	}
	r.zero("checkpoints in error", len(inError))
	for _, x := range inError {
		r.note("in error: %s", x)
	}
	var cpNames []string
	for _, c := range cps {
		cpNames = append(cpNames, c.name)
	}
	r.note("checkpoints: %s", strings.Join(cpNames, ", "))

	// Everything the broker holds now, on every subject of the topic.
	msgs, err = broker.messages(ctx, topic)
	if err != nil {
		return err
	}

	// 1. The other tenants.
	if err := e.hostileOthers(ctx, r, cfg, admin, load, reqs, others, loadFrom.Add(cfg.Warmup), hostileFrom, hostileTo); err != nil {
		return err
	}

	// 2. Poison: parked for hsPoison, by every consumer.
	for _, p := range poisonErrs {
		r.note("poison: %s", p)
	}
	r.zero("poison tenant's commands and raw inserts that failed to go in", len(poisonErrs))
	letters, err := e.hsDeadLetters(ctx, cliEnv)
	if err != nil {
		return err
	}
	consumers := hsConsumerNames(cps)
	parkedBy := map[string]int{}
	byEvent := map[string]map[string]bool{} // event ID -> consumers
	othersParked := 0
	for _, l := range letters {
		if l.Tenant != hsPoison {
			othersParked++
			if othersParked <= 5 {
				r.note("dead letter of %s: %s %s v%d: %s", l.Tenant, l.Projection, l.Stream, l.Version, oneLine(l.Error, 120))
			}
			continue
		}
		parkedBy[l.Projection]++
		if byEvent[l.EventID] == nil {
			byEvent[l.EventID] = map[string]bool{}
		}
		byEvent[l.EventID][l.Projection] = true
	}
	var notParked []string
	for _, c := range consumers {
		if parkedBy[c] == 0 {
			notParked = append(notParked, c)
		}
	}
	r.check(fmt.Sprintf("consumers with %s's streams parked in `dlq list` (%d projections, fulfilment, %s)", hsPoison, len(consumers)-2, relayName),
		"all", fmt.Sprintf("%d/%d%s", len(consumers)-len(notParked), len(consumers), hsMissing(notParked)), len(notParked) == 0 && len(consumers) > 2)
	var letterCounts []string
	for _, c := range consumers {
		letterCounts = append(letterCounts, fmt.Sprintf("%s %d", c, parkedBy[c]))
	}
	r.note("%s's parked letters by consumer: %s", hsPoison, strings.Join(letterCounts, ", "))
	raw := func(kind, consumer string) (int, int) {
		n, got := 0, 0
		for _, p := range poison {
			if p.kind == kind {
				n++
				if byEvent[p.id][consumer] {
					got++
				}
			}
		}
		return got, n
	}
	for _, c := range []struct{ kind, consumer string }{{"undecodable", "fulfilment"}, {"uncorrelatable", "fulfilment"}, {"oversized", relayName}} {
		got, n := raw(c.kind, c.consumer)
		r.check(fmt.Sprintf("raw %s event parked by %s", c.kind, c.consumer), fmt.Sprintf("%d/%d", n, n), fmt.Sprintf("%d/%d", got, n), got == n && n > 0)
	}
	r.zero("dead letters of any other tenant", othersParked)
	var parkedInstances int64
	if parkedInstances, err = hsCount(ctx, admin, `SELECT count(*) FROM strata.process_instances WHERE tenant_id = $1 AND parked`, hsPoison); err != nil {
		return err
	}
	r.check(hsPoison+"'s process instances parked", "> 0", parkedInstances, parkedInstances > 0)

	// 3. The copy and the hostile imports.
	if err := e.hostileImports(ctx, r, admin, msgs, topic, exportCode, exportErr, importCode, importOut, importErr, attacks, hostile,
		func(i int) (int, string, string) { return refusals[i].code, refusals[i].out, refusals[i].err }); err != nil {
		return err
	}

	// 4. The erasure.
	code, sout, serr := e.strataCLI(ctx, cliEnv, "tenants", "status", hsVictim, "--json")
	var st eraseStatus
	receipt := ""
	if code == 0 && json.Unmarshal([]byte(sout), &st) == nil && st.Erasure != nil && st.Erasure.Receipt != nil {
		receipt = st.Erasure.Receipt.ContentHash
	}
	if eraseCode != 0 {
		r.note("erase: exit %d: %s", eraseCode, oneLine(eraseErr, 300))
	} else if code != 0 {
		r.note("status after the erasure: exit %d: %s", code, oneLine(serr, 300))
	}
	r.check("erasure of "+hsVictim+" finished with a receipt (one run, relay slowed to "+cfg.RelayDelay.String()+")", "exit 0, receipt, erased",
		fmt.Sprintf("exit %d, receipt %s, %s", eraseCode, orNone(receipt), orNone(st.Tenant.Status)), eraseCode == 0 && receipt != "" && st.Tenant.Status == "erased")
	_ = eraseOut
	after, err := hsScanTables(ctx, admin, marker)
	if err != nil {
		return err
	}
	r.check("canary of the erased tenant in any table after the erasure (every column of every table, gzip'd bytes inflated)", "none",
		fmt.Sprintf("%d columns%s", len(after), hsMissing(hsFindsStrings(after))), len(after) == 0)
	va := hsBrokerFindings(msgs, topic, hsVictim, marker)
	r.check(fmt.Sprintf("JetStream messages (every subject of %s, %d in all) of the erased tenant or holding its canary", topic, len(msgs)), "0",
		fmt.Sprintf("%d of the tenant, %d with the canary", va.tenant, va.marker), va.tenant == 0 && va.marker == 0)
	if err := e.hostileBroker(ctx, r, admin, msgs, topic, others); err != nil {
		return err
	}
	sup.noteUnexpectedExits(r)
	return nil
}

// cliCPU runs strata CLI processes as strataCLI does and adds up the CPU
// they used: the hostile work's own cost to the machine the other tenants
// share.
type cliCPU struct {
	e    *env
	mu   sync.Mutex
	runs int
	used time.Duration
}

func (c *cliCPU) run(ctx context.Context, env []string, args ...string) (int, string, string) {
	cmd := exec.CommandContext(ctx, c.e.cfg.Strata, args...)
	cmd.Env = env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		code = -1
	}
	if cmd.ProcessState != nil {
		c.mu.Lock()
		c.runs++
		c.used += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		c.mu.Unlock()
	}
	return code, out.String(), errOut.String()
}

// slicesOf copies s (so that appending to it leaves s alone).
func slicesOf(s []string) []string { return append([]string(nil), s...) }

// hsCall sends one request and returns its status and body.
func hsCall(ctx context.Context, client *http.Client, base, token, method, path, body, key string) (int, string, error) {
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(rctx, method, base+path, rd)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	return res.StatusCode, string(raw), err
}

func hsMissing(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return " (" + oneLine(strings.Join(names, ", "), 200) + ")"
}
