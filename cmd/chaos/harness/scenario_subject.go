package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/tenancy/subjects"
)

// Subject: two customers of a tenant forgotten (`strata subjects erase`),
// each erasure SIGKILLed at random points (a failpoint inside a step's
// transaction, or after a random delay) and run again until it finishes,
// while clients keep ordering for the tenant's other customers and the
// fulfilment process manager runs (docs/personal-data.md; docs/chaos.md,
// "SUBJECT").
const Subject = "SUBJECT"

// SubjectConfig sizes SUBJECT.
type SubjectConfig struct {
	// Customers each place OrdersPerCustomer paid orders before the
	// erasures; the first Erased of them are forgotten; Clients keep
	// ordering for the others meanwhile.
	Customers, Erased, OrdersPerCustomer, Clients int
	// MinKills runs of each erasure are killed before one may run
	// unarmed; MaxAttempts bounds the runs; KillAfterMax bounds a timed
	// kill's delay.
	MinKills, MaxAttempts int
	KillAfterMax          time.Duration
	CatchUp               time.Duration
}

// DefaultSubject is SUBJECT's size in `make chaos` (well under a minute).
func DefaultSubject() SubjectConfig {
	return SubjectConfig{Customers: 5, Erased: 2, OrdersPerCustomer: 6, Clients: 3, MinKills: 3, MaxAttempts: 10,
		KillAfterMax: 300 * time.Millisecond, CatchUp: 30 * time.Second}
}

