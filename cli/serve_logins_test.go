package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/internal/pgtest"
)

// The serving logins (ARCHITECTURE decision 11, db roles.go).

const loginsSecret = "serve-logins-test-secret-0123456789abcdef"

// callAs sends one request with a token of tenant, with admin scope.
func callAs(t *testing.T, base, tenant, method, path, body string, claims ...func(*auth.Claims)) (int, []byte) {
	t.Helper()
	c := auth.Claims{Subject: "ops", Tenant: domain.TenantID(tenant), Scopes: []string{auth.ScopeAdmin}}
	for _, f := range claims {
		f(&c)
	}
	tok, err := auth.Sign([]byte(loginsSecret), c, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return res.StatusCode, raw
}

// seedTwoTenants creates an order for acme and one for globex through the
// API and waits until the projections have both.
func seedTwoTenants(t *testing.T, base string) {
	t.Helper()
	for _, tenant := range []string{"acme", "globex"} {
		status, body := callAs(t, base, tenant, http.MethodPost, "/v1/orders", `{"order_id":"o-`+tenant+`","customer_id":"c-1","currency":"EUR"}`)
		if status != http.StatusCreated {
			t.Fatalf("create %s's order: %d %s", tenant, status, body)
		}
		var res struct{ Position string }
		_ = json.Unmarshal(body, &res)
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/orders/o-"+tenant+"?wait=10s", nil)
		tok, _ := auth.Sign([]byte(loginsSecret), auth.Claims{Subject: "ops", Tenant: domain.TenantID(tenant)}, time.Hour)
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("X-Consistency-Token", res.Position)
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != http.StatusOK {
			t.Fatalf("read %s's order: %d", tenant, r.StatusCode)
		}
	}
}

// TestServingLoginsCannotEscalate connects as the serving logins exactly
// as `strata serve` does (given a superuser DATABASE_URL, as make run and
// the tests have) and tries every way out of the serving role it knows:
// RESET ROLE, SET ROLE to every other role of the cluster, SET SESSION
// AUTHORIZATION, granting itself a role, altering its attributes or the
// tables' row-level security, row_security = off, a session-wide or
// role-default tenant. After each, the session must still be its serving
// role or the bare login, neither superuser, BYPASSRLS nor a member of
// strata_owner, and must see no row of a tenant other than the one named
// by app.tenant_id (none at all with no tenant set). That the app role
// can name another tenant in app.tenant_id is by design (roles.go): the
// tenant boundary of the API is the verified token -> WithTenantTx code
// path; what this proves is that a session running arbitrary SQL stays
// under row-level security.
//
// Before serving logins, serve's pools logged in as DATABASE_URL's
// superuser and only SET ROLE strata_app: the first attempt, RESET ROLE,
// made the session a superuser that reads every tenant, and the identity
// and foreign-row checks fail on it.
func TestServingLoginsCannotEscalate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := pgtest.NewDatabase(t)
	vars := map[string]string{"DATABASE_URL": url, "STRATA_DATA_DIR": t.TempDir(), "STRATA_JWT_SECRET": loginsSecret, "STRATA_LOG_LEVEL": "warn"}
	base, _, stop := startServe(t, vars)
	defer func() {
		if code := stop(); code != exitOK {
			t.Errorf("serve exited %d", code)
		}
	}()
	waitReady(t, base)
	seedTwoTenants(t, base)

	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	// The running process's own sessions log in as the serving logins.
	rows, err := admin.Query(ctx, `SELECT DISTINCT a.application_name || ' ' || a.usename || ' ' || (r.rolsuper OR r.rolbypassrls)::text
FROM pg_stat_activity a JOIN pg_roles r ON r.rolname = a.usename
WHERE a.datname = current_database() AND a.application_name IN ('strata', 'strata-projector') ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	sessions, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"strata strata_app_login false", "strata-projector strata_projector_login false"}; !slices.Equal(sessions, want) {
		t.Errorf("serve's sessions log in as %q, want %q", sessions, want)
	}

	// Pools opened exactly as serve opens them.
	e := exampleEnv(testEnv(vars))
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	conns, err := e.databases(ctx, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer conns.stop()
	pools, err := openServing(ctx, e, conns, false, db.PoolConfig{MaxConns: 2}, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer pools.close()
	for _, s := range []struct {
		pool        *pgxpool.Pool
		role, other string
	}{{pools.app, db.RoleApp, db.RoleProjector}, {pools.proj, db.RoleProjector, db.RoleApp}} {
		t.Run(s.role, func(t *testing.T) {
			attackSession(ctx, t, admin, s.pool, s.role, s.other)
		})
	}
}

// attackSession runs the escalation attempts on sessions of pool.
func attackSession(ctx context.Context, t *testing.T, admin *pgx.Conn, pool *pgxpool.Pool, role, other string) {
	// Tenant tables, except those the role reads across tenants by design
	// (a policy of the role USING (true): the projector's read of the log).
	rows, err := admin.Query(ctx, `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind = 'r'
  AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped)
  AND NOT EXISTS (SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid AND $2::regrole = ANY (p.polroles) AND pg_get_expr(p.polqual, p.polrelid) = 'true')
  AND NOT c.relname LIKE '%\_\_%'
ORDER BY 1`, db.Schema, role)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(tables) < 5 {
		t.Fatalf("tenant tables: %v %v", tables, err)
	}
	rows, err = admin.Query(ctx, `SELECT rolname FROM pg_roles ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	everyRole, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var foreignSeeded int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM strata.order_list WHERE tenant_id = 'globex'`).Scan(&foreignSeeded); err != nil || foreignSeeded == 0 {
		t.Fatalf("globex has %d rows in order_list (%v): the checks would prove nothing", foreignSeeded, err)
	}

	attempts := []string{
		"RESET ROLE",
		"SET ROLE " + db.RoleOwner,
		"SET ROLE postgres",
		"SET ROLE " + other,
		"SET ROLE pg_read_all_data",
		"SET ROLE pg_read_server_files",
		"SET ROLE pg_database_owner",
		"SET SESSION AUTHORIZATION postgres",
		"SET SESSION AUTHORIZATION " + db.RoleOwner,
		"RESET SESSION AUTHORIZATION",
		"GRANT " + db.RoleOwner + " TO CURRENT_USER",
		"GRANT " + db.RoleOwner + " TO SESSION_USER",
		"ALTER ROLE CURRENT_USER SUPERUSER",
		"ALTER ROLE CURRENT_USER BYPASSRLS",
		"ALTER ROLE SESSION_USER BYPASSRLS",
		"ALTER TABLE strata.order_list DISABLE ROW LEVEL SECURITY",
		"ALTER TABLE strata.order_list NO FORCE ROW LEVEL SECURITY",
		"DROP POLICY order_list_app ON strata.order_list",
		"SET row_security = off",
		"ALTER ROLE SESSION_USER SET app.tenant_id = 'globex'",
		"ALTER ROLE CURRENT_USER SET app.tenant_id = 'globex'",
		"SELECT set_config('app.tenant_id', 'globex', false)",
		"SELECT set_config('app.tenant_id', 'acme'' OR true OR ''', false)",
		"CREATE EXTENSION dblink",
		"COPY (SELECT 1) TO PROGRAM 'true'",
		"SELECT pg_read_file('global/pg_control')",
	}
	for _, r := range everyRole {
		attempts = append(attempts, "SET ROLE "+pgx.Identifier{r}.Sanitize())
	}
	for _, attempt := range attempts {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// The attempt runs on the session, outside a transaction, as a
		// subverted request would leave it for the next one.
		_, attemptErr := conn.Exec(ctx, attempt)
		checkConfined(ctx, t, conn, role, attempt, attemptErr, tables)
		// A poisoned session is not handed to the next attempt.
		conn.Conn().Close(ctx) //nolint:errcheck
		conn.Release()
	}
	// And inside a transaction, as a request's own SQL would run.
	for _, attempt := range attempts {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		err = db.WithTenantTx(domain.NewContext(ctx, "acme"), conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SAVEPOINT attempt"); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, attempt); err != nil {
				_, err = tx.Exec(ctx, "ROLLBACK TO SAVEPOINT attempt")
				return err
			}
			checkConfinedTx(ctx, t, tx, role, attempt, tables)
			return nil
		})
		if err != nil {
			t.Errorf("%s in a transaction: %v", attempt, err)
		}
		conn.Conn().Close(ctx) //nolint:errcheck
		conn.Release()
	}
}

// identity is who a session is after an attempt.
func identity(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (current, session string, super, bypass, owner bool, err error) {
	// The session user counts as much as the current one: what it is, a
	// RESET ROLE makes the session.
	err = q.QueryRow(ctx, `SELECT current_user::text, session_user::text, bool_or(r.rolsuper), bool_or(r.rolbypassrls),
       pg_has_role(current_user, $1, 'MEMBER') OR pg_has_role(session_user, $1, 'MEMBER')
FROM pg_roles r WHERE r.rolname IN (current_user, session_user)`, db.RoleOwner).Scan(&current, &session, &super, &bypass, &owner)
	return
}

// checkConfined checks a session after an attempt: it is the serving role
// or its login, unprivileged, and sees no row outside the tenant in its
// setting (none without one).
func checkConfined(ctx context.Context, t *testing.T, conn *pgxpool.Conn, role, attempt string, attemptErr error, tables []string) {
	t.Helper()
	current, session, super, bypass, owner, err := identity(ctx, conn)
	if err != nil {
		t.Errorf("%s: identity: %v", attempt, err)
		return
	}
	if (current != role && current != session) || super || bypass || owner {
		t.Errorf("%s (error %v): the session is now %s (session user %s, superuser %v, BYPASSRLS %v, member of strata_owner %v)",
			attempt, attemptErr, current, session, super, bypass, owner)
	}
	for _, table := range tables {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM strata.`+pgx.Identifier{table}.Sanitize()+
			` WHERE tenant_id IS DISTINCT FROM nullif(current_setting('app.tenant_id', true), '')`).Scan(&n)
		if err != nil && db.SQLState(err) != "42501" {
			t.Errorf("%s: read %s: %v", attempt, table, err)
		}
		if n > 0 {
			t.Errorf("%s (error %v): as %s the session reads %d rows of %s outside the tenant in app.tenant_id", attempt, attemptErr, current, n, table)
		}
	}
}

