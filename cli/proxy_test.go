package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/internal/pgbouncer"
	"github.com/strata-es/strata/internal/pgtest"
)

// The command and query roles behind PgBouncer in transaction mode
// (docs/pgbouncer.md, proxy.go).

// bouncerFor starts a PgBouncer in front of dbURL's server for users and
// returns it and the database's name. No PgBouncer installed fails the
// test with what to run (make deps).
func bouncerFor(t *testing.T, dbURL, mode string, poolSize int, users ...string) (*pgbouncer.Server, string) {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(u.Port())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := pgbouncer.Start(ctx, pgbouncer.Config{Port: port, PoolMode: mode, PoolSize: poolSize, Users: append([]string{"t_pgb_console"}, users...)})
	if err != nil {
		t.Fatalf("start PgBouncer: %v", err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	return srv, strings.TrimPrefix(u.Path, "/")
}

// pooledLogin names an app login of this test only (roles are
// cluster-wide: the role defaults a pooled login gets must not reach
// other tests' logins) and drops it when the test ends.
func pooledLogin(t *testing.T, dbURL, prefix string) string {
	t.Helper()
	login := fmt.Sprintf("%s_%d", prefix, time.Now().UnixNano()%1_000_000_000)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, pgtest.AdminURL(t)); err == nil {
			_, _ = c.Exec(ctx, "DROP ROLE IF EXISTS "+login)
			c.Close(ctx)
		}
	})
	return login
}