func (e *env) runSubject(ctx context.Context, r *Result) error {
	cfg := e.cfg.Subject
	if cfg.Customers == 0 {
		cfg = DefaultSubject()
	}
	r.Title = "subject erasure: two customers forgotten, each erasure SIGKILLed at random points and rerun, under load"
	url, err := e.newStrataDatabase(ctx, "chaos_subject")
	if err != nil {
		return err
	}
	const tenant = "sj-shop"
	cliEnv := e.strataEnv(url, filepath.Join(e.dir, "data", "subject-cli"), "STRATA_PROCESSES=all")
	if code, _, errOut := e.strataCLI(ctx, cliEnv, "tenants", "provision", tenant); code != 0 {
		return fmt.Errorf("provision %s: %s", tenant, errOut)
	}
	sup, err := e.startSupervised(ctx, []procSpec{{Name: "subject-serve", Roles: "command,query,projector",
		Env: e.strataEnv(url, filepath.Join(e.dir, "data", "subject-serve"), "STRATA_PROCESSES=all", "STRATA_PROCESS_POLL=100ms")}})
	if err != nil {
		return err
	}
	defer sup.Stop(5 * time.Second)
	base := sup.URLs()[0]
	tok, err := auth.Sign(e.secret, auth.Claims{Subject: "chaos-subject", Tenant: domain.TenantID(tenant)}, 2*time.Hour)
	if err != nil {
		return err
	}
	client := newHTTPClient(cfg.Clients + 4)
	call := func(ctx context.Context, method, path, body string) (int, error) {
		st, _, err := hsCall(ctx, client, base, tok, method, path, body, "")
		return st, err
	}
	// order creates, fills, places and pays one order of customer.
	order := func(ctx context.Context, customer, id string) error {
		for _, c := range []struct{ path, body string }{
			{"/v1/orders", `{"order_id":"` + id + `","customer_id":"` + customer + `","currency":"EUR"}`},
			{"/v1/orders/" + id + "/lines", `{"product_id":"p-1","quantity":1,"unit_price":{"amount":300,"currency":"EUR"}}`},
			{"/v1/orders/" + id + "/place", ""},
			{"/v1/orders/" + id + "/pay", `{"payment_reference":"pay-` + id + `"}`},
		} {
			if st, err := call(ctx, http.MethodPost, c.path, c.body); err != nil || st >= 300 {
				return fmt.Errorf("%s %s: %d %v", customer, c.path, st, err)
			}
		}
		return nil
	}
	customer := func(i int) string { return fmt.Sprintf("cust-%d-z", i) }
	if st, err := call(ctx, http.MethodPost, "/v1/inventory/p-1/receive", `{"quantity":100000}`); err != nil || st >= 300 {
		return fmt.Errorf("receive stock: %d %v", st, err)
	}
	acked := map[string]int64{}
	for i := 0; i < cfg.OrdersPerCustomer; i++ {
		for c := 0; c < cfg.Customers; c++ {
			if err := order(ctx, customer(c), fmt.Sprintf("o-%d-%d", c, i)); err != nil {
				return err
			}
			acked[customer(c)]++
		}
	}

	// During the erasures: the other customers keep ordering.
	lctx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed atomic.Int64
	for k := 0; k < cfg.Clients; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cfg.Erased + k%(cfg.Customers-cfg.Erased)
			for n := 0; lctx.Err() == nil; n++ {
				if err := order(lctx, customer(c), fmt.Sprintf("l-%d-%d", k, n)); err != nil {
					if lctx.Err() == nil {
						failed.Add(1)
						e.logf("SUBJECT: load: %v", err)
					}
					return
				}
				mu.Lock()
				acked[customer(c)]++
				mu.Unlock()
			}
		}()
	}

	admin, err := connectAdmin(ctx, url)
	if err != nil {
		return err
	}
	defer admin.Close(context.WithoutCancel(ctx))
	// reachable lists the failpoints the next run will reach: those of the
	// steps the unfinished erasure has not done.
	reachable := func() []string {
		var done []string
		_ = admin.QueryRow(ctx, `SELECT coalesce(array_agg(k), '{}') FROM strata.subject_erasures, jsonb_object_keys(steps) k
WHERE tenant_id = $1 AND finished_at IS NULL`, tenant).Scan(&done)
		var out []string
		for _, st := range subjects.Steps { // failpoints subjects.<step>
			if !slices.Contains(done, st) {
				out = append(out, "subjects."+st)
			}
		}
		return out
	}
	rng := e.rng(Subject, "kills")
	receipts := map[string]string{}
	var runs []string
	for s := 0; s < cfg.Erased; s++ {
		subject := customer(s)
		finished := false
		for a := 0; a < cfg.MaxAttempts && !finished && ctx.Err() == nil; a++ {
			env := slices.Clone(cliEnv)
			how := "unarmed"
			var killAfter time.Duration
			switch u := rng.Float64(); {
			case a == cfg.MaxAttempts-1 || a >= cfg.MinKills && u < 0.3:
			case u < 0.7:
				reach := reachable()
				p := reach[rng.IntN(len(reach))]
				env, how = append(env, failpointEnv+"="+p), p
			default:
				killAfter = time.Duration(rng.Int64N(int64(cfg.KillAfterMax)))
				how = "SIGKILL after " + killAfter.Round(time.Millisecond).String()
			}
			out, errOut, err := e.killableRun(ctx, env, killAfter, nil, "subjects", "erase", tenant, subject, "--reason", "chaos SUBJECT", "--json")
			var spawnErr *spawnError
			if errors.As(err, &spawnErr) {
				return err
			}
			outcome := "exit 0"
			if err != nil {
				outcome = err.Error()
				if !strings.Contains(outcome, "killed") {
					e.logf("SUBJECT: stderr: %s", oneLine(errOut.String(), 400))
				}
			} else {
				var receipt struct {
					ContentHash string `json:"content_hash"`
				}
				if json.Unmarshal(out.Bytes(), &receipt) == nil {
					receipts[subject] = receipt.ContentHash
				}
				finished = true
			}
			runs = append(runs, fmt.Sprintf("%s run %d (%s): %s", subject, a+1, how, outcome))
			e.logf("SUBJECT: erase %s run %d (%s): %s", subject, a+1, how, outcome)
		}
	}
	stopLoad()
	wg.Wait()
	for _, line := range runs {
		r.note("%s", line)
	}

	if err := eraseWaitAtHead(ctx, admin, cfg.CatchUp); err != nil {
		return err
	}
	r.check("erasures finished with a receipt", fmt.Sprint(cfg.Erased), len(receipts), len(receipts) == cfg.Erased)
	again, verified := 0, 0
	for s := 0; s < cfg.Erased; s++ {
		subject := customer(s)
		code, out, _ := e.strataCLI(ctx, cliEnv, "subjects", "erase", tenant, subject, "--reason", "chaos SUBJECT", "--json")
		var receipt struct {
			ContentHash string `json:"content_hash"`
		}
		if code == 0 && json.Unmarshal([]byte(out), &receipt) == nil && receipt.ContentHash == receipts[subject] && receipt.ContentHash != "" {
			again++
		}
		if code, out, _ := e.strataCLI(ctx, cliEnv, "subjects", "verify", tenant, subject); code == 0 {
			verified++
		} else {
			r.note("verify %s: %s", subject, oneLine(out, 400))
		}
	}
	r.check("erasures run again give the same receipt", fmt.Sprint(cfg.Erased), again, again == cfg.Erased)
	r.check("forgotten customers that `subjects verify` passes", fmt.Sprint(cfg.Erased), verified, verified == cfg.Erased)
	var plain int
	if err := admin.QueryRow(ctx, `SELECT
  (SELECT count(*) FROM strata.events WHERE tenant_id = $1 AND data::text ~ 'cust-|pay-')
+ (SELECT count(*) FROM strata.order_fulfilment WHERE tenant_id = $1 AND payment_reference ~ '^pay-o-[0-`+fmt.Sprint(cfg.Erased-1)+`]-')
+ (SELECT count(*) FROM strata.process_instances WHERE tenant_id = $1 AND state::text ~ 'pay-o-[0-`+fmt.Sprint(cfg.Erased-1)+`]-')`, tenant).Scan(&plain); err != nil {
		return err
	}
	r.zero("plaintext of a customer in the log, or of a forgotten customer's payments in the fulfilment read model and process state", plain)
	kept := 0
	for c := cfg.Erased; c < cfg.Customers; c++ {
		var rows, paid int64
		if err := admin.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE status = 'paid') FROM strata.order_details WHERE tenant_id = $1 AND customer_id = $2`,
			tenant, customer(c)).Scan(&rows, &paid); err != nil {
			return err
		}
		// An order flow cut by the end of the load may have left one
		// more order per client, not paid.
		if paid < acked[customer(c)] || rows > acked[customer(c)]+int64(cfg.Clients) {
			kept++
			r.note("%s: %d orders (%d paid) in order_details, %d acknowledged", customer(c), rows, paid, acked[customer(c)])
		}
	}
	r.zero("other customers whose acknowledged orders are not all in order_details, paid, under their ID", kept)
	r.zero("order flows of other customers that failed during the erasures", int(failed.Load()))
	if code, out, errOut := e.strataCLI(ctx, cliEnv, "replay", "verify", "--deep", "--tenant", tenant); code != 0 {
		r.check("replay verify --deep: a rebuild equals the live read models", "exit 0", fmt.Sprintf("exit %d", code), false)
		r.note("replay verify --deep: %s", oneLine(out+errOut, 3000))
	} else {
		r.check("replay verify --deep: a rebuild equals the live read models", "exit 0", "exit 0", true)
	}
	return nil
}
