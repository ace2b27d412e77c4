package tenancy_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/internal/pgtest"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/tenancy"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type testBundle struct {
	db    *testdb.DB
	owner *pgxpool.Pool // as serve's owner pool: the projector, SET LOCAL ROLE strata_owner per transaction
	app   *pgxpool.Pool // the real serving login of strata_app
	store *tenancy.Store
	actor tenancy.Actor
}

func setup(t *testing.T, cfg tenancy.StoreConfig) *testBundle {
	t.Helper()
	d := testdb.New(t)
	owner, err := db.OpenPool(context.Background(), d.AdminURL, db.PoolConfig{Role: db.RoleProjector, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(owner.Close)
	app, _ := d.ServingPools(t)
	cfg.Pool = owner
	store, err := tenancy.NewStore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &testBundle{db: d, owner: owner, app: app, store: store, actor: tenancy.Actor{Subject: "cli:test", RequestID: "req-1"}}
}

func (b *testBundle) auditRows(t *testing.T, tenant string) []string {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), b.db.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(context.Background(), `SELECT subject || ' ' || action || ' ' || coalesce(tenant, '-') FROM strata.tenant_audit
		WHERE coalesce(tenant, '-') = $1 ORDER BY id`, tenant)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestProvisionTwiceIsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, tenancy.StoreConfig{})
	ctx := context.Background()
	q := &tenancy.Quotas{RateCommands: "5/s,burst=10"}
	first, err := b.store.Provision(ctx, b.actor, tenancy.ProvisionRequest{ID: "acme", Name: "Acme Corp", Quotas: q})
	if err != nil {
		t.Fatal(err)
	}
	if first.Status != tenancy.StatusActive || first.Name != "Acme Corp" || first.Placement != "pool" || first.Quotas != *q {
		t.Fatalf("provisioned %+v", first)
	}
	if got := first.StepsDone(); len(got) != len(tenancy.ProvisionSteps) {
		t.Fatalf("steps done %v, want all %d", got, len(tenancy.ProvisionSteps))
	}
	second, err := b.store.Provision(ctx, b.actor, tenancy.ProvisionRequest{ID: "acme", Name: "Acme Corp", Quotas: q})
	if err != nil {
		t.Fatal(err)
	}
	if second.Version != first.Version || !second.UpdatedAt.Equal(first.UpdatedAt) || fmt.Sprint(second.Provisioning) != fmt.Sprint(first.Provisioning) {
		t.Fatalf("the second provision changed the tenant:\n first  %+v\n second %+v", first, second)
	}
	if got := b.auditRows(t, "acme"); !slices.Equal(got, []string{"cli:test provision acme", "cli:test provision acme"}) {
		t.Fatalf("audit %q", got)
	}
}

// A provision that fails between steps leaves a visible tenant with the
// steps it did; provision again finishes it, without redoing them.
func TestProvisionResumesAfterAFailureBetweenSteps(t *testing.T) {
	t.Parallel()
	injected := errors.New("injected failure")
	failAfter := "quotas"
	b := setup(t, tenancy.StoreConfig{
		DefaultQuotasFunc: func(domain.TenantID) tenancy.Quotas { return tenancy.Quotas{InFlightCommands: "4"} },
		AfterStepFunc: func(_ context.Context, _ domain.TenantID, step string) error {
			if step == failAfter {
				return injected
			}
			return nil
		}})
	ctx := context.Background()
	dir := tenancy.NewDirectory(tenancy.DirectoryConfig{Pool: b.app})

	if _, err := b.store.Provision(ctx, b.actor, tenancy.ProvisionRequest{ID: "half", Name: "Half"}); !errors.Is(err, injected) {
		t.Fatalf("provision: %v, want the injected failure", err)
	}
	half, err := b.store.Get(ctx, b.actor, "half")
	if err != nil {
		t.Fatal(err)
	}
	if half.Status != tenancy.StatusProvisioning || !slices.Equal(half.StepsDone(), []string{"directory", "quotas"}) ||
		!slices.Equal(half.StepsPending(), []string{"resources", "activate"}) || half.Quotas.InFlightCommands != "4" {
		t.Fatalf("half-provisioned tenant: %+v (done %v, pending %v)", half, half.StepsDone(), half.StepsPending())
	}
	if err := dir.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if code := admit(dir, "half"); code != "tenant_unknown" {
		t.Fatalf("a half-provisioned tenant is admitted (%q)", code)
	}

	failAfter = ""
	done, err := b.store.Provision(ctx, b.actor, tenancy.ProvisionRequest{ID: "half"})
	if err != nil {
		t.Fatal(err)
	}
	if done.Status != tenancy.StatusActive || len(done.StepsPending()) != 0 || done.Name != "Half" {
		t.Fatalf("finished tenant: %+v", done)
	}
	for _, step := range []string{"directory", "quotas"} {
		if !done.Provisioning[step].Equal(half.Provisioning[step]) {
			t.Fatalf("step %s was redone: %v then %v", step, half.Provisioning[step], done.Provisioning[step])
		}
	}
	if err := dir.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if code := admit(dir, "half"); code != "" {
		t.Fatalf("the provisioned tenant is refused (%q)", code)
	}
}