// serverConns counts the PostgreSQL sessions of login.
func serverConns(t *testing.T, dbURL, login string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var n int
	if err := c.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE usename = $1`, login).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

type cmdReply struct {
	Position string `json:"position"`
	Version  int64  `json:"version"`
}

// TestServeThroughPgBouncerTransactionMode: a serve whose app login goes
// through PgBouncer in transaction mode with two server connections, and
// 48 concurrent clients (a client pool of 16): every command acknowledged
// is in the log exactly once, a retry with the same Idempotency-Key gets
// the stored answer, a query with the command's consistency token reads
// its write, and PostgreSQL never sees more than PgBouncer's two sessions
// of the app login. The projector stays on a direct connection.
func TestServeThroughPgBouncerTransactionMode(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	login := pooledLogin(t, dbURL, "t_pgb_app")
	bouncer, dbName := bouncerFor(t, dbURL, "transaction", 2, login)
	vars := map[string]string{"DATABASE_URL": dbURL, "STRATA_APP_DATABASE_URL": bouncer.URL(login, dbName),
		"STRATA_APP_DATABASE_POOLER": "transaction", "STRATA_DB_MAX_CONNS": "16",
		"STRATA_RATE_COMMANDS": "unlimited", "STRATA_RATE_QUERIES": "unlimited",
		"STRATA_TENANT_IN_FLIGHT_COMMANDS": "unlimited", "STRATA_TENANT_IN_FLIGHT_QUERIES": "unlimited", "STRATA_TENANT_IN_FLIGHT_WAITS": "unlimited",
		"STRATA_DATA_DIR": t.TempDir(), "STRATA_JWT_SECRET": loginsSecret, "STRATA_LOG_LEVEL": "warn"}
	base, _, stop := startServe(t, vars)
	defer func() {
		if code := stop(); code != exitOK {
			t.Errorf("serve exited %d", code)
		}
	}()
	waitReady(t, base)

	const clients, orders = 48, 4
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}, Timeout: 30 * time.Second}
	do := func(tenant, method, path, body string, hdr ...string) (int, []byte, http.Header, error) {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tokenFor(t, tenant))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		res, err := hc.Do(req)
		if err != nil {
			return 0, nil, nil, err
		}
		defer res.Body.Close()
		var buf bytes.Buffer
		_, err = buf.ReadFrom(res.Body)
		return res.StatusCode, buf.Bytes(), res.Header, err
	}
	var mu sync.Mutex
	acked := map[string]string{} // order id -> tenant
	maxServers := 0
	sampling := make(chan struct{})
	go func() {
		defer close(sampling)
		for {
			n := serverConns(t, dbURL, login)
			mu.Lock()
			maxServers = max(maxServers, n)
			done := len(acked) == clients*orders
			mu.Unlock()
			if done {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tenant := fmt.Sprintf("pgb-%d", c%3)
			for o := range orders {
				id := fmt.Sprintf("o-%d-%d", c, o)
				key := "k-" + id
				body := `{"order_id":"` + id + `","customer_id":"c-1","currency":"EUR"}`
				status, raw, _, err := do(tenant, "POST", "/v1/orders", body, "Idempotency-Key", key)
				if err != nil || status != http.StatusCreated {
					errs <- fmt.Errorf("create %s: %d %s %v", id, status, raw, err)
					return
				}
				var first cmdReply
				_ = json.Unmarshal(raw, &first)
				// The retry gets the stored answer, not a second order.
				status, raw2, hdr, err := do(tenant, "POST", "/v1/orders", body, "Idempotency-Key", key)
				if err != nil || status != http.StatusCreated || hdr.Get("Idempotent-Replayed") != "true" || !bytes.Equal(raw, raw2) {
					errs <- fmt.Errorf("retry of %s: %d %s (replayed %q) %v, want %s", id, status, raw2, hdr.Get("Idempotent-Replayed"), err, raw)
					return
				}
				status, raw, _, err = do(tenant, "POST", "/v1/orders/"+id+"/lines", `{"product_id":"p-1","quantity":2,"unit_price":{"amount":150,"currency":"EUR"}}`, "Idempotency-Key", key+"-l")
				if err != nil || status != http.StatusOK {
					errs <- fmt.Errorf("add line to %s: %d %s %v", id, status, raw, err)
					return
				}
				var line cmdReply
				_ = json.Unmarshal(raw, &line)
				mu.Lock()
				acked[id] = tenant
				mu.Unlock()
				// Read your write: the line is there.
				status, raw, _, err = do(tenant, "GET", "/v1/orders/"+id+"?wait=10s", "", "X-Consistency-Token", line.Position)
				var got struct {
					Version int64             `json:"version"`
					Lines   []json.RawMessage `json:"lines"`
				}
				_ = json.Unmarshal(raw, &got)
				if err != nil || status != http.StatusOK || got.Version != line.Version || len(got.Lines) != 1 {
					errs <- fmt.Errorf("read %s with its token: %d %s %v, want version %d with 1 line", id, status, raw, err, line.Version)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	<-sampling
	if maxServers > 2 || maxServers == 0 {
		t.Errorf("PostgreSQL saw up to %d sessions of the app login, want PgBouncer's 1-2", maxServers)
	}

	// Every acknowledged command is in the log, once.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	rows, err := admin.Query(ctx, `SELECT tenant_id, stream_id, count(*) FROM strata.events GROUP BY 1, 2`)
	if err != nil {
		t.Fatal(err)
	}
	inLog := map[string]int{}
	for rows.Next() {
		var tenant, stream string
		var n int
		if err := rows.Scan(&tenant, &stream, &n); err != nil {
			t.Fatal(err)
		}
		inLog[tenant+"/"+stream] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(acked) != clients*orders {
		t.Fatalf("%d orders acknowledged, want %d", len(acked), clients*orders)
	}
	for id, tenant := range acked {
		if n := inLog[tenant+"/"+order.StreamID(id)]; n != 2 {
			t.Errorf("acknowledged order %s of %s has %d events in the log, want 2 (created, line added)", id, tenant, n)
		}
	}
	if len(inLog) != len(acked) {
		t.Errorf("%d streams in the log, want the %d acknowledged orders", len(inLog), len(acked))
	}
	var keys int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM strata.idempotency_keys`).Scan(&keys); err != nil {
		t.Fatal(err)
	}
	if keys != 2*clients*orders {
		t.Errorf("%d idempotency records, want %d", keys, 2*clients*orders)
	}
}