// checkConfinedTx checks a transaction of tenant acme after an attempt
// that succeeded in it: no row but acme's, or the tenant it set itself.
func checkConfinedTx(ctx context.Context, t *testing.T, tx pgx.Tx, role, attempt string, tables []string) {
	t.Helper()
	current, session, super, bypass, owner, err := identity(ctx, tx)
	if err != nil {
		t.Errorf("%s in a transaction: identity: %v", attempt, err)
		return
	}
	if (current != role && current != session) || super || bypass || owner {
		t.Errorf("%s in a transaction: the session is now %s (session user %s, superuser %v, BYPASSRLS %v, member of strata_owner %v)",
			attempt, current, session, super, bypass, owner)
	}
	for _, table := range tables {
		if _, err := tx.Exec(ctx, "SAVEPOINT probe"); err != nil {
			t.Fatal(err)
		}
		var n int
		err := tx.QueryRow(ctx, `SELECT count(*) FROM strata.`+pgx.Identifier{table}.Sanitize()+
			` WHERE tenant_id IS DISTINCT FROM nullif(current_setting('app.tenant_id', true), '')`).Scan(&n)
		if err != nil && db.SQLState(err) != "42501" {
			t.Errorf("%s in a transaction: read %s: %v", attempt, table, err)
		}
		if n > 0 {
			t.Errorf("%s in a transaction: as %s it reads %d rows of %s outside the tenant in app.tenant_id", attempt, current, n, table)
		}
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT probe"); err != nil {
			t.Fatal(err)
		}
	}
}