// admit returns the Gate's refusal code for a request of tenant ("" if
// admitted).
func admit(d *tenancy.Directory, tenant domain.TenantID) string {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r = r.WithContext(domain.NewContext(r.Context(), tenant))
	if err := d.Admit(r); err != nil {
		return err.Code
	}
	return ""
}

func TestGateByStatusAndSetting(t *testing.T) {
	t.Parallel()
	b := setup(t, tenancy.StoreConfig{})
	ctx := context.Background()
	for _, id := range []domain.TenantID{"on", "off"} {
		if _, err := b.store.Provision(ctx, b.actor, tenancy.ProvisionRequest{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.store.Suspend(ctx, b.actor, "off", "unpaid"); err != nil {
		t.Fatal(err)
	}
	required := tenancy.NewDirectory(tenancy.DirectoryConfig{Pool: b.app}) // the new installation's setting
	if code := admit(required, "on"); code != "unavailable" {
		t.Fatalf("before the first load: %q, want unavailable", code)
	}
	off := false
	lenient := tenancy.NewDirectory(tenancy.DirectoryConfig{Pool: b.app, Require: &off})
	for _, d := range []*tenancy.Directory{required, lenient} {
		if err := d.Load(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !required.Required() || lenient.Required() {
		t.Fatalf("required %v (want true: migration 008 on an empty log), lenient %v", required.Required(), lenient.Required())
	}
	for _, c := range []struct {
		d      *tenancy.Directory
		tenant domain.TenantID
		want   string
	}{
		{required, "on", ""}, {required, "off", "tenant_suspended"}, {required, "nobody", "tenant_unknown"},
		{lenient, "on", ""}, {lenient, "off", "tenant_suspended"}, {lenient, "nobody", ""},
	} {
		if got := admit(c.d, c.tenant); got != c.want {
			t.Errorf("required=%v tenant %s: %q, want %q", c.d.Required(), c.tenant, got, c.want)
		}
	}
	if e, err := required.Check(ctx, "off"); err != nil || e.Status != tenancy.StatusSuspended {
		t.Fatalf("strong check: %+v %v", e, err)
	}
	if _, err := required.Check(ctx, "nobody"); !errors.Is(err, tenancy.ErrNotFound) {
		t.Fatalf("strong check of an unknown tenant: %v", err)
	}
}

// Suspend and resume are transitions of an active tenant; repeating one
// changes nothing; every call is audited with its reason.
func TestSuspendResume(t *testing.T) {
	t.Parallel()
	b := setup(t, tenancy.StoreConfig{})
	ctx := context.Background()
	if _, err := b.store.Suspend(ctx, b.actor, "ghost", "x"); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("suspend of an unknown tenant: %v", err)
	}
	if _, err := b.store.Provision(ctx, b.actor, tenancy.ProvisionRequest{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	s1, err := b.store.Suspend(ctx, b.actor, "acme", "security incident")
	if err != nil || s1.Status != tenancy.StatusSuspended || s1.StatusReason != "security incident" {
		t.Fatalf("suspend: %+v %v", s1, err)
	}
	s2, err := b.store.Suspend(ctx, b.actor, "acme", "again")
	if err != nil || s2.Version != s1.Version {
		t.Fatalf("second suspend changed the tenant: %+v %v", s2, err)
	}
	r, err := b.store.Resume(ctx, b.actor, "acme", "resolved")
	if err != nil || r.Status != tenancy.StatusActive {
		t.Fatalf("resume: %+v %v", r, err)
	}
	got := b.auditRows(t, "acme")
	want := []string{"cli:test provision acme", "cli:test suspend acme", "cli:test suspend acme", "cli:test resume acme"}
	if !slices.Equal(got, want) {
		t.Fatalf("audit %q, want %q", got, want)
	}
}

// The serving role reads what it enforces and nothing else, and writes
// nothing of the directory.
func TestServingRoleReadsOnlyStatusAndQuotas(t *testing.T) {
	t.Parallel()
	b := setup(t, tenancy.StoreConfig{})
	ctx := context.Background()
	if _, err := b.store.Provision(ctx, b.actor, tenancy.ProvisionRequest{ID: "acme", Name: "Secret Name"}); err != nil {
		t.Fatal(err)
	}
	var status string
	if err := b.app.QueryRow(ctx, `SELECT status FROM tenants WHERE id = 'acme'`).Scan(&status); err != nil || status != "active" {
		t.Fatalf("app reads status: %q %v", status, err)
	}
	for _, sql := range []string{
		`SELECT name FROM tenants`,
		`SELECT retention FROM tenants`,
		`SELECT * FROM tenants`,
		`SELECT 1 FROM tenant_audit`,
		`UPDATE tenants SET status = 'active'`,
		`INSERT INTO tenants (id) VALUES ('mine')`,
		`DELETE FROM tenants`,
		`INSERT INTO tenant_audit (subject, action) VALUES ('me', 'forge')`,
		`UPDATE engine_settings SET value = 'false'`,
	} {
		_, err := b.app.Exec(ctx, sql)
		if db.SQLState(err) != "42501" {
			t.Errorf("%s as strata_app: %v, want permission denied", sql, err)
		}
	}
}

// The push: a suspension committed through the Store reaches a running
// Directory within the bound, without waiting for the full reload.
func TestDirectoryPushIsFasterThanTheReload(t *testing.T) {
	t.Parallel()
	b := setup(t, tenancy.StoreConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := b.store.Provision(ctx, b.actor, tenancy.ProvisionRequest{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	applied := make(chan domain.TenantID, 16)
	dir := tenancy.NewDirectory(tenancy.DirectoryConfig{Pool: b.app, Reload: time.Hour,
		AppliedFunc: func(id domain.TenantID, _ tenancy.Entry) { applied <- id }})
	done := make(chan error, 1)
	go func() { done <- dir.Run(ctx) }()
	waitFor(t, 10*time.Second, func() bool { return dir.Loaded() })
	if code := admit(dir, "acme"); code != "" {
		t.Fatalf("active tenant refused: %q", code)
	}
	start := time.Now()
	if _, err := b.store.Suspend(ctx, b.actor, "acme", "test"); err != nil {
		t.Fatal(err)
	}
	committed := time.Now()
	waitFor(t, 5*time.Second, func() bool { return admit(dir, "acme") == "tenant_suspended" })
	t.Logf("suspension reached the directory %s after the commit returned (%s after the call began)", time.Since(committed), time.Since(start))
	if time.Since(committed) > time.Second {
		t.Fatalf("the push took %s, beyond the 1s bound", time.Since(committed))
	}
	if _, err := b.store.SetQuotas(ctx, b.actor, "acme", tenancy.Quotas{RateQueries: "7/s"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, func() bool {
		r := dir.Rates("acme").Queries
		return r != nil && r.Limit == 7
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Migration 008 turns the directory requirement on for a new installation
// (no event ever appended) and off for an existing one.
func TestRequireSettingFollowsTheInstallation(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	ctx := context.Background()
	read := func() bool {
		conn, err := pgx.Connect(ctx, d.AdminURL)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var v bool
		if err := conn.QueryRow(ctx, `SELECT value::boolean FROM strata.engine_settings WHERE name = 'require_tenant_directory'`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if !read() {
		t.Fatal("a new installation does not require the directory")
	}
	// Back to before 008, however many migrations came after it.
	admin, err := pgx.Connect(ctx, d.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	var after008 int
	err = admin.QueryRow(ctx, `SELECT count(*) FROM strata.schema_migrations WHERE line = $1 AND version >= 8`, db.EngineLineName).Scan(&after008)
	admin.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Down(ctx, d.AdminURL, after008, nil); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, d.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, `INSERT INTO strata.events (tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata)
		VALUES ('acme', 's-1', 1, gen_random_uuid(), 't', 1, '{}', '{}')`)
	conn.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Up(ctx, d.AdminURL, nil); err != nil {
		t.Fatal(err)
	}
	if read() {
		t.Fatal("an installation with events requires the directory after the upgrade")
	}
}

func waitFor(t *testing.T, within time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s", within)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestUnfinishedImportIsNotServed (issue 29): a tenant whose archive import
// began and did not finish (its tenant_arrivals row has no end) is neither
// activated by a provision nor resumed: the process managers and the relay
// pass over every event of such a tenant as imported history, so a command
// served meanwhile would never be acted on. Once the import ended, both
// work. Before, provisioning by hand activated it.
func TestUnfinishedImportIsNotServed(t *testing.T) {
	t.Parallel()
	b := setup(t, tenancy.StoreConfig{})
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, b.db.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO strata.tenant_arrivals (tenant, source) VALUES ('gamma', 'import:acme:0123456789abcdef'), ('delta', 'import:acme:0123456789abcdef')`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.Provision(ctx, b.actor, tenancy.ProvisionRequest{ID: "gamma"}); !errors.Is(err, domain.ErrRejected) || !strings.Contains(err.Error(), "import") {
		t.Fatalf("provision of a tenant being imported: %v, want a refusal naming the import", err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO strata.tenants (id, name, status) VALUES ('delta', 'Delta', 'suspended')`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.Resume(ctx, b.actor, "delta", "go"); !errors.Is(err, domain.ErrRejected) {
		t.Fatalf("resume of a tenant being imported: %v, want a refusal", err)
	}
	if _, err := conn.Exec(ctx, `UPDATE strata.tenant_arrivals SET through_tx = pg_current_xact_id(), through_pos = 1`); err != nil {
		t.Fatal(err)
	}
	if got, err := b.store.Provision(ctx, b.actor, tenancy.ProvisionRequest{ID: "gamma"}); err != nil || got.Status != tenancy.StatusActive {
		t.Fatalf("provision after the import ended: %+v %v", got, err)
	}
	if got, err := b.store.Resume(ctx, b.actor, "delta", "go"); err != nil || got.Status != tenancy.StatusActive {
		t.Fatalf("resume after the import ended: %+v %v", got, err)
	}
}
