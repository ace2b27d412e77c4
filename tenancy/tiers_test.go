package tenancy_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/httpapi"
	"github.com/strata-es/strata/tenancy"
)

// A tenant's effective quotas, key by key: its own, else its tier's, else
// none (the process default, which the limiters apply to an unset key).
func TestEffectiveQuotasFallBackToTheTier(t *testing.T) {
	t.Parallel()
	b := setup(t, tenancy.StoreConfig{})
	ctx := context.Background()
	for _, id := range []domain.TenantID{"own", "tiered", "plain"} {
		if _, err := b.store.Provision(ctx, b.actor, tenancy.ProvisionRequest{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.store.SetQuotas(ctx, b.actor, "own", tenancy.Quotas{InFlightCommands: "3"}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []domain.TenantID{"own", "tiered"} {
		tn, err := b.store.SetTier(ctx, b.actor, id, tenancy.TierFree)
		if err != nil || tn.Tier != tenancy.TierFree {
			t.Fatalf("set tier of %s: %+v %v", id, tn, err)
		}
	}
	if _, err := b.store.SetTier(ctx, b.actor, "plain", "gold"); !errors.Is(err, tenancy.ErrNoTier) {
		t.Fatalf("an unknown tier: %v, want ErrNoTier", err)
	}
	tiers, err := b.store.Tiers(ctx, b.actor)
	if err != nil || len(tiers) != 3 || tiers[1].Name != tenancy.TierFree {
		t.Fatalf("seeded tiers: %+v %v", tiers, err)
	}
	free := tiers[1].Quotas
	if free.InFlightCommands != "8" || free.RateCommands != "20/s,burst=40" {
		t.Fatalf("the free tier's seeded quotas: %+v", free)
	}

	dir := tenancy.NewDirectory(tenancy.DirectoryConfig{Pool: b.app})
	if err := dir.Load(ctx); err != nil {
		t.Fatal(err)
	}
	// own: its own in_flight_commands, the tier's everything else.
	if s := dir.Slots("own"); s.Commands != 3 || s.Queries != 16 || s.Waits != 4 {
		t.Fatalf("own's slots %+v, want its own 3 commands over free's 16 queries, 4 waits", s)
	}
	if r := dir.Rates("own"); r.Commands == nil || r.Commands.String() != (httpapi.Rate{Limit: 20, Burst: 40}).String() {
		t.Fatalf("own's command rate %v, want free's 20/s,burst=40", r.Commands)
	}
	if s := dir.Slots("tiered"); s.Commands != 8 {
		t.Fatalf("tiered's slots %+v, want free's 8 commands", s)
	}
	// plain: no tier, no quotas: every key to the process default.
	if s, r := dir.Slots("plain"), dir.Rates("plain"); s != (httpapi.TenantSlots{}) || r.Commands != nil || r.Queries != nil {
		t.Fatalf("plain's limits %+v %+v, want none (the process defaults)", s, r)
	}
	if q, ok := dir.Effective("own"); !ok || q.InFlightCommands != "3" || q.InFlightQueries != "16" {
		t.Fatalf("own's effective quotas %+v", q)
	}
	// Out of the tier: the process defaults under its own quotas again.
	if _, err := b.store.SetTier(ctx, b.actor, "tiered", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := dir.Check(ctx, "tiered"); err != nil {
		t.Fatal(err)
	}
	if s := dir.Slots("tiered"); s != (httpapi.TenantSlots{}) {
		t.Fatalf("tiered's slots out of the tier: %+v", s)
	}
	var audit []string
	for _, a := range b.auditRows(t, "own") {
		audit = append(audit, a)
	}
	if want := "cli:test set_tier own"; audit[len(audit)-1] != want {
		t.Fatalf("audit %q, want it to end with %q", audit, want)
	}
}

// A tier's change is pushed: a running Directory applies it to the tier's
// tenants without waiting for the full reload.
func TestDirectoryPushOfATierChange(t *testing.T) {
	t.Parallel()
	b := setup(t, tenancy.StoreConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := b.store.Provision(ctx, b.actor, tenancy.ProvisionRequest{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.SetTier(ctx, b.actor, "acme", tenancy.TierPro); err != nil {
		t.Fatal(err)
	}
	dir := tenancy.NewDirectory(tenancy.DirectoryConfig{Pool: b.app, Reload: time.Hour})
	done := make(chan struct{})
	go func() { defer close(done); _ = dir.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor(t, 5*time.Second, func() bool { return dir.Loaded() })
	if s := dir.Slots("acme"); s.Commands != 32 {
		t.Fatalf("acme's slots %+v, want pro's 32 commands", s)
	}
	// Listening: the load ran on the listening connection after LISTEN,
	// so a change committed from now on is notified.
	start := time.Now()
	if _, err := b.store.SetTierQuotas(ctx, b.actor, tenancy.TierPro, tenancy.Quotas{InFlightCommands: "5"}, ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, func() bool { return dir.Slots("acme").Commands == 5 })
	t.Logf("tier change applied %s after commit (full reload every hour)", time.Since(start).Round(time.Millisecond))
	if s := dir.Slots("acme"); s.Queries != 0 {
		t.Fatalf("acme's query slots %d after pro lost in_flight_queries, want the default (0)", s.Queries)
	}
}

// The serving role reads the tiers and a tenant's tier and cohort, and
// writes neither.
func TestServingRoleReadsTiers(t *testing.T) {
	t.Parallel()
	b := setup(t, tenancy.StoreConfig{})
	ctx := context.Background()
	var n int
	if err := b.app.QueryRow(ctx, `SELECT count(*) FROM tenant_tiers`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("app reads tiers: %d %v", n, err)
	}
	for _, sql := range []string{
		`UPDATE tenant_tiers SET quotas = '{}'`,
		`INSERT INTO tenant_tiers (name) VALUES ('mine')`,
		`UPDATE tenants SET tier = 'pro'`,
	} {
		if _, err := b.app.Exec(ctx, sql); db.SQLState(err) != "42501" {
			t.Errorf("%s as strata_app: %v, want permission denied", sql, err)
		}
	}
}
