package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/domain"
)

// Erase: `strata tenants erase` killed with SIGKILL at random points —
// armed failpoints between its steps and between its stores, or a kill
// after a random delay — and run again until it finishes, while two serve
// processes (one of them killed once during the erasure) take load on
// other tenants and the victim's requests keep coming (docs/tenants.md,
// "Erasure"; docs/chaos.md, "ERASE").
const Erase = "ERASE"

// EraseConfig sizes ERASE.
type EraseConfig struct {
	// OrdersPerTenant orders (created, a line added, placed) per tenant
	// before the erasure; Clients keep writing the busy tenant during it.
	OrdersPerTenant, Clients int
	// MinKills runs are always killed (at a failpoint or after a delay)
	// before one may run unarmed; MaxAttempts bounds the erase runs;
	// KillAfterMax bounds the random delay of a timed kill.
	MinKills     int
	MaxAttempts  int
	KillAfterMax time.Duration
	// Lease is STRATA_TENANT_DIRECTORY_LEASE of the serve processes.
	Lease time.Duration
	// CatchUp bounds the wait for the projections at the end.
	CatchUp time.Duration
}

// DefaultErase is ERASE's size in `make chaos` (well under a minute).
func DefaultErase() EraseConfig {
	return EraseConfig{OrdersPerTenant: 40, Clients: 4, MinKills: 5, MaxAttempts: 14, KillAfterMax: 400 * time.Millisecond,
		Lease: 2 * time.Second, CatchUp: 20 * time.Second}
}

// eraseRequest is one request of the victim during the run.
type eraseRequest struct {
	proc       int
	start, end time.Time
	status     int
}

// eraseStatus is the part of `strata tenants status --json` ERASE reads.
type eraseStatus struct {
	Tenant struct {
		Status string `json:"status"`
	} `json:"tenant"`
	Erasure *struct {
		Steps  map[string]time.Time `json:"steps"`
		Stores []struct {
			Name   string `json:"name"`
			State  string `json:"state"`
			Before int64  `json:"count_before"`
		} `json:"stores"`
		LastError string `json:"last_error"`
		Receipt   *struct {
			ContentHash string `json:"content_hash"`
			Stores      []struct {
				Name   string `json:"name"`
				Mode   string `json:"mode"`
				Before int64  `json:"count_before"`
				After  int64  `json:"count_after"`
			} `json:"stores"`
		} `json:"receipt"`
	} `json:"erasure"`
}

func (e *env) strataCLI(ctx context.Context, env []string, args ...string) (int, string, string) {
	cmd := exec.CommandContext(ctx, e.cfg.Strata, args...)
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
	return code, out.String(), errOut.String()
}