// TestServeRefusesPrivilegedLogin: a serving URL that logs in as a
// superuser is refused with what to set; the development opt-out serves
// through it and says so on start and on /readyz.
func TestServeRefusesPrivilegedLogin(t *testing.T) {
	url := pgtest.NewDatabase(t)
	vars := map[string]string{"DATABASE_URL": url, "STRATA_APP_DATABASE_URL": url, "STRATA_DATA_DIR": t.TempDir(),
		"STRATA_JWT_SECRET": loginsSecret, "STRATA_LOG_LEVEL": "warn"}
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if code := run(ctx, []string{"serve", "--addr", "127.0.0.1:0"}, testEnv(vars), &stdout, &stderr); code != exitFailure {
		t.Fatalf("serve with a superuser serving URL exited %d, want %d: %s", code, exitFailure, stderr.String())
	}
	for _, want := range []string{"refusing to serve", "STRATA_APP_DATABASE_URL", "is a superuser", "STRATA_PROJECTOR_DATABASE_URL", "STRATA_ALLOW_PRIVILEGED_LOGIN=true"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("the refusal does not say %q:\n%s", want, stderr.String())
		}
	}

	vars["STRATA_ALLOW_PRIVILEGED_LOGIN"] = "true"
	base, _, stop := startServe(t, vars)
	defer stop()
	waitReady(t, base)
	res, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(raw), "STRATA_ALLOW_PRIVILEGED_LOGIN") || !strings.Contains(string(raw), "is a superuser") {
		t.Errorf("/readyz with the opt-out does not warn: %s", raw)
	}
}

// TestReadyzReportsLoginGainingPrivileges: a serving login that becomes a
// member of strata_owner while serve runs makes /readyz answer 503 with
// the reason. The login is one of this test's (roles are cluster-wide).
func TestReadyzReportsLoginGainingPrivileges(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := pgtest.NewDatabase(t)
	login := fmt.Sprintf("t_app_%d", time.Now().UnixNano()%1_000_000_000)
	appURL, err := db.LoginURL(url, login)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP ROLE IF EXISTS "+login) })
	vars := map[string]string{"DATABASE_URL": url, "STRATA_APP_DATABASE_URL": appURL, "STRATA_DATA_DIR": t.TempDir(),
		"STRATA_JWT_SECRET": loginsSecret, "STRATA_LOG_LEVEL": "error"}
	base, _, stop := startServe(t, vars) // auto-migration creates the login
	defer stop()
	waitReady(t, base)
	if _, err := admin.Exec(ctx, "GRANT "+db.RoleOwner+" TO "+login); err != nil {
		t.Fatal(err)
	}
	res, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(raw), login+" can SET ROLE to "+db.RoleOwner) {
		t.Errorf("/readyz after GRANT strata_owner: %d %s", res.StatusCode, raw)
	}
	if _, err := admin.Exec(ctx, "REVOKE "+db.RoleOwner+" FROM "+login); err != nil {
		t.Fatal(err)
	}
}