// TestPgBouncerKeepsTenantsApart: with one server connection behind
// PgBouncer, every transaction of two tenants runs on the same PostgreSQL
// session, interleaved; neither ever sees the other's orders, in the list
// or by id (404), and writes keep their own tenant.
func TestPgBouncerKeepsTenantsApart(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	login := pooledLogin(t, dbURL, "t_pgb_rls")
	bouncer, dbName := bouncerFor(t, dbURL, "transaction", 1, login)
	vars := map[string]string{"DATABASE_URL": dbURL, "STRATA_APP_DATABASE_URL": bouncer.URL(login, dbName),
		"STRATA_APP_DATABASE_POOLER": "transaction", "STRATA_RATE_COMMANDS": "unlimited", "STRATA_RATE_QUERIES": "unlimited",
		"STRATA_DATA_DIR": t.TempDir(), "STRATA_JWT_SECRET": loginsSecret, "STRATA_LOG_LEVEL": "warn"}
	base, _, stop := startServe(t, vars)
	defer stop()
	waitReady(t, base)

	tenants := []string{"acme", "globex"}
	const rounds = 30
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(tenants))
	for i, tenant := range tenants {
		other := tenants[1-i]
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range rounds {
					id := fmt.Sprintf("%s-%d-%d", tenant, w, r)
					status, body := callAs(t, base, tenant, "POST", "/v1/orders", `{"order_id":"`+id+`","customer_id":"c-1","currency":"EUR"}`)
					if status != http.StatusCreated {
						errs <- fmt.Errorf("%s creates %s: %d %s", tenant, id, status, body)
						return
					}
					// The other tenant's orders of the same round, by id.
					if status, body := callAs(t, base, tenant, "GET", fmt.Sprintf("/v1/orders/%s-%d-%d", other, w, r), ""); status != http.StatusNotFound {
						errs <- fmt.Errorf("%s reads %s's order: %d %s", tenant, other, status, body)
						return
					}
					status, body = callAs(t, base, tenant, "GET", "/v1/orders?limit=200", "")
					if status != http.StatusOK {
						errs <- fmt.Errorf("%s lists: %d %s", tenant, status, body)
						return
					}
					if strings.Contains(string(body), `"`+other+`-`) {
						errs <- fmt.Errorf("%s's list shows %s's orders: %s", tenant, other, body)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := serverConns(t, dbURL, login); n > 1 {
		t.Errorf("%d PostgreSQL sessions of the app login, want PgBouncer's one", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	var wrong int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM strata.events WHERE stream_id NOT LIKE '%' || tenant_id || '-%'`).Scan(&wrong); err != nil {
		t.Fatal(err)
	}
	if wrong != 0 {
		t.Errorf("%d events stored under a tenant other than their order's", wrong)
	}
}

// TestServeRefusesWrongPooler: the projector URL through PgBouncer in
// transaction mode is refused at start, naming the variable to change;
// so is an app URL through it without STRATA_APP_DATABASE_POOLER.
func TestServeRefusesWrongPooler(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	app, proj := pooledLogin(t, dbURL, "t_pgb_a"), pooledLogin(t, dbURL, "t_pgb_p")
	bouncer, dbName := bouncerFor(t, dbURL, "transaction", 2, app, proj)
	base := map[string]string{"DATABASE_URL": dbURL, "STRATA_DATA_DIR": t.TempDir(), "STRATA_JWT_SECRET": loginsSecret, "STRATA_LOG_LEVEL": "error"}
	for _, c := range []struct {
		name string
		vars map[string]string
		want []string
	}{
		{"projector through the pooler", map[string]string{
			"STRATA_APP_DATABASE_URL": bouncer.URL(app, dbName), "STRATA_APP_DATABASE_POOLER": "transaction",
			"STRATA_PROJECTOR_DATABASE_URL": bouncer.URL(proj, dbName),
		}, []string{"refusing to serve", "projector login", "transaction-mode connection pooler", "STRATA_PROJECTOR_DATABASE_URL", "session-mode pool", "advisory locks"}},
		{"app through the pooler, unannounced", map[string]string{
			"STRATA_APP_DATABASE_URL": bouncer.URL(app, dbName),
		}, []string{"refusing to serve", "app login", "transaction-mode connection pooler", "STRATA_APP_DATABASE_POOLER=transaction"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			vars := map[string]string{}
			for k, v := range base {
				vars[k] = v
			}
			for k, v := range c.vars {
				vars[k] = v
			}
			var stdout, stderr bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if code := run(ctx, []string{"serve", "--addr", "127.0.0.1:0"}, testEnv(vars), &stdout, &stderr); code != exitFailure {
				t.Fatalf("serve exited %d, want %d: %s", code, exitFailure, stderr.String())
			}
			for _, want := range c.want {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("the refusal does not say %q:\n%s", want, stderr.String())
				}
			}
		})
	}
	// The same URLs as a session-mode pool: served.
	session, _ := bouncerFor(t, dbURL, "session", 20, app, proj) // session mode: a server connection per client connection
	vars := map[string]string{}
	for k, v := range base {
		vars[k] = v
	}
	vars["STRATA_APP_DATABASE_URL"], vars["STRATA_APP_DATABASE_POOLER"] = session.URL(app, dbName), "session"
	vars["STRATA_PROJECTOR_DATABASE_URL"] = session.URL(proj, dbName)
	url, _, stop := startServe(t, vars)
	defer stop()
	waitReady(t, url)
	if status, body := callAs(t, url, "acme", "POST", "/v1/orders", `{"order_id":"s-1","customer_id":"c-1","currency":"EUR"}`); status != http.StatusCreated {
		t.Errorf("through a session-mode pool: %d %s", status, body)
	}
}

// tokenFor signs a token of tenant (no admin scope) with loginsSecret.
func tokenFor(t *testing.T, tenant string) string {
	t.Helper()
	tok, err := auth.Sign([]byte(loginsSecret), auth.Claims{Subject: "pgb", Tenant: domain.TenantID(tenant)}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