func (e *env) runErase(ctx context.Context, r *Result) error {
	cfg := e.cfg.Erase
	if cfg.OrdersPerTenant == 0 {
		cfg = DefaultErase()
	}
	r.Title = "tenant erasure: the erasure SIGKILLed at random points and rerun, under load"
	url, err := e.newStrataDatabase(ctx, "chaos_erase")
	if err != nil {
		return err
	}
	victim, busy, quiet := "er-victim", "er-busy", "er-quiet"
	tenants := []string{victim, busy, quiet}
	cliEnv := e.strataEnv(url, filepath.Join(e.dir, "data", "erase-cli"), "STRATA_RELAY=sql", "STRATA_TENANT_DIRECTORY_LEASE="+cfg.Lease.String())
	for _, t := range tenants {
		if code, _, errOut := e.strataCLI(ctx, cliEnv, "tenants", "provision", t); code != 0 {
			return fmt.Errorf("provision %s: %s", t, errOut)
		}
	}
	extra := []string{"STRATA_RELAY=sql", "STRATA_TENANT_DIRECTORY_LEASE=" + cfg.Lease.String()}
	var specs []procSpec
	for i := 0; i < 2; i++ {
		name := fmt.Sprintf("erase-serve%d", i)
		specs = append(specs, procSpec{Name: name, Roles: "command,query,projector", Env: e.strataEnv(url, filepath.Join(e.dir, "data", name), extra...)})
	}
	sup, err := e.startSupervised(ctx, specs)
	if err != nil {
		return err
	}
	defer sup.Stop(5 * time.Second)
	urls := sup.URLs()
	client := newHTTPClient(cfg.Clients + 8)
	tokens := map[string]string{}
	for _, t := range tenants {
		tok, err := auth.Sign(e.secret, auth.Claims{Subject: "chaos-erase", Tenant: domain.TenantID(t)}, 2*time.Hour)
		if err != nil {
			return err
		}
		tokens[t] = tok
	}
	call := func(ctx context.Context, proc int, tenant, method, path, body string) (int, error) {
		req, err := http.NewRequestWithContext(ctx, method, urls[proc]+path, strings.NewReader(body))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Authorization", "Bearer "+tokens[tenant])
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode, nil
	}
	// order creates, fills and places an order, retrying a refused
	// connection (a killed process) on the other one.
	order := func(ctx context.Context, proc int, tenant, id string) error {
		for _, c := range []struct{ path, body string }{
			{"/v1/orders", `{"order_id":"` + id + `","customer_id":"c-1","currency":"EUR"}`},
			{"/v1/orders/" + id + "/lines", `{"product_id":"p-1","quantity":1,"unit_price":{"amount":250,"currency":"EUR"}}`},
			{"/v1/orders/" + id + "/place", ""},
		} {
			deadline := time.Now().Add(30 * time.Second)
			for {
				st, err := call(ctx, proc, tenant, http.MethodPost, c.path, c.body)
				if err == nil && st < 300 || err == nil && st == http.StatusConflict && c.path == "/v1/orders" {
					break
				}
				if time.Now().After(deadline) || ctx.Err() != nil {
					return fmt.Errorf("%s %s: %d %v", tenant, c.path, st, err)
				}
				proc = 1 - proc
				time.Sleep(50 * time.Millisecond)
			}
		}
		return nil
	}
	began := time.Now()
	for i := 0; i < cfg.OrdersPerTenant; i++ {
		for _, t := range tenants {
			if err := order(ctx, i%2, t, fmt.Sprintf("o-%d", i)); err != nil {
				return err
			}
		}
	}
	e.logf("ERASE: %d orders for each of %s in %s", cfg.OrdersPerTenant, strings.Join(tenants, ", "), time.Since(began).Round(time.Millisecond))

	admin, err := connectAdmin(ctx, url)
	if err != nil {
		return err
	}
	defer admin.Close(context.WithoutCancel(ctx))
	if err := eraseWaitAtHead(ctx, admin, cfg.CatchUp); err != nil {
		return err
	}
	quietBefore, err := eraseChecksums(ctx, admin, quiet)
	if err != nil {
		return err
	}
	victimBefore, err := eraseRows(ctx, admin, victim)
	if err != nil {
		return err
	}

	// During the erasure: the busy tenant is written, the victim read.
	lctx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var wg sync.WaitGroup
	var busyOrders atomic.Int64
	var busyFailed atomic.Int64
	var mu sync.Mutex
	var victimReqs []eraseRequest
	for c := 0; c < cfg.Clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; lctx.Err() == nil; k++ {
				if err := order(lctx, c%2, busy, fmt.Sprintf("d-%d-%d", c, k)); err != nil {
					if lctx.Err() == nil {
						busyFailed.Add(1)
					}
					return
				}
				busyOrders.Add(1)
			}
		}()
	}
	for p := range urls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for lctx.Err() == nil {
				start := time.Now()
				st, err := call(lctx, p, victim, http.MethodGet, "/v1/orders/o-1", "")
				if err != nil {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				mu.Lock()
				victimReqs = append(victimReqs, eraseRequest{proc: p, start: start, end: time.Now(), status: st})
				mu.Unlock()
			}
		}()
	}

	// The erasure, killed until it finishes.
	rng := e.rng(Erase, "kills")
	// A failpoint is picked among those the next run will reach: the
	// steps not done yet, and the stores still pending.
	steps := []string{"suppress", "quiesce", "inventory", "erase", "verify", "receipt"}
	stepsDone := map[string]bool{}
	pendingStores := 20 // before the inventory: at least this many tenant tables
	var attempts []string
	var countsSeen []map[string]int64
	finished := false
	servedKilled := false
	for a := 0; a < cfg.MaxAttempts && !finished && ctx.Err() == nil; a++ {
		env := slices.Clone(cliEnv)
		how := "unarmed"
		var killAfter time.Duration
		switch u := rng.Float64(); {
		case a == cfg.MaxAttempts-1 || a >= cfg.MinKills && u < 0.3:
		case u < 0.75:
			var reach []string
			for _, s := range steps {
				if !stepsDone[s] {
					reach = append(reach, "tenancy.erase.after-"+s)
				}
			}
			if !stepsDone["erase"] && pendingStores > 0 {
				for i := 0; i < 3; i++ { // the stores are most of the workflow
					reach = append(reach, fmt.Sprintf("tenancy.erase.after-store=%d", 1+rng.IntN(pendingStores)))
				}
			}
			if len(reach) > 0 {
				p := reach[rng.IntN(len(reach))]
				env = append(env, failpointEnv+"="+p)
				how = p
			}
		default:
			killAfter = time.Duration(rng.Int64N(int64(cfg.KillAfterMax)))
			how = "SIGKILL after " + killAfter.Round(time.Millisecond).String()
		}
		_, errOut, err := e.killableRun(ctx, env, killAfter, func() {
			if a == 1 && !servedKilled {
				servedKilled = true
				pid := sup.Kill(1)
				e.logf("ERASE: SIGKILL erase-serve1 (pid %d) during erase run %d", pid, a+1)
			}
		}, "tenants", "erase", victim, "--reason", "chaos ERASE", "--barrier-timeout", "20s", "--json")
		var spawnErr *spawnError
		if errors.As(err, &spawnErr) {
			return err
		}
		outcome := "exit 0"
		if err != nil {
			outcome = err.Error()
		} else {
			finished = true
		}
		attempts = append(attempts, fmt.Sprintf("run %d (%s): %s", a+1, how, outcome))
		e.logf("ERASE: erase run %d (%s): %s", a+1, how, outcome)
		if err != nil && !strings.Contains(outcome, "killed") {
			e.logf("ERASE: stderr: %s", oneLine(errOut.String(), 400))
		}
		// What the workflow recorded so far: its counts before, once taken,
		// never change.
		if code, sout, _ := e.strataCLI(ctx, cliEnv, "tenants", "status", victim, "--json"); code == 0 {
			var st eraseStatus
			if json.Unmarshal([]byte(sout), &st) == nil && st.Erasure != nil {
				for s := range st.Erasure.Steps {
					stepsDone[s] = true
				}
				if len(st.Erasure.Stores) > 0 {
					m := map[string]int64{}
					pendingStores = 0
					for _, s := range st.Erasure.Stores {
						m[s.Name] = s.Before
						if s.State != "done" {
							pendingStores++
						}
					}
					countsSeen = append(countsSeen, m)
				}
			}
		}
	}
	stopLoad()
	wg.Wait()
	for _, a := range attempts {
		r.note("%s", a)
	}
	r.check("erasure finished within the runs", fmt.Sprintf("<= %d runs", cfg.MaxAttempts), len(attempts), finished)
	if !finished {
		return nil
	}

	code, sout, serr := e.strataCLI(ctx, cliEnv, "tenants", "status", victim, "--json")
	var st eraseStatus
	if code != 0 || json.Unmarshal([]byte(sout), &st) != nil || st.Erasure == nil || st.Erasure.Receipt == nil {
		return fmt.Errorf("status after the erasure: %d %s %s", code, sout, serr)
	}
	receiptCounts := map[string]int64{}
	for _, s := range st.Erasure.Receipt.Stores {
		receiptCounts[s.Name] = s.Before
	}
	differ := 0
	for _, m := range countsSeen {
		if !maps.Equal(m, receiptCounts) {
			differ++
		}
	}
	r.zero(fmt.Sprintf("runs whose recorded counts differ from the receipt's (of %d that recorded any)", len(countsSeen)), differ)
	mismatch := 0
	for tb, n := range victimBefore {
		if receiptCounts["table:"+tb] != n {
			mismatch++
			r.note("receipt: %s before %d, counted %d before the erasure", tb, receiptCounts["table:"+tb], n)
		}
	}
	r.zero("receipt counts differing from the rows counted before the erasure", mismatch)
	r.check("tenant status", "erased", st.Tenant.Status, st.Tenant.Status == "erased")

	if err := eraseWaitAtHead(ctx, admin, cfg.CatchUp); err != nil {
		r.check("projections at the head after the erasure", "yes", err.Error(), false)
	} else {
		r.check("projections at the head after the erasure", "yes", "yes", true)
	}
	left, err := eraseRows(ctx, admin, victim)
	if err != nil {
		return err
	}
	leftRows, leftTables := rowsLeft(left)
	r.zero(fmt.Sprintf("rows of the erased tenant in the %d tenant tables (catalog) and the relay's table", len(left)), int(leftRows))
	if len(leftTables) > 0 {
		r.note("left: %s", strings.Join(leftTables, ", "))
	}
	quietAfter, err := eraseChecksums(ctx, admin, quiet)
	if err != nil {
		return err
	}
	changed := 0
	for tb, sum := range quietBefore {
		if quietAfter[tb] != sum {
			changed++
			r.note("the quiet tenant's %s changed", tb)
		}
	}
	r.zero("tables of the quiet tenant changed (md5 of its rows)", changed)
	var busyRows int64
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM strata.order_details WHERE tenant_id = $1`, busy).Scan(&busyRows); err != nil {
		return err
	}
	want := int64(cfg.OrdersPerTenant) + busyOrders.Load()
	r.check("the busy tenant's acknowledged orders in its read model", fmt.Sprintf(">= %d", want), busyRows, busyRows >= want)
	r.zero("busy tenant order flows that failed during the erasure", int(busyFailed.Load()))
	var deadLetters int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM strata.dead_letters`).Scan(&deadLetters); err != nil {
		return err
	}
	r.zero("dead letters", deadLetters)

	// The victim's requests: no data once refused, on each process; none
	// at all once the barrier had passed.
	suppressed := st.Erasure.Steps["suppress"]
	var served, refused, afterRefusal, afterBarrier int
	firstRefusal := map[int]time.Time{}
	for _, q := range victimReqs {
		switch {
		case q.status == http.StatusForbidden:
			refused++
			if t, ok := firstRefusal[q.proc]; !ok || q.end.Before(t) {
				firstRefusal[q.proc] = q.end
			}
		case q.status < 300:
			served++
		}
	}
	for _, q := range victimReqs {
		if q.status >= 300 {
			continue
		}
		if t, ok := firstRefusal[q.proc]; ok && q.start.After(t) {
			afterRefusal++
		}
		if !suppressed.IsZero() && q.start.After(suppressed) {
			afterBarrier++
		}
	}
	r.note("victim requests: %d answered with data before its erasure, %d refused", served, refused)
	r.check("victim requests refused during the erasure", "> 0", refused, refused > 0)
	r.zero("victim requests answered with data after the same process refused one", afterRefusal)
	r.zero("victim requests answered with data after the barrier passed", afterBarrier)
	r.note("receipt %s", st.Erasure.Receipt.ContentHash)
	return nil
}