// TestServeRebuildsThroughTheOwnerConnection: rebuilds over HTTP, whole
// and per tenant, work while the serving pools log in as logins that
// cannot touch a table's definition; a query process without DATABASE_URL
// refuses them at once, saying what to set.
func TestServeRebuildsThroughTheOwnerConnection(t *testing.T) {
	url := pgtest.NewDatabase(t)
	vars := map[string]string{"DATABASE_URL": url, "STRATA_DATA_DIR": t.TempDir(), "STRATA_JWT_SECRET": loginsSecret, "STRATA_LOG_LEVEL": "warn"}
	base, _, stop := startServe(t, vars)
	defer func() {
		if code := stop(); code != exitOK {
			t.Errorf("serve exited %d", code)
		}
	}()
	waitReady(t, base)
	seedTwoTenants(t, base)
	crossTenant := func(c *auth.Claims) { c.CrossTenant = true }
	for _, rb := range []struct {
		path   string
		claims []func(*auth.Claims)
	}{
		{"/v1/admin/projections/order_list/rebuild?scope=all", []func(*auth.Claims){crossTenant}},
		{"/v1/admin/projections/order_details/rebuild", nil},
	} {
		status, body := callAs(t, base, "acme", http.MethodPost, rb.path, "", rb.claims...)
		if status != http.StatusAccepted {
			t.Fatalf("POST %s: %d %s", rb.path, status, body)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, body = callAs(t, base, "acme", http.MethodGet, rb.path, "", rb.claims...)
			var job rebuildJobView
			_ = json.Unmarshal(body, &job)
			if job.State == "done" {
				break
			}
			if job.State == "failed" || time.Now().After(deadline) {
				t.Fatalf("rebuild %s: %s", rb.path, body)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	status, body := callAs(t, base, "globex", http.MethodGet, "/v1/orders/o-globex", "")
	if status != http.StatusOK {
		t.Errorf("globex's order after the rebuilds: %d %s", status, body)
	}

	// A query process with serving URLs only: no owner connection.
	appURL, _ := db.LoginURL(url, db.LoginApp)
	projURL, _ := db.LoginURL(url, db.LoginProjector)
	noOwner := map[string]string{"STRATA_APP_DATABASE_URL": appURL, "STRATA_PROJECTOR_DATABASE_URL": projURL,
		"STRATA_DATA_DIR": t.TempDir(), "STRATA_JWT_SECRET": loginsSecret, "STRATA_LOG_LEVEL": "warn"}
	qbase, _, qstop := startServe(t, noOwner, "--roles", "query")
	defer qstop()
	waitReady(t, qbase)
	status, body = callAs(t, qbase, "acme", http.MethodPost, "/v1/admin/projections/order_list/rebuild", "")
	if status != http.StatusServiceUnavailable || !strings.Contains(string(body), "no owner connection") || !strings.Contains(string(body), "DATABASE_URL") {
		t.Errorf("rebuild without an owner connection: %d %s", status, body)
	}
	res, err := http.Get(qbase + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(raw), "no owner connection") {
		t.Errorf("/readyz without an owner connection: %d %s", res.StatusCode, raw)
	}
}

// rebuildJobView is the part of a rebuild job the test reads.
type rebuildJobView struct {
	State string `json:"state"`
	Error string `json:"error"`
}

// TestMigrateNeedsTheOwnerURL: with serving URLs only, `strata migrate`
// says it needs DATABASE_URL instead of migrating a private PostgreSQL.
func TestMigrateNeedsTheOwnerURL(t *testing.T) {
	vars := map[string]string{"STRATA_APP_DATABASE_URL": "postgres://a@127.0.0.1:1/x", "STRATA_PROJECTOR_DATABASE_URL": "postgres://p@127.0.0.1:1/x",
		"STRATA_DATA_DIR": t.TempDir()}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"migrate", "up"}, testEnv(vars), &stdout, &stderr); code != exitFailure ||
		!strings.Contains(stderr.String(), "DATABASE_URL is not set") || !strings.Contains(stderr.String(), "strata_owner") {
		t.Errorf("migrate up without DATABASE_URL: exit %d, %s", code, stderr.String())
	}
}