// eraseWaitAtHead waits until every running checkpoint has passed the log's
// last event.
func eraseWaitAtHead(ctx context.Context, conn *pgx.Conn, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		var ok bool
		err := conn.QueryRow(ctx, `SELECT coalesce(bool_and((c.pos_major, c.pos_minor) >= (h.tx::numeric, h.pos::numeric)), true)
			FROM strata.projection_checkpoints c,
			     (SELECT tx_id::text AS tx, position AS pos FROM strata.events ORDER BY tx_id DESC, position DESC LIMIT 1) h
			WHERE c.status = 'running'`).Scan(&ok)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("projections not at the head within %s", within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// eraseRows counts the tenant's rows in every tenant table of the catalog
// and in the relay's watermill table.
func eraseRows(ctx context.Context, conn *pgx.Conn, tenant string) (map[string]int64, error) {
	tables, err := tenantTables(ctx, conn)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, t := range tables {
		var n int64
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM strata.`+pgx.Identifier{t.Name}.Sanitize()+` WHERE tenant_id = $1`, tenant).Scan(&n); err != nil {
			return nil, err
		}
		out[t.Name] = n
	}
	var n int64
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM strata.watermill_strata_events WHERE metadata::jsonb->>'tenant' = $1`, tenant).Scan(&n); err != nil {
		return nil, err
	}
	out["watermill_strata_events"] = n
	return out, nil
}

// rowsLeft sums the counts of eraseRows and names the tables (sorted)
// that still hold rows.
func rowsLeft(counts map[string]int64) (rows int64, tables []string) {
	for tb, n := range counts {
		if n > 0 {
			rows += n
			tables = append(tables, fmt.Sprintf("%s %d", tb, n))
		}
	}
	sort.Strings(tables)
	return rows, tables
}

// eraseChecksums is md5 over each tenant table's rows of the tenant.
func eraseChecksums(ctx context.Context, conn *pgx.Conn, tenant string) (map[string]string, error) {
	tables, err := tenantTables(ctx, conn)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, t := range tables {
		var sum string
		if err := conn.QueryRow(ctx, `SELECT coalesce(md5(string_agg(x::text, '|' ORDER BY x::text)), '') FROM strata.`+
			pgx.Identifier{t.Name}.Sanitize()+` x WHERE tenant_id = $1`, tenant).Scan(&sum); err != nil {
			return nil, err
		}
		out[t.Name] = sum
	}
	return out, nil
}

// spawnError: a command could not be started.
type spawnError struct{ err error }

func (e *spawnError) Error() string { return "start: " + e.err.Error() }
func (e *spawnError) Unwrap() error { return e.err }

// killableRun runs strata with args and env, SIGKILLed after killAfter
// when it is positive; during, if set, runs once the process started. It
// returns its output and how it ended (a *spawnError when it never
// started).
func (e *env) killableRun(ctx context.Context, env []string, killAfter time.Duration, during func(), args ...string) (bytes.Buffer, bytes.Buffer, error) {
	cmd := exec.CommandContext(ctx, e.cfg.Strata, args...)
	cmd.Env = env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := spawn(cmd); err != nil {
		return out, errOut, &spawnError{err}
	}
	var timer *time.Timer
	if killAfter > 0 {
		timer = time.AfterFunc(killAfter, func() { _ = cmd.Process.Kill() })
	}
	if during != nil {
		during()
	}
	err := cmd.Wait()
	if timer != nil {
		timer.Stop()
	}
	return out, errOut, err
}
